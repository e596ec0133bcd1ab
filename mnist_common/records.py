"""The TFRecord file format and tf.train.Example's wire format, read and
written without TensorFlow, so that a profile with no TensorFlow (JAX's)
reads and writes the same data files as the other two.

A record is its length (8 bytes, little-endian), that length's masked
CRC-32C (4), the data, and the data's masked CRC-32C (4): TensorFlow's
``record_writer.cc``. An Example is a protocol buffer
(``tensorflow/core/example/example.proto``); only what the kit's schema uses
is read and written here, as the wire format defines it, so any writer's
Examples (packed or unpacked int64 lists, map entries in any order) read.
"""
import struct
from typing import Iterable, Iterator

import google_crc32c

HEADER, FOOTER = 12, 4
_MASK_DELTA = 0xa282ead8
# Feature's oneof, by field number (example.proto's feature.proto).
KINDS = {1: 'bytes_list', 2: 'float_list', 3: 'int64_list'}
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


class CorruptRecord(ValueError):
  """A record whose CRC does not match: at `offset`, the `index`-th."""

  def __init__(self, index: int, offset: int):
    super().__init__(f'corrupted record at {offset}')
    self.index, self.offset = index, offset


class NotAnExample(ValueError):
  """Bytes that are not a tf.train.Example in the wire format."""


def masked_crc(data: bytes) -> int:
  """TensorFlow's masked CRC-32C: a CRC of data holding CRCs stays useful."""
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xffffffff


def frame(data: bytes) -> bytes:
  """One record as it is written to a TFRecord file."""
  header = struct.pack('<Q', len(data))
  return b''.join((header, struct.pack('<I', masked_crc(header)), data,
                   struct.pack('<I', masked_crc(data))))


def write(path: str, payloads: Iterable[bytes]) -> None:
  """Writes the payloads to path as a TFRecord file (no compression)."""
  with open(path, 'wb') as f:
    for payload in payloads:
      f.write(frame(payload))


def read(path: str) -> Iterator[bytes]:
  """The payloads of a TFRecord file, each checked against its CRCs.

  Raises:
    CorruptRecord: a length or a payload does not match its CRC, or a
      record is cut short.
  """
  with open(path, 'rb') as f:
    data = f.read()
  position, index = 0, 0
  while position < len(data):
    header = data[position:position + HEADER]
    length = struct.unpack('<Q', header[:8])[0] if len(header) == HEADER else 0
    end = position + HEADER + length
    if (len(header) < HEADER or end + FOOTER > len(data) or
        struct.unpack('<I', header[8:])[0] != masked_crc(header[:8])):
      raise CorruptRecord(index, position)
    payload = data[position + HEADER:end]
    if struct.unpack('<I', data[end:end + FOOTER])[0] != masked_crc(payload):
      raise CorruptRecord(index, position)
    yield payload
    position, index = end + FOOTER, index + 1


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # A negative int64 is its two's complement.
  out = bytearray()
  while value > 0x7f:
    out.append(value & 0x7f | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def encode_example(features: dict[str, tuple[str, list]]) -> bytes:
  """An Example of features {name: (kind, values)}; kind 'bytes_list' or
  'int64_list'."""
  entries = []
  for name, (kind, values) in features.items():
    if kind == 'bytes_list':
      listed = b''.join(_field(1, value) for value in values)
    elif kind == 'int64_list':
      listed = _field(1, b''.join(_varint(int(v)) for v in values))  # Packed.
    else:
      raise ValueError(f'kind {kind!r}: bytes_list or int64_list')
    number = next(n for n, k in KINDS.items() if k == kind)
    entries.append(_field(1, _field(1, name.encode()) +
                          _field(2, _field(number, listed))))
  return _field(1, b''.join(entries))


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
  value, shift = 0, 0
  while True:
    if position >= len(data) or shift > 63:
      raise NotAnExample('a varint runs past its message')
    byte = data[position]
    value |= (byte & 0x7f) << shift
    position, shift = position + 1, shift + 7
    if not byte & 0x80:
      return value, position


def _fields(data: bytes) -> Iterator[tuple[int, int, object]]:
  """(field number, wire type, value) of a message: an int, or bytes."""
  position = 0
  while position < len(data):
    key, position = _read_varint(data, position)
    number, wire = key >> 3, key & 7
    if wire == _VARINT:
      value, position = _read_varint(data, position)
    elif wire in (_FIXED64, _FIXED32):
      size = 8 if wire == _FIXED64 else 4
      value, position = data[position:position + size], position + size
    elif wire == _LEN:
      size, position = _read_varint(data, position)
      value, position = data[position:position + size], position + size
    else:
      raise NotAnExample(f'wire type {wire} is not used by Example')
    if position > len(data) or number == 0:
      raise NotAnExample('a field runs past its message')
    yield number, wire, value


def _int64s(wire: int, value) -> list[int]:
  if wire == _VARINT:
    raw = [value]
  else:  # Packed.
    raw, position = [], 0
    while position < len(value):
      item, position = _read_varint(value, position)
      raw.append(item)
  return [v - (1 << 64) if v >= 1 << 63 else v for v in raw]


def _values(number: int, listed: bytes) -> list:
  values = []
  for _, wire, value in _fields(listed):
    if number == 1:
      values.append(value)
    elif number == 3:
      values.extend(_int64s(wire, value))
    else:  # Floats: counted, never used by the kit.
      values.extend([0.0] * (len(value) // 4 if wire == _LEN else 1))
  return values


def decode_example(data: bytes) -> dict[str, tuple[str | None, list]]:
  """{feature name: (kind or None when empty, values)} of a serialized
  Example.

  Raises:
    NotAnExample: the bytes are not an Example.
  """
  features = {}
  for number, wire, value in _fields(data):
    if number != 1 or wire != _LEN:
      continue
    for entry_number, entry_wire, entry in _fields(value):
      if entry_number != 1 or entry_wire != _LEN:
        continue
      name, kind, values = '', None, []
      for part, part_wire, part_value in _fields(entry):
        if part == 1 and part_wire == _LEN:
          name = part_value.decode('utf-8', 'replace')
        elif part == 2 and part_wire == _LEN:
          for listed_number, _, listed in _fields(part_value):
            if listed_number in KINDS:
              kind, values = KINDS[listed_number], _values(listed_number,
                                                           listed)
      features[name] = (kind, values)
  return features
