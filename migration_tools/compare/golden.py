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

import base64
import dataclasses
import hashlib
import json

import numpy as np

from kit_core import atomic
from kit_core import lazy
from kit_core import paths
from kit_core.errors import KitError
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers
from migration_tools.pair.recorded import Tape

# 2: describe_run, and the slots of optimizers read by what they do.
# 3: the slots before any step, of every optimizer (their starting values);
# the state beyond the weights (train_variables, averages), the evaluation
# on the weights, the serving inputs (strings as base64).
FORMAT = 3
_MANIFEST = '__manifest__'


@dataclasses.dataclass(frozen=True)
class Spec:
  """A tensor's shape and dtype name, read where there is no TensorFlow."""
  shape: list
  dtype: str


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
      'options': _encode(bundle.options, arrays),
      'replica_counts': bundle.replica_counts, 'serving': bundle.serving,
      'batches': _encode(bundle.batches, arrays),
      'shards': bundle.tape.shards,
      'answers': {k: _encode(v, arrays) for k, v in
                  bundle.tape.answers.items()}}
  arrays[_MANIFEST] = np.array(json.dumps(manifest))
  paths.check_folder_exists(path, path)
  with atomic.temporary_path(path) as tmp:
    with open(tmp, 'wb') as f:
      np.savez_compressed(f, **arrays)
  return path


def load(path: str) -> Bundle:
  """Reads a bundle written by save.

  Raises:
    KitError: no such file, not a bundle, or a format this kit cannot read.
  """
  try:
    with np.load(path, allow_pickle=False) as stored:
      arrays = {k: stored[k] for k in stored.files}
  except Exception as e:  # pylint: disable=broad-except
    # A cut or damaged .npz raises OSError, BadZipFile, EOFError, zlib.error
    # or ValueError, by where the damage is.
    raise KitError(f'cannot read the bundle {path} ({one_line(e)}); record '
                   'it again with migration-compare --record_bundle') from e
  if _MANIFEST not in arrays:
    raise KitError(f'{path} is not a golden bundle (no manifest); record one '
                   'with migration-compare --record_bundle')
  try:
    manifest = json.loads(str(arrays[_MANIFEST]))
    if manifest.get('format') != FORMAT:
      raise KitError(f'{path} is a bundle of format '
                     f'{manifest.get("format")}; this kit reads format '
                     f'{FORMAT}: record it again')
    tape = Tape({k: _decode(v, arrays) for k, v in manifest['answers'].items()},
                dict(manifest['shards']))
    return Bundle(_decode(manifest['options'], arrays),
                  manifest['replica_counts'], manifest['serving'],
                  _decode(manifest['batches'], arrays), tape,
                  manifest['versions'])
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise KitError(f'the bundle {path} is incomplete ({one_line(e)}): it was '
                   'not written whole by this kit; record it again with '
                   'migration-compare --record_bundle') from e


def _encode(value, arrays: dict):
  """JSON for value; its numpy arrays and scalars go into arrays, exactly."""
  if isinstance(value, np.ndarray) and value.dtype.kind in 'OSU':
    # Strings and bytes (JPEG, tf.Example protos): no pickle in a bundle.
    return {'__strings__': [base64.b64encode(
        v if isinstance(v, bytes) else str(v).encode()).decode()
                            for v in value.ravel()],
            'shape': list(value.shape)}
  if isinstance(value, (np.ndarray, np.generic)):
    array = np.asarray(value)
    # Stored once however often it was answered (a state after one step is
    # the state before the next; runs that agree share their arrays).
    digest = hashlib.sha256(array.tobytes() + str(
        (array.dtype.str, array.shape)).encode()).hexdigest()[:24]
    key = f'a{digest}'
    arrays.setdefault(key, array)
    return {'__array__': key, 'scalar': isinstance(value, np.generic)}
  if isinstance(value, dict):
    return {'__dict__': [[_encode(k, arrays), _encode(v, arrays)]
                         for k, v in value.items()]}
  if isinstance(value, tuple):
    return {'__tuple__': [_encode(v, arrays) for v in value]}
  if isinstance(value, list):
    return [_encode(v, arrays) for v in value]
  if isinstance(value, optimizers.Description):
    return {'__optimizer__': [value.kind, _encode(value.hyper, arrays)]}
  if isinstance(value, tf.TensorSpec):
    return {'__spec__': [value.shape.as_list(), value.dtype.name]}
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  raise TypeError(f'a golden bundle cannot hold a {type(value).__name__}')


def _decode(value, arrays: dict):
  if isinstance(value, list):
    return [_decode(v, arrays) for v in value]
  if not isinstance(value, dict):
    return value
  if '__strings__' in value:
    return np.array([base64.b64decode(v) for v in value['__strings__']],
                    dtype=object).reshape(value['shape'])
  if '__array__' in value:
    array = arrays[value['__array__']]
    return array[()] if value['scalar'] else array
  if '__dict__' in value:
    return {_decode(k, arrays): _decode(v, arrays)
            for k, v in value['__dict__']}
  if '__tuple__' in value:
    return tuple(_decode(v, arrays) for v in value['__tuple__'])
  if '__optimizer__' in value:
    kind, hyper = value['__optimizer__']
    return optimizers.Description(kind, _decode(hyper, arrays))
  if '__spec__' in value:
    shape, dtype = value['__spec__']
    if not lazy.installed('tensorflow'):  # Read with numpy alone.
      return Spec(shape, dtype)
    return tf.TensorSpec(shape, tf.as_dtype(dtype))
  raise KitError(f'unknown entry in the bundle: {sorted(value)}')
