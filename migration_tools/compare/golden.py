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

Neither side holds a bundle whole: ``recording`` writes each answer's
arrays as the legacy side gives it, and a loaded bundle reads each answer
from disk when it is asked. A bundle grows with the steps; the memory of
the tools that make and read it does not.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

from kit_core import exits
from kit_core import npz_files
from kit_core import room
from kit_core import timing
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import recorded
from migration_tools.pair import stored

# 2: describe_run, and the slots of optimizers read by what they do.
# 3: the slots before any step, of every optimizer (their starting values);
# the state beyond the weights (train_variables, averages), the evaluation
# on the weights, the serving inputs (strings as base64).
# 4: float arrays coded as differences from earlier ones (array_codec).
# 5: the slots before any step read as many times whatever the port (once
# where the legacy optimizer is in the tables, twice where it is read by
# what it does: checks/optimizer.py); 3 and 4 are asked as they were.
FORMAT = 5
# The formats this kit reads: a bundle recorded on TF 2.15 must stay
# readable once TF 2.15 is gone.
READS = (3, 4, 5)
# A bundle's size in model-sized arrays (the model_fn's variables' bytes),
# format 4 (each float array coded against earlier ones): at --steps=1 on the
# first replica count, for each further step, and for each further replica
# count (its arrays are mostly the first count's, to rounding). The least a
# model holds, one without optimizer slots (the kit's pair, plain SGD, 1.8 MB:
# 2.11 arrays at --steps=1 on one replica count, 0.90 a further step, 0.12 a
# further count); Adam's slots, the batches and the layer outputs add to it.
# Measured with the kit's pair (docs/EQUIVALENCE.md, "Bundle sizes"). The
# slots are not known before any work, so the estimate is the least the
# bundle takes, and refuses nothing that would fit.
ARRAYS_AT_ONE_STEP = 2.0
ARRAYS_PER_STEP = 0.85
ARRAYS_PER_REPLICA_COUNT = 0.1
# In memory: a step's answers, about 4.4 model-sized arrays at a time (the
# bundle is written as it is recorded). The arrays the coder predicts from
# come on top (array_codec.Encoder: the first and the last few of each shape,
# within HELD_BYTES); how much of the model they hold depends on how many of
# its variables share a shape, so the least figure leaves them out.
ARRAYS_IN_FLIGHT = 4.4


