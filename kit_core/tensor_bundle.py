"""A TensorFlow checkpoint read with numpy alone: the tensor-bundle format
that ``tf.compat.v1.train.Saver`` and ``tf.train.Checkpoint`` write, so that
an Estimator's checkpoint is read where TensorFlow is not installed (the jax
profile), and after TensorFlow 2.15 can no longer be installed at all.

A checkpoint ``PREFIX`` is ``PREFIX.index``, a sorted table of tensor names
(LevelDB's table format, as ``tensorflow/core/lib/io/table.cc`` writes it,
uncompressed), each name's value a ``BundleEntryProto``: dtype, shape, the
data file's shard, offset and size, and the masked CRC-32C of the bytes; and
``PREFIX.data-SSSSS-of-NNNNN``, the tensors' raw little-endian bytes
(``tensorflow/core/util/tensor_bundle/tensor_bundle.cc``). Every block and
every tensor is checked against its CRC: a truncated or corrupt checkpoint
fails here, in one line, not halfway through a conversion.

Not read (each refused by name): string tensors, and variables saved in
slices (a ``PartitionedVariable``); read those with TensorFlow.
"""
from __future__ import annotations

import struct

import numpy as np

from kit_core import wire

MAGIC = 0xdb4775248b80fb57
FOOTER = 48  # Two block handles padded to 40 bytes, then the magic.
TRAILER = 5  # A block's compression type and the CRC of it and the block.
# tensorflow/core/framework/types.proto -> numpy, the types a checkpoint of
# weights and optimizer state holds.
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8,
          5: np.int16, 6: np.int8, 9: np.int64, 10: np.bool_,
          17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}
BFLOAT16, STRING = 14, 7


class BundleError(ValueError):
  """A checkpoint this reader cannot read; the message is one line."""


def _block(data: bytes, offset: int, size: int, what: str) -> bytes:
  """The block at offset, checked against its CRC."""
  end = offset + size
  if end + TRAILER > len(data):
    raise BundleError(f'{what} runs past the end of the index (truncated?)')
  body, kind = data[offset:end], data[end]
  if kind != 0:
    raise BundleError(f'{what} is compressed (type {kind}); read this '
                      'checkpoint with TensorFlow')
  crc = struct.unpack('<I', data[end + 1:end + TRAILER])[0]
  if crc != wire.masked_crc(data[offset:end + 1]):
    raise BundleError(f'{what} does not match its CRC (corrupt)')
  return body


def _entries(block: bytes):
  """(key, value) of a table block: prefix-compressed keys, then the
  restart points (uint32s) and their count, which are not read."""
  restarts = struct.unpack('<I', block[-4:])[0]
  end = len(block) - 4 * (restarts + 1)
  position, key = 0, b''
  while position < end:
    shared, position = wire.read_varint(block, position)
    unshared, position = wire.read_varint(block, position)
    size, position = wire.read_varint(block, position)
    key = key[:shared] + block[position:position + unshared]
    position += unshared
    yield key, block[position:position + size]
    position += size


def _handle(value: bytes, position: int = 0) -> tuple[int, int, int]:
  """(offset, size, the position after it) of a block handle."""
  offset, position = wire.read_varint(value, position)
  size, position = wire.read_varint(value, position)
  return offset, size, position


def read_index(path: str) -> dict[str, bytes]:
  """{tensor name: its serialized BundleEntryProto} of an index file; ''
  is the header."""
  with open(path, 'rb') as f:
    data = f.read()
  if len(data) < FOOTER or struct.unpack('<Q', data[-8:])[0] != MAGIC:
    raise BundleError('the index file is not a checkpoint index (no table '
                      'footer: truncated or another file)')
  _, _, position = _handle(data[-FOOTER:])  # The metaindex: empty here.
  offset, size, _ = _handle(data[-FOOTER:], position)
  table = {}
  for _, handle in _entries(_block(data, offset, size, 'the index block')):
    block_offset, block_size, _ = _handle(handle)
    for key, value in _entries(_block(data, block_offset, block_size,
                                      'a block of the index')):
      if key.startswith(b'\x00'):
        continue  # A slice's own entry (a binary key): its tensor is refused.
      table[key.decode('utf-8', 'replace')] = value
  return table


