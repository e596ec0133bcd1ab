"""Arrays and JSON in one ``.npz``, with numpy alone: how the recordings of
the legacy side are kept (golden bundles, compare/golden.py; the legacy
predictions of a checkpoint, checkpoint/predictions.py).

``encode`` turns a value (dicts, lists, tuples, numpy arrays and scalars,
strings and bytes, optimizer descriptions, tensor specs) into JSON whose
arrays go into a dict, each stored once however often it occurs; ``decode``
reverses it exactly. Strings and bytes go as base64, so no pickle is read.
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
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers


MANIFEST = '__manifest__'


def save(path: str, manifest: dict, arrays: dict) -> str:
  """Writes arrays, and manifest (JSON, what encode made of the rest) as
  the entry MANIFEST, to path (.npz, compressed) through a temporary file,
  so that a stopped write leaves nothing; returns path."""
  arrays = {**arrays, MANIFEST: np.array(json.dumps(manifest))}
  paths.check_folder_exists(path, path)
  with atomic.temporary_path(path) as tmp:
    with open(tmp, 'wb') as f:
      np.savez_compressed(f, **arrays)
  return path


def load(path: str) -> tuple[dict | None, dict]:
  """(manifest, or None if the file has none; the other arrays) of what
  save wrote. Raises what numpy raises for a file it cannot read: OSError,
  BadZipFile, EOFError, zlib.error or ValueError, by where the damage is."""
  with np.load(path, allow_pickle=False) as found:
    arrays = {k: found[k] for k in found.files}
  manifest = arrays.pop(MANIFEST, None)
  return (None if manifest is None else json.loads(str(manifest))), arrays


@dataclasses.dataclass(frozen=True)
class Spec:
  """A tensor's shape and dtype name, read where there is no TensorFlow."""
  shape: list
  dtype: str



def encode(value, arrays: dict):
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
    return {'__dict__': [[encode(k, arrays), encode(v, arrays)]
                         for k, v in value.items()]}
  if isinstance(value, tuple):
    return {'__tuple__': [encode(v, arrays) for v in value]}
  if isinstance(value, list):
    return [encode(v, arrays) for v in value]
  if isinstance(value, optimizers.Description):
    return {'__optimizer__': [value.kind, encode(value.hyper, arrays)]}
  if isinstance(value, tf.TensorSpec):
    return {'__spec__': [value.shape.as_list(), value.dtype.name]}
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  raise TypeError(f'a recording cannot hold a {type(value).__name__}')


def decode(value, arrays: dict):
  if isinstance(value, list):
    return [decode(v, arrays) for v in value]
  if not isinstance(value, dict):
    return value
  if '__strings__' in value:
    return np.array([base64.b64decode(v) for v in value['__strings__']],
                    dtype=object).reshape(value['shape'])
  if '__array__' in value:
    array = arrays[value['__array__']]
    return array[()] if value['scalar'] else array
  if '__dict__' in value:
    return {decode(k, arrays): decode(v, arrays)
            for k, v in value['__dict__']}
  if '__tuple__' in value:
    return tuple(decode(v, arrays) for v in value['__tuple__'])
  if '__optimizer__' in value:
    kind, hyper = value['__optimizer__']
    return optimizers.Description(kind, decode(hyper, arrays))
  if '__spec__' in value:
    shape, dtype = value['__spec__']
    if not lazy.installed('tensorflow'):  # Read with numpy alone.
      return Spec(shape, dtype)
    return tf.TensorSpec(shape, tf.as_dtype(dtype))
  raise KitError(f'unknown entry in the recording: {sorted(value)}')