def estimate(model_bytes: int, steps: int, replica_counts: int
             ) -> room.Estimate:
  """The least a bundle takes on disk, from the model's bytes; in memory,
  what a step's answers hold at a time."""
  arrays = (ARRAYS_AT_ONE_STEP + ARRAYS_PER_STEP * (steps - 1) +
            ARRAYS_PER_REPLICA_COUNT * (replica_counts - 1))
  memory = ARRAYS_IN_FLIGHT * model_bytes
  return room.Estimate(
      'the bundle', int(arrays * model_bytes), int(memory),
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
  tape: the legacy side's answers: asked (recorded.Answers) when loaded,
    kept (a Recording) while recorded.
  versions: what recorded it ({'tensorflow': ..., 'kit_format': ...}).
  """
  options: dict
  replica_counts: list[int]
  serving: bool
  batches: list
  tape: recorded.Answers | recorded.Keeper
  versions: dict


class Recording:
  """A bundle being written as it is recorded: the tape the legacy side's
  answers are kept on (recorded.Keeper), each answer's arrays written at
  once and its JSON kept; then finish() with the rest of the bundle."""

  def __init__(self, writer: stored.Writer):
    self._writer = writer
    self._answers: dict[str, object] = {}
    self.shards: dict[str, int] = {}

  def keep(self, key: str, answer) -> None:
    with timing.spent('writing the bundle'):
      self._answers[key] = self._writer.encode(answer)

  def finish(self, bundle: Bundle) -> None:
    """Completes the file with bundle's options, batches and versions (its
    tape is this one); never after a signal (a bundle missing answers would
    stand under the final name)."""
    exits.raise_if_signalled()
    self._writer.finish({
        'format': FORMAT, 'versions': bundle.versions,
        'options': self._writer.encode(bundle.options),
        'replica_counts': bundle.replica_counts, 'serving': bundle.serving,
        'batches': self._writer.encode(bundle.batches),
        'shards': self.shards, 'answers': self._answers})


@contextlib.contextmanager
def recording(path: str) -> Iterator[Recording]:
  """A Recording into path (.npz) under a temporary name: in place when the
  block ends with it finished, gone if the block raises."""
  with stored.writing(path, deltas=True) as writer:
    yield Recording(writer)


def save(path: str, bundle: Bundle) -> str:
  """Writes a bundle whose tape is held (a recorded.Tape); returns path."""
  with recording(path) as written:
    for key in bundle.tape.keys():
      written.keep(key, bundle.tape.answer(key))
    written.shards.update(bundle.tape.shards)
    written.finish(bundle)
  return path


class _Stored:
  """A loaded bundle's tape (recorded.Answers): each answer decoded from
  the file when it is asked."""

  def __init__(self, answers: dict, arrays, shards: dict,
               recorded_format: int | None = None):
    self._answers, self._arrays, self.shards = answers, arrays, shards
    # The format it was recorded in: the questions its recording asked.
    self.recorded_format = recorded_format

  def answer(self, key: str):
    with timing.spent('reading the bundle'):
      return stored.decode(self._answers[key], self._arrays)

  def keys(self):
    return self._answers.keys()

  def __contains__(self, key: str) -> bool:
    return key in self._answers

  def __len__(self) -> int:
    return len(self._answers)


def load(path: str) -> Bundle:
  """Reads a bundle written by save or a Recording; its answers stay on
  disk until asked.

  Raises:
    KitError: no such file, not a bundle, a format this kit cannot read,
      or damaged anywhere.
  """
  try:
    manifest, arrays = stored.open_lazily(path)
  except npz_files.Damaged as e:
    raise KitError(f'cannot read the bundle {path} ({e.reason}); record it '
                   'again with migration-compare --record_bundle') from e
  except KitError:  # A signal, a FIFO, past the memory: said in full.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'cannot read the bundle {path} ({one_line(e)}); record '
                   'it again with migration-compare --record_bundle') from e
  if manifest is None:
    raise KitError(f'{path} is not a golden bundle (no manifest); record one '
                   'with migration-compare --record_bundle')
  try:
    if manifest.get('format') not in READS:
      raise KitError(f'{path} is a bundle of format '
                     f'{manifest.get("format")!r}; this kit reads formats '
                     f'{" and ".join(map(repr, READS))}: record it again')
    missing = stored.needed_keys(manifest) - {name for name in arrays.files}
    if missing:
      raise KeyError(min(missing))  # The array named, as a lookup would.
    stored.check_codings(path, manifest)
    bundle = Bundle(stored.decode(manifest['options'], arrays),
                    manifest['replica_counts'], manifest['serving'],
                    stored.decode(manifest['batches'], arrays),
                    _Stored(manifest['answers'], arrays,
                            dict(manifest['shards']), manifest['format']),
                    manifest['versions'])
    _check_options(bundle)
    return bundle
  except (KeyError, TypeError, ValueError, AttributeError,
          RecursionError) as e:
    raise KitError(f'the bundle {path} is incomplete ({one_line(e)}): it was '
                   'not written whole by this kit; record it again with '
                   'migration-compare --record_bundle') from e


# The options a bundle records, by harness.Options field (a test holds them
# to its fields): the type each must have and the least it may be.
_OPTION_TYPES = {'steps': (int, 1), 'global_batch': (int, 1),
                 'eval_batches': (int, 0), 'seed': (int, None),
                 'beyond_init': ((int, float), 0), 'params': (dict, None),
                 'warm_start_from': (str, None), 'legacy_flags': (str, None)}


def _check_options(bundle: Bundle) -> None:
  """Raises ValueError for options this kit cannot have written: of
  another type, out of range, or more steps than the bundle holds answers
  (each step answers at least once), which replaying would loop over."""
  unknown = sorted(set(bundle.options) - set(_OPTION_TYPES))
  if unknown:
    raise ValueError(f'options {", ".join(unknown)} are none of this kit\'s')
  for name, (kind, least) in _OPTION_TYPES.items():
    if name not in bundle.options:
      continue  # Its default (harness.Options); beyond_init: before it.
    value = bundle.options[name]
    if (not isinstance(value, kind) or isinstance(value, bool) or
        (least is not None and value < least)):
      raise ValueError(f'option {name} is {value!r}')
  counts = bundle.replica_counts
  if (not isinstance(counts, list) or not counts or counts[0] != 1 or
      not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 64
              for c in counts)):
    raise ValueError(f'replica_counts is {counts!r}')
  if bundle.options.get('steps', 1) > len(bundle.tape):
    raise ValueError(f'option steps is {bundle.options["steps"]}, and the '
                     f'bundle holds {len(bundle.tape)} answers')
  if not isinstance(bundle.batches, list) or not bundle.batches:
    raise ValueError('it holds no batch')
