"""Arrays and JSON in one ``.npz``, with numpy alone: how the recordings of
the legacy side are kept (golden bundles, compare/golden.py; the legacy
predictions of a checkpoint, checkpoint/predictions.py).

``encode`` turns a value (dicts, lists, tuples, numpy arrays and scalars,
strings and bytes, optimizer descriptions, tensor specs) into JSON whose
arrays go into a dict, each stored once however often it occurs; ``decode``
reverses it exactly. Strings and bytes go as base64, so no pickle is read.

A recording of a large model is written as it is made (``writing``: each
array on disk as it is encoded) and read as it is asked (``open_lazily``),
so neither side holds more than the arrays in use.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
from typing import Iterator
import zipfile
import zlib

import numpy as np

from kit_core import atomic
from kit_core import lazy
from kit_core import npz_files
from kit_core import paths
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import array_codec
from migration_tools.pair import optimizers


MANIFEST = '__manifest__'
# The manifest's entry of the coded arrays: {key: codec} (array_codec).
CODECS = '__codecs__'


class Writer:
  """The arrays of a recording being written: encode's dict, each array
  written into the archive the first time its key is set, none held but the
  few the coding refers to (with deltas: array_codec). Made by
  ``writing``."""

  def __init__(self, archive: zipfile.ZipFile, deltas: bool = False):
    self._archive, self._written, self.finished = archive, set(), False
    self._encoder = array_codec.Encoder() if deltas else None
    self._codecs: dict[str, dict] = {}

  def setdefault(self, key: str, array: np.ndarray) -> None:
    """As dict.setdefault, the one use encode makes of its dict."""
    if key not in self._written:
      self._write(key, array)
      self._written.add(key)

  def encode(self, value):
    """encode(value, self): value's arrays written now; its JSON returned."""
    return encode(value, self)

  def finish(self, manifest: dict) -> None:
    """Writes manifest (JSON, what encode made of the rest) as the entry
    MANIFEST, with the arrays' codings; the recording is complete."""
    manifest = {k: v for k, v in manifest.items() if k != CODECS}
    if self._codecs:
      manifest[CODECS] = self._codecs
    self._write(MANIFEST, np.array(json.dumps(manifest)))
    self.finished = True

  def _write(self, key: str, array: np.ndarray) -> None:
    # As np.savez_compressed writes an entry (np.load reads the archive),
    # but an entry that would not deflate much is stored as it is.
    array = np.asanyarray(array)
    worth = _WORTH
    if self._encoder is not None and key != MANIFEST:
      array, codec = self._encoder.encode(key, array)
      if codec is not None:
        self._codecs[key] = codec
        worth = _CODED_WORTH
    entry = zipfile.ZipInfo(f'{key}.npy', date_time=(1980, 1, 1, 0, 0, 0))
    entry.compress_type = (zipfile.ZIP_DEFLATED if deflates(array, worth)
                           else zipfile.ZIP_STORED)
    with self._archive.open(entry, 'w', force_zip64=True) as written:
      np.lib.format.write_array(written, array, allow_pickle=False)


# Trained float weights, slots and gradients deflate by under 10%, at 35-40
# MB/s: a quarter of a large recording's time (BERT-base, 1 step: 119 s of
# 462). Zeros and repeats (the slots of embedding rows no batch looked up,
# masks, labels) deflate to a third and less. So an array is deflated only
# if samples of it deflate to under _WORTH of their size.
_SAMPLES, _SAMPLE_BYTES, _WORTH = 4, 1 << 18, 0.8
# A coded array's bytes are grouped by significance, and its samples fall in
# one group each: the low mantissa bytes, which never deflate, weigh on them
# more than on the whole (the kit's start weights: 0.82 in samples, 0.84
# whole).
_CODED_WORTH = 0.9


