"""The TFRecord format both halves read: one tf.train.Example per image with
``image_raw`` (784 bytes, uint8, row-major) and ``label`` (int64).
"""
import os
import re
import struct

import numpy as np
import tensorflow as tf

from kit_core import atomic
from mnist_common.errors import DataError
from mnist_common.sources import IMAGE_SIZE, NUM_CLASSES

FEATURES = {
    'image_raw': tf.io.FixedLenFeature([], tf.string),
    'label': tf.io.FixedLenFeature([], tf.int64),
}
IMAGE_BYTES = IMAGE_SIZE * IMAGE_SIZE


def split_path(data_dir: str, split: str) -> str:
  return os.path.join(data_dir, f'{split}.tfrecords')


def write_records(path: str, images: np.ndarray, labels: np.ndarray) -> None:
  """Writes one split, atomically: a reader never sees a half-written file."""
  with atomic.temporary_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for image, label in zip(images, labels):
        example = tf.train.Example(features=tf.train.Features(feature={
            'image_raw': tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[image.tobytes()])),
            'label': tf.train.Feature(
                int64_list=tf.train.Int64List(value=[int(label)])),
        }))
        writer.write(example.SerializeToString())


def parse_example(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """One serialized Example -> (uint8 image [28, 28, 1], int32 label)."""
  example = tf.io.parse_single_example(record, FEATURES)
  image = tf.io.decode_raw(example['image_raw'], tf.uint8)
  image = tf.reshape(image, [IMAGE_SIZE, IMAGE_SIZE, 1])
  return image, tf.cast(example['label'], tf.int32)


# What to do with a damaged file: it may be the user's own, never to delete.
_REPLACE = ('put a complete copy in its place (if the kit wrote it from IDX, '
            'npz or digits, removing it makes the kit write it again)')
_EXPECTED = {'image_raw': ('bytes_list', f'{IMAGE_SIZE * IMAGE_SIZE} raw uint8 '
                           'bytes'),
             'label': ('int64_list', 'an integer 0-9')}


def schema_problem(record: bytes) -> str | None:
  """How one serialized record differs from the Example the kit reads
  (image_raw: one bytes value, label: one int64), or None if it does not."""
  try:
    features = tf.train.Example.FromString(record).features.feature
  except Exception:  # pylint: disable=broad-except
    # protobuf's DecodeError differs between its implementations.
    return 'it is not a tf.train.Example'
  for key, (kind, meaning) in _EXPECTED.items():
    expected = f'expected one {kind[:-5]} value ({meaning})'
    if key not in features:
      return (f'it has no feature {key!r} (its features: '
              f'{", ".join(sorted(features)) or "none"}); {expected}')
    found = features[key].WhichOneof('kind')
    values = len(getattr(features[key], found).value) if found else 0
    if found != kind or values != 1:
      return (f'its feature {key!r} holds {values} {(found or "empty")[:-5]} '
              f'value(s); {expected}')
  return None


def _first_schema_problem(path: str, start: int) -> str | None:
  """The first record from `start` that is not the kit's Example, named."""
  for i, record in enumerate(tf.data.TFRecordDataset(path).skip(start)
                             .as_numpy_iterator()):
    problem = schema_problem(record)
    if problem:
      return (f'{path}: record {start + i} is not an MNIST example as the kit '
              f'writes it: {problem}; write the records with '
              'mnist_common.tfrecords.write_records, or let the kit prepare '
              'them from IDX or npz files')
  return None


# A record: length (8 bytes), its CRC (4), the data, the data's CRC (4).
_HEADER, _FOOTER = 12, 4


def _check_framing(path: str) -> None:
  """Raises DataError unless the file ends exactly where a record does.

  TensorFlow's reader takes a file cut inside a record's 12-byte header for
  its end, and so trains on fewer records without a word; walking the
  headers finds the cut (the CRCs are TensorFlow's to check).
  """
  size = os.path.getsize(path)
  position, count = 0, 0
  with open(path, 'rb') as f:
    while position < size:
      f.seek(position)
      header = f.read(_HEADER)
      length = (struct.unpack('<Q', header[:8])[0] if len(header) == _HEADER
                else None)
      if length is None or position + _HEADER + length + _FOOTER > size:
        raise DataError(f'{path} is truncated: record {count} (at byte '
                        f'{position}) is cut short at byte {size}; '
                        f'{_REPLACE}')
      position += _HEADER + length + _FOOTER
      count += 1


def count_records(path: str) -> int:
  """Reads every record of a file and returns how many there are.

  Raises DataError naming the file when it is missing, empty, truncated,
  fails its CRC checks, or holds an Example that is not an MNIST image with a
  label in 0..9, so that training never starts on bad data.
  """
  if not os.path.isfile(path):
    raise DataError(f'{path} does not exist')
  if os.path.getsize(path) == 0:
    raise DataError(f'{path} is empty; {_REPLACE}')
  _check_framing(path)
  dataset = tf.data.TFRecordDataset(path).batch(4096).map(
      lambda r: tf.io.parse_example(r, FEATURES))
  count = 0
  try:
    for batch in dataset:
      sizes = tf.strings.length(batch['image_raw']).numpy()
      labels = batch['label'].numpy()
      if np.any(sizes != IMAGE_BYTES):
        i = int(np.flatnonzero(sizes != IMAGE_BYTES)[0])
        raise DataError(f'{path}: record {count + i} has an image of '
                        f'{sizes[i]} bytes, expected {IMAGE_BYTES}')
      if np.any((labels < 0) | (labels >= NUM_CLASSES)):
        i = int(np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))[0])
        raise DataError(f'{path}: record {count + i} has label {labels[i]}, '
                        'outside 0-9')
      count += len(labels)
  except tf.errors.InvalidArgumentError as e:
    # A record of another schema fails to parse: name its feature and type.
    problem = _first_schema_problem(path, count)
    if problem is None:
      raise _corrupt(path, count, e) from e
    raise DataError(problem) from e
  except tf.errors.DataLossError as e:
    raise _corrupt(path, count, e) from e
  if count == 0:
    raise DataError(f'{path} holds no records')
  return count


def _corrupt(path: str, count: int, error: tf.errors.OpError) -> DataError:
  # '{{function_node ...}} corrupted record at 2538 [Op:IteratorGetNext]'.
  reason = re.sub(r'\{\{function_node [^}]*\}\}\s*|\s*\[Op:.*$', '',
                  error.message.splitlines()[0])
  return DataError(f'{path} is corrupt at or after record {count} ({reason}); '
                   f'{_REPLACE}')
