"""The TFRecord format both halves read: one tf.train.Example per image with
``image_raw`` (784 bytes, uint8, row-major) and ``label`` (int64).

Written, counted and checked without TensorFlow (mnist_common/records.py),
so that the JAX profile reads the same files; ``parse_example`` alone is
TensorFlow's, for the tf.data pipelines of the other two.
"""
import os
import struct

import numpy as np

from kit_core import atomic
from mnist_common import records
from mnist_common.errors import DataError
from mnist_common.sources import IMAGE_SIZE, NUM_CLASSES

IMAGE_BYTES = IMAGE_SIZE * IMAGE_SIZE


def split_path(data_dir: str, split: str) -> str:
  return os.path.join(data_dir, f'{split}.tfrecords')


def write_records(path: str, images: np.ndarray, labels: np.ndarray) -> None:
  """Writes one split, atomically: a reader never sees a half-written file."""
  with atomic.temporary_path(path) as tmp:
    records.write(tmp, (records.encode_example({
        'image_raw': ('bytes_list', [image.tobytes()]),
        'label': ('int64_list', [int(label)])})
                        for image, label in zip(images, labels)))


def parse_example(record):
  """One serialized Example (a tf.string tensor) -> (uint8 image [28, 28, 1],
  int32 label), in a tf.data pipeline."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  example = tf.io.parse_single_example(record, {
      'image_raw': tf.io.FixedLenFeature([], tf.string),
      'label': tf.io.FixedLenFeature([], tf.int64)})
  image = tf.io.decode_raw(example['image_raw'], tf.uint8)
  image = tf.reshape(image, [IMAGE_SIZE, IMAGE_SIZE, 1])
  return image, tf.cast(example['label'], tf.int32)


# What to do with a damaged file: it may be the user's own, never to delete.
_REPLACE = ('put a complete copy in its place (if the kit wrote it from IDX, '
            'npz or digits, removing it makes the kit write it again)')
_EXPECTED = {'image_raw': ('bytes_list', f'{IMAGE_SIZE * IMAGE_SIZE} raw uint8 '
                           'bytes'),
             'label': ('int64_list', 'an integer 0-9')}


def _features_problem(features: dict) -> str | None:
  for key, (kind, meaning) in _EXPECTED.items():
    expected = f'expected one {kind[:-5]} value ({meaning})'
    if key not in features:
      return (f'it has no feature {key!r} (its features: '
              f'{", ".join(sorted(features)) or "none"}); {expected}')
    found, values = features[key]
    if found != kind or len(values) != 1:
      return (f'its feature {key!r} holds {len(values)} '
              f'{(found or "empty")[:-5]} value(s); {expected}')
  return None


def _problem(path: str, index: int, problem: str) -> DataError:
  return DataError(f'{path}: record {index} is not an MNIST example as the '
                   f'kit writes it: {problem}; write the records with '
                   'mnist_common.tfrecords.write_records, or let the kit '
                   'prepare them from IDX or npz files')


_HEADER, _FOOTER = records.HEADER, records.FOOTER


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


def read_split(path: str) -> tuple[np.ndarray, np.ndarray]:
  """Every (uint8 image [n, 28, 28, 1], int32 label [n]) of a file, checked
  as count_records checks it; no TensorFlow."""
  if not os.path.isfile(path):
    raise DataError(f'{path} does not exist')
  if os.path.getsize(path) == 0:
    raise DataError(f'{path} is empty; {_REPLACE}')
  _check_framing(path)
  images, labels = [], []
  try:
    for index, record in enumerate(records.read(path)):
      try:
        features = records.decode_example(record)
      except records.NotAnExample:
        raise _problem(path, index, 'it is not a tf.train.Example') from None
      problem = _features_problem(features)
      if problem:
        raise _problem(path, index, problem)
      image, label = features['image_raw'][1][0], features['label'][1][0]
      if len(image) != IMAGE_BYTES:
        raise DataError(f'{path}: record {index} has an image of '
                        f'{len(image)} bytes, expected {IMAGE_BYTES}')
      if not 0 <= label < NUM_CLASSES:
        raise DataError(f'{path}: record {index} has label {label}, '
                        'outside 0-9')
      images.append(image)
      labels.append(label)
  except records.CorruptRecord as e:
    raise DataError(f'{path} is corrupt at or after record {e.index} ({e}); '
                    f'{_REPLACE}') from e
  if not labels:
    raise DataError(f'{path} holds no records')
  pixels = np.frombuffer(b''.join(images), np.uint8)
  return (pixels.reshape(-1, IMAGE_SIZE, IMAGE_SIZE, 1),
          np.asarray(labels, np.int32))


def count_records(path: str) -> int:
  """Reads every record of a file and returns how many there are.

  Raises DataError naming the file when it is missing, empty, truncated,
  fails its CRC checks, or holds an Example that is not an MNIST image with a
  label in 0..9, so that training never starts on bad data.
  """
  return len(read_split(path)[1])