def _entry(value: bytes) -> dict:
  """A BundleEntryProto's fields (tensor_bundle.proto)."""
  entry = {'dtype': 0, 'shape': [], 'shard': 0, 'offset': 0, 'size': 0,
           'crc': None, 'slices': False}
  for number, _, field in wire.fields(value):
    if number == 1:
      entry['dtype'] = field
    elif number == 2:  # TensorShapeProto: repeated dim {size, name}; a
      # dim of size 0 writes no size.
      entry['shape'] = [
          next((wire.signed(size) for size_number, _, size in
                wire.fields(dim) if size_number == 1), 0)
          for dim_number, _, dim in wire.fields(field) if dim_number == 2]
    elif number in (3, 4, 5):
      entry[{3: 'shard', 4: 'offset', 5: 'size'}[number]] = field
    elif number == 6:
      entry['crc'] = struct.unpack('<I', field)[0]
    elif number == 7:
      entry['slices'] = True
  return entry


def _num_shards(header: bytes) -> int:
  """BundleHeaderProto's num_shards; a big-endian bundle is refused."""
  shards = 1
  for number, _, value in wire.fields(header):
    if number == 1:
      shards = value
    elif number == 2 and value == 1:
      raise BundleError('the checkpoint was written big-endian; read it with '
                        'TensorFlow')
  return shards


def _dtype(code: int, name: str):
  if code in DTYPES:
    return np.dtype(DTYPES[code])
  if code == BFLOAT16:
    import ml_dtypes  # pylint: disable=g-import-not-at-top
    return np.dtype(ml_dtypes.bfloat16)
  what = 'a string tensor' if code == STRING else f'of dtype code {code}'
  raise BundleError(f'{name} is {what}, which this reader does not read; '
                    'read this checkpoint with TensorFlow')


class BundleReader:
  """A checkpoint's index read once; each tensor read from its data file
  when asked, and checked against its CRC: a reader holds no more of the
  checkpoint than the tensor it returns.

  Raises (on construction and on read): BundleError, as read; OSError.
  """

  def __init__(self, prefix: str):
    self._prefix = prefix
    try:
      table = read_index(prefix + '.index')
      self._shards = _num_shards(table.pop('', b''))
      self._entries = {name: _entry(value) for name, value in table.items()}
    except wire.WireError as e:
      raise BundleError(f'the index file is corrupt ({e})') from e
    for name, entry in self._entries.items():
      if entry['slices']:
        raise BundleError(f'{name} is saved in slices (a partitioned '
                          'variable), which this reader does not assemble; '
                          'read this checkpoint with TensorFlow')
    self.shapes = {name: tuple(entry['shape'])
                   for name, entry in self._entries.items()}

  def read(self, name: str) -> np.ndarray:
    """The tensor name holds (KeyError if none)."""
    entry = self._entries[name]
    dtype = _dtype(entry['dtype'], name)
    path = (f'{self._prefix}.data-{entry["shard"]:05d}-of-'
            f'{self._shards:05d}')
    with open(path, 'rb') as f:
      f.seek(entry['offset'])
      raw = f.read(entry['size'])
    if len(raw) != entry['size']:
      raise BundleError(f'{name} runs past the end of its data file '
                        '(truncated)')
    if entry['crc'] is not None and entry['crc'] != wire.masked_crc(raw):
      raise BundleError(f'{name} does not match its CRC (corrupt data)')
    count = int(np.prod(entry['shape'], dtype=np.int64))
    if count * dtype.itemsize != len(raw):
      raise BundleError(f'{name} holds {len(raw)} bytes, not the '
                        f'{count * dtype.itemsize} of its shape')
    return np.frombuffer(raw, dtype.newbyteorder('<')).astype(
        dtype).reshape(entry['shape'])


def read(prefix: str) -> dict[str, np.ndarray]:
  """Every tensor of the checkpoint at prefix, by name, each CRC checked.

  Raises:
    BundleError: a file missing, truncated or corrupt, or a tensor this
      reader does not read (string, sliced).
    OSError: a file cannot be opened.
  """
  reader = BundleReader(prefix)
  return {name: reader.read(name) for name in reader.shapes}
