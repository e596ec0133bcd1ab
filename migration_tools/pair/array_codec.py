"""Float arrays of a recording stored as their difference from earlier ones,
losslessly, with numpy alone.

A recording of the legacy side holds many arrays of each variable: its start,
its gradient, its value after each step, on each replica count. Stored raw,
float32 deflates by under 10% (the low mantissa bits are noise). But each is
close to an earlier array of the same shape: weights after a step share
their high bits with the weights before; a step of plain SGD is the weights
before plus a multiple of the gradient; a run on 2 replicas differs from the
run on 1 in the last bits. So an array is stored as the XOR of its bits with
those of a prediction from earlier arrays, its bytes regrouped by
significance (the equal high bits become runs of zeros), and deflated:

  'bytes'  no prediction: the bytes regrouped;
  'xor'    the prediction is an earlier array;
  'line'   the prediction is an earlier array plus c times another, c fitted
           (least squares), computed in float64 and rounded to the dtype, so
           that every CPU computes it to the same bits.

``decode(encode(x)) == x`` bit for bit. The kit's pair at 2 steps, 1 and 2
replicas: 16.4 MB deflated, 5.65 MB so (kit_pair/golden_bundle.npz).

The encoder holds a few earlier arrays per shape (the first, and the last
RECENT), within HELD_BYTES: what it holds grows with the model, never with the
steps. A prediction refers to arrays at most MAX_DEPTH predictions deep, so
that decoding one array decodes a bounded number of others.
"""
from __future__ import annotations

import collections
import zlib

import numpy as np

# An array smaller than this is stored as it is: nothing to gain.
MIN_SIZE = 1024
# The arrays of one shape and dtype held as references: the first, and the
# last RECENT (a variable's previous values, its gradient, the same step on
# another replica count); the directions of a 'line', the last DIRECTIONS.
RECENT = 6
DIRECTIONS = 3
# What the encoder holds in all: references beyond it are let go, oldest
# first, and an array larger than a quarter of it is stored with no
# prediction.
HELD_BYTES = 512 << 20
MAX_DEPTH = 8
# The prediction is chosen on evenly spaced samples of this many elements.
_SAMPLE = 1 << 15


def eligible(array: np.ndarray) -> bool:
  """Floating point of 2, 4 or 8 bytes, little-endian, of MIN_SIZE or more."""
  return (array.dtype.kind == 'f' and array.dtype.itemsize in (2, 4, 8) and
          array.dtype.byteorder in '<=' and array.size >= MIN_SIZE and
          np.little_endian)


