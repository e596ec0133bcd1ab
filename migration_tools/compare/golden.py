"""Golden bundles: the legacy side of a comparison, recorded once on TF 2.15,
replayed against the port on any TensorFlow.

While a live comparison runs, every answer of the legacy side goes to a
tape (pair/recorded.py); a bundle keeps the tape with the batches and the
options, so that the same checks, tolerances and report run later without
tf.estimator, the legacy side answered from the tape.

A bundle is one ``.npz`` file: the arrays, and a JSON manifest (format,
versions it was recorded with, the options, the replica counts, the input
batches and the tape) as a string entry. ``load`` needs numpy alone, so a
port on JAX is checked with no TensorFlow in its process.
"""
from __future__ import annotations

import dataclasses

from kit_core import room
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import stored
from migration_tools.pair.recorded import Tape

# 2: describe_run, and the slots of optimizers read by what they do.
# 3: the slots before any step, of every optimizer (their starting values);
# the state beyond the weights (train_variables, averages), the evaluation
# on the weights, the serving inputs (strings as base64).
FORMAT = 3
# A bundle's size in model-sized arrays (the model_fn's variables' bytes),
# per recorded replica count: at --steps=1, and for each further step. The
# least a model holds, one without optimizer slots (the kit's pair, plain
# SGD: 4.42, then 1.85 a step); each slot adds about 1.2 a step (Adam's two:
# 4.2 a step, from 100k parameters up). Measured with python
# benchmarks/bundle_size.py and the kit's pair (docs/EQUIVALENCE.md, "Bundle
# sizes"). The slots are not known before any work, so the estimate is the
# least the bundle takes, and refuses nothing that would fit.
ARRAYS_AT_ONE_STEP = 4.4
ARRAYS_PER_STEP = 1.85


def estimate(model_bytes: int, steps: int, replica_counts: int
             ) -> room.Estimate:
  """The least a bundle takes on disk and in memory (the tape is held
  whole until it is written), from the model's bytes."""
  arrays = replica_counts * (ARRAYS_AT_ONE_STEP +
                             ARRAYS_PER_STEP * (steps - 1))
  size = int(arrays * model_bytes)
  return room.Estimate(
      'the bundle', size, size,
      f'at least {arrays:.1f} model-sized arrays of '
      f'{room.size_text(model_bytes)} at --steps={steps} on {replica_counts} '
      f'replica count{"s" if replica_counts > 1 else ""}')


@dataclasses.dataclass(frozen=True)
class Bundle:
  """A recorded comparison: what it needs to run again without the legacy code.

  options: the harness.Options fields, as a dict.
  replica_counts: the runs recorded (1 first).
  serving: whether the served-predictions check was recorded.
  batches: the legacy input_fn's batches, numpy (features, labels or None).
  tape: the legacy side's answers.
  versions: what recorded it ({'tensorflow': ..., 'kit_format': ...}).
  """
  options: dict
  replica_counts: list[int]
  serving: bool
  batches: list
  tape: Tape
  versions: dict


def save(path: str, bundle: Bundle) -> str:
  """Writes the bundle to path (.npz) through a temporary file; returns path."""
  arrays = {}
  manifest = {
      'format': FORMAT, 'versions': bundle.versions,
      'options': stored.encode(bundle.options, arrays),
      'replica_counts': bundle.replica_counts, 'serving': bundle.serving,
      'batches': stored.encode(bundle.batches, arrays),
      'shards': bundle.tape.shards,
      'answers': {k: stored.encode(v, arrays) for k, v in
                  bundle.tape.answers.items()}}
  return stored.save(path, manifest, arrays)


def load(path: str) -> Bundle:
  """Reads a bundle written by save.

  Raises:
    KitError: no such file, not a bundle, or a format this kit cannot read.
  """
  try:
    manifest, arrays = stored.load(path)
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'cannot read the bundle {path} ({one_line(e)}); record '
                   'it again with migration-compare --record_bundle') from e
  if manifest is None:
    raise KitError(f'{path} is not a golden bundle (no manifest); record one '
                   'with migration-compare --record_bundle')
  try:
    if manifest.get('format') != FORMAT:
      raise KitError(f'{path} is a bundle of format '
                     f'{manifest.get("format")}; this kit reads format '
                     f'{FORMAT}: record it again')
    tape = Tape({k: stored.decode(v, arrays)
                 for k, v in manifest['answers'].items()},
                dict(manifest['shards']))
    return Bundle(stored.decode(manifest['options'], arrays),
                  manifest['replica_counts'], manifest['serving'],
                  stored.decode(manifest['batches'], arrays), tape,
                  manifest['versions'])
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise KitError(f'the bundle {path} is incomplete ({one_line(e)}): it was '
                   'not written whole by this kit; record it again with '
                   'migration-compare --record_bundle') from e
