"""Protocol buffers' wire format and TensorFlow's masked CRC-32C, read
without TensorFlow or protobuf: what the TFRecord reader
(mnist_common/records.py) and the checkpoint reader (tensor_bundle.py) share.

Only what those formats use is here: varints, fields of wire types 0, 1, 2
and 5 (no groups), and the CRC TensorFlow masks so that a CRC of data
holding CRCs stays useful (``tensorflow/core/lib/hash/crc32c.h``).
"""
from typing import Iterator

import google_crc32c

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
_MASK_DELTA = 0xa282ead8


class WireError(ValueError):
  """Bytes that are not a message in the wire format."""


def masked_crc(data: bytes) -> int:
  """TensorFlow's masked CRC-32C of data."""
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xffffffff


def varint(value: int) -> bytes:
  """value as a varint; a negative int64 as its two's complement."""
  value &= (1 << 64) - 1
  out = bytearray()
  while value > 0x7f:
    out.append(value & 0x7f | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def read_varint(data: bytes, position: int) -> tuple[int, int]:
  """(value, the position after it) of the varint at position."""
  value, shift = 0, 0
  while True:
    if position >= len(data) or shift > 63:
      raise WireError('a varint runs past its message')
    byte = data[position]
    value |= (byte & 0x7f) << shift
    position, shift = position + 1, shift + 7
    if not byte & 0x80:
      return value, position


def signed(value: int) -> int:
  """An int64 read as a varint, its sign restored."""
  return value - (1 << 64) if value >= 1 << 63 else value


def fields(data: bytes) -> Iterator[tuple[int, int, object]]:
  """(field number, wire type, value) of a message: an int for a varint,
  else its bytes."""
  position = 0
  while position < len(data):
    key, position = read_varint(data, position)
    number, wire = key >> 3, key & 7
    if wire == VARINT:
      value, position = read_varint(data, position)
    elif wire in (FIXED64, FIXED32):
      size = 8 if wire == FIXED64 else 4
      value, position = data[position:position + size], position + size
    elif wire == LEN:
      size, position = read_varint(data, position)
      value, position = data[position:position + size], position + size
    else:
      raise WireError(f'wire type {wire} (a group) is not read here')
    if position > len(data) or number == 0:
      raise WireError('a field runs past its message')
    yield number, wire, value
