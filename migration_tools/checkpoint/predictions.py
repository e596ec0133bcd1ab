"""The legacy model_fn's predictions on an Estimator checkpoint, recorded on
TF 2.15 so that --verify runs where the legacy code cannot (a port on JAX,
the newest TensorFlow):

  migration-convert-checkpoint --estimator_dir=D --legacy_model_fn=... \\
      --legacy_input_fn=... --record_predictions=P.npz     # on TF 2.15
  migration-convert-checkpoint --estimator_dir=D --output=O --port=... \\
      --verify --predictions=P.npz                          # anywhere

A recording is one ``.npz`` (pair/stored.py): the features the legacy
input_fn gave, every output the model_fn predicted on them, each layer's
output on the first example (compare/layers; a recording made before
layers were kept holds none, and --verify then compares the outputs
alone, as it says), and which
checkpoint predicted them (its file name, step and the SHA-256 of its index,
which holds every tensor's CRC), so that a recording of another checkpoint
is refused rather than compared.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np

from kit_core import checkpoint_files
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import stored

FORMAT = 1
RECORD_AGAIN = ('record it again on TF 2.15 with migration-convert-checkpoint '
                '--record_predictions')


@dataclasses.dataclass(frozen=True)
class Recorded:
  """What the legacy side predicted.

  checkpoint: {'name': file name, 'step': global step, 'index_sha256'}.
  features: the input_fn's features (an array or a dict of arrays).
  outputs: {output name: array}, the model_fn's PREDICT outputs.
  averages: predicted on the checkpoint's moving averages.
  batch: the batch size the model_fn predicted with.
  versions: what recorded it ({'tensorflow': ...}).
  layers: {legacy scope: its output on the first example, flattened}, in
    the legacy model's order ({}: not recorded).
  """
  checkpoint: dict
  features: object
  outputs: dict
  averages: bool
  batch: int
  versions: dict
  layers: dict = dataclasses.field(default_factory=dict)

  @property
  def examples(self) -> int:
    first = (next(iter(self.features.values())) if isinstance(
        self.features, dict) else self.features)
    return len(first)


def identity(checkpoint_path: str) -> dict:
  """Which checkpoint this is: its file name, the step the name gives, and
  its index's SHA-256."""
  with open(checkpoint_path + '.index', 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  return {'name': os.path.basename(checkpoint_path),
          'step': checkpoint_files.step_of(checkpoint_path),
          'index_sha256': digest}


def save(path: str, recorded: Recorded) -> str:
  """Writes the recording to path (.npz) through a temporary file."""
  arrays = {}
  manifest = {'format': FORMAT, 'versions': recorded.versions,
              'checkpoint': recorded.checkpoint,
              'averages': recorded.averages, 'batch': recorded.batch,
              'features': stored.encode(recorded.features, arrays),
              'outputs': stored.encode(recorded.outputs, arrays),
              'layers': stored.encode(recorded.layers, arrays)}
  return stored.save(path, manifest, arrays)


def load(path: str) -> Recorded:
  """Reads a recording written by save.

  Raises:
    KitError: no such file, not a recording, or another format.
  """
  try:
    manifest, arrays = stored.load(path, '--predictions',
                                   referenced_only=True)
  except KitError as e:  # Its line names the flag and the path already.
    raise KitError(f'{e}; {RECORD_AGAIN}') from e
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'cannot read --predictions {path} ({one_line(e)}); '
                   f'{RECORD_AGAIN}') from e
  if (manifest is None or manifest.get('format') != FORMAT or
      'outputs' not in manifest):
    raise KitError(f'--predictions {path} is not a recording of predictions '
                   f'of format {FORMAT}; {RECORD_AGAIN}')
  try:
    recorded = Recorded(manifest['checkpoint'],
                        stored.decode(manifest['features'], arrays),
                        stored.decode(manifest['outputs'], arrays),
                        manifest['averages'], manifest['batch'],
                        manifest['versions'],
                        stored.decode(manifest.get('layers', {}), arrays))
    _check_examples(recorded)
  except (KeyError, TypeError, ValueError, AttributeError,
          RecursionError) as e:
    raise KitError(f'--predictions {path} is incomplete ({one_line(e)}): '
                   f'not written whole by this kit; {RECORD_AGAIN}') from e
  return recorded


def _check_examples(recorded: Recorded) -> None:
  """Raises ValueError unless the recording holds examples, every feature
  and output one row per example, and a batch to predict them in."""
  features = (recorded.features if isinstance(recorded.features, dict)
              else {'features': recorded.features})
  if not features or not recorded.outputs or not isinstance(
      recorded.outputs, dict):
    raise ValueError('it holds no features or no outputs')
  if not isinstance(recorded.layers, dict):
    raise ValueError(f'layers {type(recorded.layers).__name__}')
  rows = {name: np.shape(value)[0] if np.ndim(value) else None
          for name, value in {**features, **recorded.outputs}.items()}
  counts = set(rows.values())
  if len(counts) != 1 or None in counts or 0 in counts:
    raise ValueError(f'rows by array: {rows}')
  if (not isinstance(recorded.batch, int) or isinstance(recorded.batch, bool)
      or recorded.batch < 1):
    raise ValueError(f'batch {recorded.batch!r}')


def check_matches(recorded: Recorded, checkpoint: dict, path: str,
                  averages: bool) -> None:
  """Refuses a recording of another checkpoint, or of the weights where the
  averages are converted (or the other way).

  checkpoint: identity() of the checkpoint being converted.
  """
  if recorded.checkpoint['index_sha256'] != checkpoint['index_sha256']:
    raise KitError(
        f'--predictions {path} was recorded from {recorded.checkpoint["name"]}'
        f' (step {recorded.checkpoint["step"]}), not from the '
        f'{checkpoint["name"]} (step {checkpoint["step"]}) that '
        f'--estimator_dir holds: {RECORD_AGAIN} on this checkpoint')
  if recorded.averages != averages:
    said = ('on the moving averages' if recorded.averages else
            'on the raw weights')
    raise KitError(f'--predictions {path} was recorded {said}: convert with '
                   f'{"" if recorded.averages else "no "}'
                   '--averages_as_weights, or record it again as you convert')