def _bits(array: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(array).view(f'<u{array.dtype.itemsize}')


def _regrouped(bits: np.ndarray) -> np.ndarray:
  """The bytes of bits, all first bytes, then all second bytes, ..."""
  width = bits.dtype.itemsize
  return np.ascontiguousarray(bits.reshape(-1).view(np.uint8).reshape(
      -1, width).T).reshape(-1)


def _ungrouped(stored: np.ndarray, dtype: np.dtype) -> np.ndarray:
  width = dtype.itemsize
  return np.ascontiguousarray(stored.reshape(width, -1).T).reshape(-1).view(
      f'<u{width}')


# Predictions are computed this many elements at a time: float64
# temporaries of a few MB, whatever the array's size.
_CHUNK = 1 << 18


def _predict(ref: np.ndarray, direction: np.ndarray | None, c: float,
             dtype: np.dtype) -> np.ndarray:
  """A new array: ref, or ref + c * direction rounded to dtype."""
  if direction is None:
    return ref.copy()
  out = np.empty(ref.shape, dtype)
  for i in range(0, ref.size, _CHUNK):
    # Two ufuncs, each rounded once in float64: the same bits on every CPU.
    out[i:i + _CHUNK] = (ref[i:i + _CHUNK].astype(np.float64) +
                         c * direction[i:i + _CHUNK].astype(np.float64))
  return out


def _fit(x: np.ndarray, ref: np.ndarray, direction: np.ndarray) -> float:
  """The least-squares c of x - ref ~ c * direction (samples of each)."""
  d = direction.astype(np.float64)
  with np.errstate(all='ignore'):
    norm = float(np.dot(d, d))
    if not np.isfinite(norm) or norm == 0:
      return 0.0
    c = float(np.dot(x.astype(np.float64) - ref.astype(np.float64), d)) / norm
  return c if np.isfinite(c) else 0.0


def _cost(bits: np.ndarray) -> int:
  return len(zlib.compress(_regrouped(bits).tobytes(), 1))


class Encoder:
  """Encodes the arrays of one recording, in the order they are written."""

  def __init__(self):
    # (shape, dtype) -> [(key, array)]: the first, then the last RECENT.
    self._held: dict[tuple, list] = collections.defaultdict(list)
    self._depth: dict[str, int] = {}
    self._held_bytes = 0

  def encode(self, key: str, array: np.ndarray
             ) -> tuple[np.ndarray, dict | None]:
    """(what to store, its codec for decode) for the array named key; the
    array itself and None if it is not eligible."""
    if not eligible(array):
      return array, None
    array = np.ascontiguousarray(array)
    candidates = self._candidates(array)
    sample = _sample_index(array.size)
    flat = array.reshape(-1)
    bits = _bits(flat)
    best, best_cost = (None, None, 0.0), _cost(bits[sample])
    for ref_key, ref, dir_key, direction in candidates:
      c = (_fit(flat[sample], ref.reshape(-1)[sample],
                direction.reshape(-1)[sample]) if direction is not None
           else 0.0)
      if direction is not None and c == 0.0:
        continue
      predicted = _predict(ref.reshape(-1)[sample],
                           None if direction is None else
                           direction.reshape(-1)[sample], c, array.dtype)
      cost = _cost(bits[sample] ^ _bits(predicted))
      if cost < best_cost:
        best, best_cost = (ref_key, dir_key, c), cost
    ref_key, dir_key, c = best
    codec = {'dtype': array.dtype.str, 'shape': list(array.shape)}
    if ref_key is None:
      codec['kind'] = 'bytes'
      residual = bits
    else:
      refs = {k: a for k, a in self._held[self._group(array)]}
      residual = _bits(_predict(refs[ref_key].reshape(-1), None
                                if dir_key is None else
                                refs[dir_key].reshape(-1), c, array.dtype))
      np.bitwise_xor(residual, bits, out=residual)
      codec.update(kind='line' if dir_key else 'xor', ref=ref_key)
      if dir_key:
        codec.update(direction=dir_key, c=c)
    self._depth[key] = 1 + max(
        [self._depth[k] for k in (ref_key, dir_key) if k] or [-1])
    self._hold(key, array)
    return _regrouped(residual), codec

  @staticmethod
  def _group(array: np.ndarray) -> tuple:
    return (array.shape, array.dtype.str)

  def _candidates(self, array: np.ndarray) -> list:
    held = [(k, a) for k, a in self._held.get(self._group(array), [])
            if self._depth[k] < MAX_DEPTH]
    found = [(k, a, None, None) for k, a in held]
    found += [(k, a, dk, d) for k, a in held
              for dk, d in held[-DIRECTIONS:] if dk != k]
    return found

  def _hold(self, key: str, array: np.ndarray) -> None:
    if array.nbytes > HELD_BYTES // 4:
      return
    group = self._held[self._group(array)]
    group.append((key, array))
    self._held_bytes += array.nbytes
    if len(group) > 1 + RECENT:  # The first stays.
      self._held_bytes -= group.pop(1)[1].nbytes
    while self._held_bytes > HELD_BYTES:
      oldest = next(g for g in self._held.values() if g)
      self._held_bytes -= oldest.pop(0)[1].nbytes


def _sample_index(size: int) -> np.ndarray | slice:
  if size <= _SAMPLE:
    return slice(None)
  return np.linspace(0, size - 1, _SAMPLE).astype(np.int64)


_KINDS = {'bytes': (), 'xor': ('ref',), 'line': ('ref', 'direction')}


def check(codecs: dict, declared: dict) -> None:
  """Raises ValueError unless each coding fits what the file declares
  ({key: (shape, dtype)} of its entries): its entry bytes of its array's
  size, a known kind, references to entries coded as the same shape and
  dtype, or plain arrays of them."""
  if not isinstance(codecs, dict):
    raise ValueError('the table of codings is not one')
  for key, codec in codecs.items():
    if not isinstance(codec, dict) or codec.get('kind') not in _KINDS:
      raise ValueError(f'array {key} has an unknown coding')
    if key not in declared:
      raise ValueError(f'array {key} is coded and absent')
    dtype, shape = _coded_as(codec)
    stored_shape, stored_dtype = declared[key]
    if (stored_dtype != np.uint8 or
        tuple(stored_shape) != (int(np.prod(shape, dtype=np.int64)) *
                                dtype.itemsize,)):
      raise ValueError(f'array {key} is coded as {dtype} {list(shape)} and '
                       f'stored as {stored_dtype} {list(stored_shape)}')
    for role in _KINDS[codec['kind']]:
      ref = codec.get(role)
      if ref not in declared:
        raise ValueError(f'array {key} refers to {ref!r}, which is absent')
      ref_dtype, ref_shape = (_coded_as(codecs[ref]) if ref in codecs else
                              (declared[ref][1], tuple(declared[ref][0])))
      if ref_dtype != dtype or tuple(ref_shape) != shape:
        raise ValueError(f'array {key} refers to one of another shape')
    if codec['kind'] == 'line' and not isinstance(codec.get('c'),
                                                  (int, float)):
      raise ValueError(f'array {key} has no factor')


def _coded_as(codec: dict) -> tuple[np.dtype, tuple]:
  dtype = np.dtype(codec.get('dtype'))
  shape = codec.get('shape')
  if (dtype.kind != 'f' or dtype.itemsize not in (2, 4, 8) or
      not isinstance(shape, list) or
      not all(isinstance(n, int) and n >= 0 for n in shape)):
    raise ValueError(f'a coding of {codec.get("dtype")!r} '
                     f'{codec.get("shape")!r}')
  return dtype, tuple(shape)


def decode(stored: np.ndarray, codec: dict, reference) -> np.ndarray:
  """The array encode stored as stored with codec; reference(key) gives an
  earlier array it refers to, decoded.

  Raises:
    ValueError: stored or codec is not what encode wrote.
  """
  dtype, shape = _coded_as(codec)
  if (stored.dtype != np.uint8 or stored.ndim != 1 or
      stored.size != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize):
    raise ValueError(f'an array coded as {codec["dtype"]} {list(shape)} is '
                     f'stored as {stored.dtype} {list(stored.shape)}')
  bits = _ungrouped(stored, dtype)
  kind = codec.get('kind')
  if kind == 'bytes':
    return bits.view(dtype).reshape(shape)
  if kind not in ('xor', 'line'):
    raise ValueError(f'unknown array coding {kind!r}')
  ref = reference(codec['ref'])
  direction = reference(codec['direction']) if kind == 'line' else None
  for name, value in (('ref', ref), ('direction', direction)):
    if value is not None and (value.shape != shape or value.dtype != dtype):
      raise ValueError(f'the {name} of an array coded as {dtype} '
                       f'{list(shape)} is {value.dtype} {list(value.shape)}')
  bits = bits.copy()  # _ungrouped may give a view of stored.
  np.bitwise_xor(bits, _bits(_predict(
      ref.reshape(-1), None if direction is None else direction.reshape(-1),
      float(codec.get('c', 0.0)), dtype)), out=bits)
  return bits.view(dtype).reshape(shape)


class Decoded:
  """The arrays of a recording by key, decoded as asked (a Mapping's
  __getitem__ and __contains__): raw holds what was stored (an NpzFile or a
  dict), codecs each coded key's codec; the last few decoded are kept, so
  that a chain of steps is decoded once."""

  _KEEP = 4

  def __init__(self, raw, codecs: dict):
    self._raw, self._codecs = raw, codecs
    self._kept: collections.OrderedDict = collections.OrderedDict()
    self._depth = 0

  def __contains__(self, key: str) -> bool:
    return key in self._raw

  @property
  def files(self):
    return getattr(self._raw, 'files', list(self._raw))

  def __getitem__(self, key: str) -> np.ndarray:
    codec = self._codecs.get(key)
    if codec is None:
      return self._raw[key]
    if key in self._kept:
      self._kept.move_to_end(key)
      return self._kept[key]
    self._depth += 1
    try:
      if self._depth > MAX_DEPTH + 1:
        raise ValueError(f'array {key} refers to arrays more than '
                         f'{MAX_DEPTH} deep')
      array = decode(self._raw[key], codec, self.__getitem__)
    finally:
      self._depth -= 1
    self._kept[key] = array
    if len(self._kept) > self._KEEP:
      self._kept.popitem(last=False)
    return array