def deflates(array: np.ndarray, worth: float = _WORTH) -> bool:
  """Whether array is worth deflating: a small one always (it costs
  nothing), a large one if evenly spaced samples of it deflate well."""
  if array.nbytes <= _SAMPLES * _SAMPLE_BYTES or array.dtype.hasobject:
    return True
  count = max(1, _SAMPLE_BYTES // array.dtype.itemsize)
  starts = np.linspace(0, array.size - count, _SAMPLES).astype(np.int64)
  # .flat[a:b] copies that slice alone, whatever the array's layout.
  samples = b''.join(np.ascontiguousarray(array.flat[a:a + count]).tobytes()
                     for a in starts)
  return len(zlib.compress(samples, 1)) < worth * len(samples)


@contextlib.contextmanager
def writing(path: str, deltas: bool = False) -> Iterator[Writer]:
  """A Writer into path (.npz; see deflates; with deltas, float arrays coded
  as array_codec does) under a temporary name, renamed into place when the
  block ends with the Writer finished; a block that raises, or ends
  unfinished, leaves nothing."""
  paths.check_folder_exists(path, path)
  with atomic.temporary_path(path) as tmp:
    with zipfile.ZipFile(tmp, 'w', zipfile.ZIP_DEFLATED,
                         allowZip64=True) as archive:
      writer = Writer(archive, deltas)
      yield writer
      if not writer.finished:
        raise KitError(f'{path}: the recording ended unfinished')


def save(path: str, manifest: dict, arrays: dict, deltas: bool = False
         ) -> str:
  """Writes arrays and manifest (see Writer.finish; deltas: see writing) to
  path; returns path."""
  with writing(path, deltas) as writer:
    for key, array in arrays.items():
      writer.setdefault(key, array)
    writer.finish(manifest)
  return path


def load(path: str, what: str = 'the recording',
         referenced_only: bool = False) -> tuple[dict | None, dict]:
  """(manifest, or None if the file has none; its other arrays) of what
  save wrote. Each size the file declares is checked before anything is
  read (kit_core/npz_files.py); with referenced_only, only the arrays the
  manifest refers to are read (another entry, however large, costs
  nothing).

  Raises:
    KitError: not a regular file, damaged, or past the free memory.
    ValueError: a manifest that is not JSON.
  """
  declared = npz_files.headers(path, what)
  if MANIFEST not in declared:
    return None, npz_files.load(path, what)
  manifest = json.loads(str(npz_files.load(path, what, [MANIFEST])[MANIFEST]))
  names = (sorted(needed_keys(manifest)) if referenced_only else
           [n for n in declared if n != MANIFEST])
  found = npz_files.load(path, what, names)
  check_codings(path, manifest, what)
  arrays = decoded(manifest, found)
  return manifest, {name: arrays[name] for name in found}


def decoded(manifest: dict, arrays):
  """arrays (a dict or an open NpzFile of what a Writer wrote) as their
  values, decoded as asked where the manifest says they were coded
  (array_codec); arrays itself where none was."""
  codecs = manifest.get(CODECS) if isinstance(manifest, dict) else None
  if not codecs:
    return arrays
  if not isinstance(codecs, dict) or not all(
      isinstance(c, dict) for c in codecs.values()):
    raise ValueError(f'{CODECS} is not a table of codings')
  return array_codec.Decoded(arrays, codecs)


def check_codings(path: str, manifest: dict, what: str = 'the bundle'
                  ) -> None:
  """Raises ValueError unless every coding the manifest names fits the
  entries the file declares (array_codec.check): before any is decoded."""
  if manifest.get(CODECS):
    array_codec.check(manifest[CODECS], npz_files.headers(path, what))


def needed_keys(manifest: dict) -> set[str]:
  """The keys of the arrays the manifest refers to, with those their
  decoding refers to (array_codec)."""
  keys = set(array_keys({k: v for k, v in manifest.items() if k != CODECS}))
  codecs = manifest.get(CODECS) or {}
  todo = list(keys)
  while todo:
    codec = codecs.get(todo.pop())
    if not isinstance(codec, dict):
      continue
    for ref in (codec.get('ref'), codec.get('direction')):
      if isinstance(ref, str) and ref not in keys:
        keys.add(ref)
        todo.append(ref)
  return keys


def open_lazily(path: str, what: str = 'the bundle'):
  """load(), the arrays read from disk (and decoded) each time one is asked
  for (an open NpzFile, or array_codec.Decoded over one). Every entry's
  header and checksum are read first, so damage anywhere raises here, as in
  load, not midway through a use; so does an array larger than the free
  memory. The codings are the caller's to check (check_codings).
  """
  for name, header in npz_files.headers(path, what).items():
    npz_files.check_room(path, what, {name: header})
  found = np.load(path, allow_pickle=False)
  try:
    damaged = found.zip.testzip()
    if damaged is not None:
      raise zipfile.BadZipFile(f'entry {damaged} is damaged')
    manifest = (json.loads(str(found[MANIFEST])) if MANIFEST in found.files
                else None)
  except BaseException:
    found.close()
    raise
  return manifest, decoded(manifest, found)


def array_keys(value) -> Iterator[str]:
  """The keys of the arrays that encode's JSON value refers to."""
  if isinstance(value, list):
    for v in value:
      yield from array_keys(v)
  elif isinstance(value, dict):
    if '__array__' in value:
      yield value['__array__']
    else:
      for v in value.values():
        yield from array_keys(v)


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
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if isinstance(value, optimizers.Description):
    return {'__optimizer__': [value.kind, encode(value.hyper, arrays)]}
  # Only TensorFlow makes one: no profile without it is asked to import it.
  if lazy.installed('tensorflow') and isinstance(value, tf.TensorSpec):
    return {'__spec__': [value.shape.as_list(), value.dtype.name]}
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
