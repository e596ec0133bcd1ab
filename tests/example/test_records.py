"""The TFRecord and tf.train.Example formats read and written without
TensorFlow (mnist_common/records.py): on the jax profile they are how the
example reads its data; where TensorFlow is installed, each side reads what
the other wrote."""
import importlib.util
import os
import subprocess
import sys

from conftest import REPO
import numpy as np
import pytest

from mnist_common import prepare
from mnist_common import records
from mnist_common import sources
from mnist_common import tfrecords
from mnist_common.errors import DataError

needs_tensorflow = pytest.mark.skipif(
    importlib.util.find_spec('tensorflow') is None,
    reason='the cross-check needs TensorFlow (not on the jax profile)')


def _arrays(count):
  images = np.arange(count * 784, dtype=np.int64).reshape(count, 28, 28, 1)
  return (images % 256).astype(np.uint8), np.arange(count) % 10


def test_examples_round_trip_with_every_int64(tmp_path):
  for label in (0, 9, 2**40, -1, -2**63):
    data = records.encode_example({'image_raw': ('bytes_list', [b'\x00\xff']),
                                   'label': ('int64_list', [label, 3])})
    assert records.decode_example(data) == {
        'image_raw': ('bytes_list', [b'\x00\xff']),
        'label': ('int64_list', [label, 3])}


def test_a_flipped_bit_is_a_corrupt_record_named_by_offset(tmp_path):
  path = str(tmp_path / 'a.tfrecords')
  records.write(path, [b'first', b'second record'])
  assert list(records.read(path)) == [b'first', b'second record']
  data = bytearray(open(path, 'rb').read())
  second = records.HEADER + len(b'first') + records.FOOTER
  data[second + records.HEADER + 2] ^= 1
  open(path, 'wb').write(bytes(data))
  with pytest.raises(records.CorruptRecord,
                     match=f'corrupted record at {second}') as e:
    list(records.read(path))
  assert e.value.index == 1


def test_a_prepared_split_reads_back_as_written(tmp_path):
  info = prepare.prepare(str(tmp_path), 'fake')
  images, labels = tfrecords.read_split(info.path('test'))
  assert images.shape == (info.test_examples, 28, 28, 1)
  assert images.dtype == np.uint8 and labels.dtype == np.int32
  assert set(labels) <= set(range(10))
  written, _ = _arrays(3)
  tfrecords.write_records(str(tmp_path / 'b.tfrecords'), written,
                          np.array([7, 0, 9]))
  images, labels = tfrecords.read_split(str(tmp_path / 'b.tfrecords'))
  np.testing.assert_array_equal(images, written)
  assert labels.tolist() == [7, 0, 9]


def test_a_record_of_another_schema_is_named(tmp_path):
  path = str(tmp_path / 'train.tfrecords')
  records.write(path, [records.encode_example({
      'image': ('bytes_list', [bytes(784)]), 'label': ('int64_list', [1])})])
  with pytest.raises(DataError, match=r"record 0 is not an MNIST example as "
                     r"the kit writes it: it has no feature 'image_raw'"):
    tfrecords.read_split(path)


@needs_tensorflow
def test_tensorflow_reads_ours_and_we_read_tensorflows(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  images, labels = _arrays(4)
  ours = str(tmp_path / 'ours.tfrecords')
  tfrecords.write_records(ours, images, labels)
  parsed = [tfrecords.parse_example(r) for r in tf.data.TFRecordDataset(ours)]
  for (image, label), want_image, want_label in zip(parsed, images, labels):
    np.testing.assert_array_equal(image.numpy(), want_image)
    assert int(label) == want_label
  theirs = str(tmp_path / 'theirs.tfrecords')
  with tf.io.TFRecordWriter(theirs) as writer:
    for image, label in zip(images, labels):
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          'label': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[int(label)])),
          'image_raw': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[image.tobytes()]))})).SerializeToString())
  read_images, read_labels = tfrecords.read_split(theirs)
  np.testing.assert_array_equal(read_images, images)
  assert read_labels.tolist() == labels.tolist()
  assert os.path.getsize(ours) == os.path.getsize(theirs)


def test_the_default_digits_are_prepared_with_no_tensorflow(tmp_path):
  # tensorflow made unimportable in a fresh interpreter, as on the jax
  # profile, even where it is installed.
  code = ('import sys; sys.modules["tensorflow"] = None\n'
          'from mnist_common import prepare\n'
          f'info = prepare.prepare({str(tmp_path)!r}, "digits")\n'
          'print(info.train_examples, info.test_examples)\n')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, timeout=300, check=False,
                        env={**os.environ, 'PYTHONPATH': REPO})
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ['1300', '497']
  images, labels = tfrecords.read_split(tfrecords.split_path(str(tmp_path),
                                                             'test'))
  assert images.shape == (497, 28, 28, 1) and set(labels) == set(range(10))


def _digits_as_tensorflow_resized_them():
  """load_digits as the kit made them with tf.image.resize, up to 0.1.0."""
  import sklearn.datasets  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  digits = sklearn.datasets.load_digits()
  small = digits.images.astype(np.float32)[..., None] * (255.0 / 16.0)
  big = tf.image.resize(small, [20, 20], method='bicubic')
  big = np.clip(np.rint(big.numpy()[..., 0]), 0, 255).astype(np.uint8)
  images = np.pad(big, ((0, 0), (4, 4), (4, 4)))
  order = np.random.RandomState(0).permutation(len(images))
  return images[order], digits.target[order]


@needs_tensorflow
def test_the_digits_are_the_bytes_tensorflow_made():
  images, labels = _digits_as_tensorflow_resized_them()
  splits = sources.load_digits()
  assert (np.concatenate([splits['train'][0], splits['test'][0]]).tobytes()
          == images.tobytes())
  assert (np.concatenate([splits['train'][1], splits['test'][1]]).tolist()
          == labels.tolist())


@needs_tensorflow
@pytest.mark.parametrize('shape', [(8, 8, 20, 20), (5, 7, 13, 29),
                                   (16, 16, 9, 30), (1, 4, 3, 2)])
def test_resize_bicubic_is_tensorflows_bit_for_bit(shape):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  height, width, new_height, new_width = shape
  images = np.random.RandomState(sum(shape)).uniform(
      -300, 300, (3, height, width)).astype(np.float32)
  want = tf.image.resize(images[..., None], [new_height, new_width],
                         method='bicubic').numpy()[..., 0]
  got = sources.resize_bicubic(images, new_height, new_width)
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
