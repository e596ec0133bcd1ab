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

from kit_core import wire

HEADER, FOOTER = 12, 4
# Feature's oneof, by field number (example.proto's feature.proto).
KINDS = {1: 'bytes_list', 2: 'float_list', 3: 'int64_list'}


class CorruptRecord(ValueError):
  """A record whose CRC does not match: at `offset`, the `index`-th."""

  def __init__(self, index: int, offset: int):
    super().__init__(f'corrupted record at {offset}')
    self.index, self.offset = index, offset


class NotAnExample(ValueError):
  """Bytes that are not a tf.train.Example in the wire format."""


def frame(data: bytes) -> bytes:
  """One record as it is written to a TFRecord file."""
  header = struct.pack('<Q', len(data))
  return b''.join((header, struct.pack('<I', wire.masked_crc(header)), data,
                   struct.pack('<I', wire.masked_crc(data))))


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
        struct.unpack('<I', header[8:])[0] != wire.masked_crc(header[:8])):
      raise CorruptRecord(index, position)
    payload = data[position + HEADER:end]
    footer = struct.unpack('<I', data[end:end + FOOTER])[0]
    if footer != wire.masked_crc(payload):
      raise CorruptRecord(index, position)
    yield payload
    position, index = end + FOOTER, index + 1


def _field(number: int, payload: bytes) -> bytes:
  return (wire.varint(number << 3 | wire.LEN) + wire.varint(len(payload)) +
          payload)


def encode_example(features: dict[str, tuple[str, list]]) -> bytes:
  """An Example of features {name: (kind, values)}; kind 'bytes_list' or
  'int64_list'."""
  entries = []
  for name, (kind, values) in features.items():
    if kind == 'bytes_list':
      listed = b''.join(_field(1, value) for value in values)
    elif kind == 'int64_list':
      # Packed.
      listed = _field(1, b''.join(wire.varint(int(v)) for v in values))
    else:
      raise ValueError(f'kind {kind!r}: bytes_list or int64_list')
    number = next(n for n, k in KINDS.items() if k == kind)
    entries.append(_field(1, _field(1, name.encode()) +
                          _field(2, _field(number, listed))))
  return _field(1, b''.join(entries))


def _fields(data: bytes):
  try:
    yield from wire.fields(data)
  except wire.WireError as e:
    raise NotAnExample(str(e)) from e


def _int64s(wire_type: int, value) -> list[int]:
  if wire_type == wire.VARINT:
    raw = [value]
  else:  # Packed.
    raw, position = [], 0
    while position < len(value):
      try:
        item, position = wire.read_varint(value, position)
      except wire.WireError as e:
        raise NotAnExample(str(e)) from e
      raw.append(item)
  return [wire.signed(v) for v in raw]


def _values(number: int, listed: bytes) -> list:
  values = []
  for _, wire_type, value in _fields(listed):
    if number == 1:
      values.append(value)
    elif number == 3:
      values.extend(_int64s(wire_type, value))
    else:  # Floats: counted, never used by the kit.
      values.extend([0.0] * (len(value) // 4 if wire_type == wire.LEN else 1))
  return values


def decode_example(data: bytes) -> dict[str, tuple[str | None, list]]:
  """{feature name: (kind or None when empty, values)} of a serialized
  Example.

  Raises:
    NotAnExample: the bytes are not an Example.
  """
  features = {}
  for number, wire_type, value in _fields(data):
    if number != 1 or wire_type != wire.LEN:
      continue
    for entry_number, entry_wire, entry in _fields(value):
      if entry_number != 1 or entry_wire != wire.LEN:
        continue
      name, kind, values = '', None, []
      for part, part_wire, part_value in _fields(entry):
        if part == 1 and part_wire == wire.LEN:
          name = part_value.decode('utf-8', 'replace')
        elif part == 2 and part_wire == wire.LEN:
          for listed_number, _, listed in _fields(part_value):
            if listed_number in KINDS:
              kind, values = KINDS[listed_number], _values(listed_number,
                                                           listed)
      features[name] = (kind, values)
  return features
