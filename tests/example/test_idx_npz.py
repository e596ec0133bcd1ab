"""IDX and npz conversion to TFRecords, on small files the tests write."""
import gzip
import os

import numpy as np
import pytest

from mnist_common import idx
from mnist_common import prepare
from mnist_common import sources
from mnist_common import tfrecords
from mnist_common.errors import DataError


def _arrays(n, seed=0):
  rng = np.random.RandomState(seed)
  return (rng.randint(0, 256, (n, 28, 28)).astype(np.uint8),
          rng.randint(0, 10, n).astype(np.uint8))


def _write_idx_dir(directory, n_train=40, n_test=16, gz=True):
  ext = '.gz' if gz else ''
  arrays = {'train': _arrays(n_train, 1), 'test': _arrays(n_test, 2)}
  for split, (images_stem, labels_stem) in idx.FILES.items():
    images, labels = arrays[split]
    idx.write_idx(os.path.join(directory, images_stem + ext), images)
    idx.write_idx(os.path.join(directory, labels_stem + ext), labels)
  return arrays


def _read_back(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  pairs = list(tf.data.TFRecordDataset(path).map(tfrecords.parse_example)
               .as_numpy_iterator())
  return (np.stack([p[0][..., 0] for p in pairs]),
          np.array([p[1] for p in pairs]))


@pytest.mark.parametrize('gz', [True, False])
def test_idx_files_become_identical_tfrecords(tmp_path, gz):
  arrays = _write_idx_dir(str(tmp_path), gz=gz)
  info = prepare.prepare(str(tmp_path))  # 'auto' finds the IDX files.
  assert (info.source, info.train_examples, info.test_examples) == ('idx', 40, 16)
  for split, (images, labels) in arrays.items():
    got_images, got_labels = _read_back(info.path(split))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_npz_becomes_identical_tfrecords(tmp_path):
  (xt, yt), (xs, ys) = _arrays(30, 3), _arrays(12, 4)
  np.savez(tmp_path / 'mnist.npz', x_train=xt, y_train=yt, x_test=xs,
           y_test=ys)
  info = prepare.prepare(str(tmp_path))
  assert (info.source, info.train_examples, info.test_examples) == ('npz', 30, 12)
  got_images, got_labels = _read_back(info.path('test'))
  np.testing.assert_array_equal(got_images, xs)
  np.testing.assert_array_equal(got_labels, ys)


def test_prepared_records_are_reused_not_rewritten(tmp_path):
  _write_idx_dir(str(tmp_path))
  first = prepare.prepare(str(tmp_path))
  mtime = os.path.getmtime(first.path('train'))
  again = prepare.prepare(str(tmp_path))
  assert again == first
  assert os.path.getmtime(first.path('train')) == mtime


def test_an_interrupted_runs_temporary_files_are_removed(tmp_path):
  _write_idx_dir(str(tmp_path))
  prepare.prepare(str(tmp_path))
  # What a kill while writing leaves (mkstemp's names), and look-alikes.
  for name in ('.tmp-ab12_xyz.tfrecords', '.tmp-0123abcd.gz'):
    (tmp_path / name).write_bytes(b'half written')
  for name in ('.tmp-mine.tfrecords', 'tmp-ab12_xyz.tfrecords',
               '.tmp-ab12_xyz.tfrecords.bak'):
    (tmp_path / name).write_bytes(b'not ours')
  prepare.prepare(str(tmp_path))
  left = sorted(n for n in os.listdir(tmp_path) if 'tmp' in n)
  assert left == ['.tmp-ab12_xyz.tfrecords.bak', '.tmp-mine.tfrecords',
                  'tmp-ab12_xyz.tfrecords']


def test_data_that_cannot_be_locked_is_still_read(tmp_path):
  """A data dir the kit cannot write its lock into (read-only, or, as here
  where the tests may run as root, a folder in the lock's place) is read
  without the lock."""
  _write_idx_dir(str(tmp_path))
  first = prepare.prepare(str(tmp_path))
  os.remove(tmp_path / '.prepare.lock')
  (tmp_path / '.prepare.lock').mkdir()
  assert prepare.prepare(str(tmp_path)) == first


def test_wrong_magic_number_is_named(tmp_path):
  _write_idx_dir(str(tmp_path))
  # A labels file where the images file should be: magic 2049, not 2051.
  labels = os.path.join(tmp_path, 'train-labels-idx1-ubyte.gz')
  images = os.path.join(tmp_path, 'train-images-idx3-ubyte.gz')
  os.replace(labels, images)
  idx.write_idx(labels, _arrays(40)[1])
  with pytest.raises(DataError, match=r'train-images.*magic number 2049, '
                     r'expected 2051'):
    prepare.prepare(str(tmp_path))
  assert not os.path.exists(tmp_path / 'train.tfrecords')


def test_truncated_idx_file_is_named(tmp_path):
  _write_idx_dir(str(tmp_path))
  path = os.path.join(tmp_path, 't10k-images-idx3-ubyte.gz')
  with gzip.open(path) as f:
    payload = f.read()
  with gzip.open(path, 'wb') as f:
    f.write(payload[:-100])
  with pytest.raises(DataError, match=r't10k-images.*truncated'):
    prepare.prepare(str(tmp_path))
  assert not os.path.exists(tmp_path / 'test.tfrecords')


def test_mismatched_image_and_label_counts(tmp_path):
  _write_idx_dir(str(tmp_path))
  idx.write_idx(os.path.join(tmp_path, 't10k-labels-idx1-ubyte.gz'),
                _arrays(15)[1])
  with pytest.raises(DataError, match='16 images but .* 15 labels'):
    prepare.prepare(str(tmp_path))


def test_label_outside_0_to_9(tmp_path):
  _write_idx_dir(str(tmp_path))
  labels = _arrays(40, 1)[1]
  labels[7] = 12
  idx.write_idx(os.path.join(tmp_path, 'train-labels-idx1-ubyte.gz'), labels)
  with pytest.raises(DataError, match='label 12 at index 7 is outside 0-9'):
    prepare.prepare(str(tmp_path))


def test_npz_missing_array(tmp_path):
  np.savez(tmp_path / 'mnist.npz', x_train=_arrays(3)[0])
  with pytest.raises(DataError, match='lacks array y_train, x_test, y_test'):
    prepare.prepare(str(tmp_path))


def test_npz_wrong_image_shape(tmp_path):
  x = np.zeros((4, 32, 32), np.uint8)
  y = np.zeros(4, np.uint8)
  np.savez(tmp_path / 'mnist.npz', x_train=x, y_train=y, x_test=x, y_test=y)
  with pytest.raises(DataError, match=r'shape \[4, 32, 32\], expected'):
    prepare.prepare(str(tmp_path))


def test_explicit_missing_or_empty_data_dir(tmp_path):
  with pytest.raises(DataError, match='does not exist'):
    prepare.prepare(str(tmp_path / 'nope'))
  with pytest.raises(DataError, match='holds no MNIST data'):
    prepare.prepare(str(tmp_path))


def test_corrupt_tfrecord_is_named(tmp_path):
  info = prepare.prepare(str(tmp_path), 'fake')
  path = info.path('train')
  with open(path, 'r+b') as f:
    f.seek(5000)
    f.write(b'\xff' * 8)
  with pytest.raises(DataError, match=r'train\.tfrecords is corrupt at or '
                     r'after record \d+ \(.*\); put a complete copy in its '
                     'place'):
    prepare.prepare(str(tmp_path))


def test_truncated_tfrecord_is_named(tmp_path):
  info = prepare.prepare(str(tmp_path), 'fake')
  path = info.path('test')
  size = os.path.getsize(path)
  with open(path, 'r+b') as f:
    f.truncate(size - 10)
  with pytest.raises(DataError, match=r'test\.tfrecords is truncated'):
    tfrecords.count_records(path)


def test_tfrecord_with_bad_label_is_named(tmp_path):
  images, labels = _arrays(5)
  labels = labels.astype(np.int64)
  labels[3] = -1
  path = str(tmp_path / 'train.tfrecords')
  tfrecords.write_records(path, images, labels)
  with pytest.raises(DataError, match=r'train\.tfrecords: record 3 has label '
                     '-1'):
    tfrecords.count_records(path)


def _npz(path, images, labels):
  np.savez(path, x_train=images, y_train=labels, x_test=images[:4],
           y_test=labels[:4])


def test_float_images_in_0_1_are_scaled_with_a_line(tmp_path, caplog):
  images, labels = _arrays(12, 5)
  _npz(tmp_path / 'mnist.npz', images.astype(np.float32) / 255, labels)
  info = prepare.prepare(str(tmp_path))
  got, _ = _read_back(info.path('train'))
  np.testing.assert_array_equal(got, images)
  assert 'images are float32 in [0, 1]: scaled by 255' in caplog.text


def test_whole_float_pixels_and_labels_are_taken_as_they_are(tmp_path):
  images, labels = _arrays(12, 6)
  _npz(tmp_path / 'mnist.npz', images.astype(np.float64),
       labels.astype(np.float32))
  info = prepare.prepare(str(tmp_path))
  got_images, got_labels = _read_back(info.path('train'))
  np.testing.assert_array_equal(got_images, images)
  np.testing.assert_array_equal(got_labels, labels)


@pytest.mark.parametrize('images, labels, message', [
    (np.full((5, 28, 28), 999, np.int32), np.arange(5),
     r'images of dtype int32 hold values from 999 to 999; expected pixels '
     r'0-255 \(or floats in \[0, 1\]\): convert them'),
    (np.full((5, 28, 28), -0.5, np.float32), np.arange(5),
     'images of dtype float32 hold values from -0.5 to -0.5'),
    (np.full((5, 28, 28), np.nan, np.float32), np.arange(5),
     'images hold NaN or infinite values'),
    (np.zeros((5, 28, 28), bool), np.arange(5),
     'images are of dtype bool; expected uint8'),
    (np.zeros((5, 28, 28), np.uint8), np.array([0, 1.8, 2, 6.98, 3]),
     r'label 1.8 at index 1 is not a whole number \(2 such labels\)'),
    (np.zeros((5, 28, 28), np.uint8), np.array(list('01234')),
     'labels are of dtype <U1; expected integers 0-9'),
    (np.zeros((5, 28, 28), np.uint8), np.array([0, 1, 300, 2, 3], np.int32),
     'label 300 at index 2 is outside 0-9'),
])
def test_npz_values_that_are_no_mnist_are_refused(tmp_path, images, labels,
                                                  message):
  _npz(tmp_path / 'mnist.npz', images, labels)
  with pytest.raises(DataError, match=r'mnist\.npz \[train\]: ' + message):
    prepare.prepare(str(tmp_path))
  assert not os.path.exists(tmp_path / 'train.tfrecords')


def test_idx_files_of_another_element_type_are_read_as_that_type(tmp_path):
  arrays = _write_idx_dir(str(tmp_path))
  images = os.path.join(tmp_path, 'train-images-idx3-ubyte.gz')
  idx.write_idx(images, arrays['train'][0].astype(np.int32) * 4, np.int32)
  with pytest.raises(DataError, match=r'images of dtype >i4 hold values from '
                     r'\d+ to 10\d\d'):
    prepare.prepare(str(tmp_path))
  idx.write_idx(images, arrays['train'][0] / 255, np.float32)
  info = prepare.prepare(str(tmp_path))
  np.testing.assert_array_equal(_read_back(info.path('train'))[0],
                                arrays['train'][0])


@pytest.mark.parametrize('text, message', [
    ('[1, 2]', 'it holds a JSON list, not an object'),
    ('{"source": "mine"}', "it names source 'mine', none of idx, npz"),
    ('{"source": "fake", "train_examples": "many"}',
     "its train_examples is 'many', not a count"),
    ('{"source": ', 'it cannot be read as JSON'),
])
def test_a_dataset_info_the_kit_did_not_write_is_one_line(tmp_path, text,
                                                          message):
  prepare.prepare(str(tmp_path), 'fake')
  (tmp_path / 'dataset_info.json').write_text(text)
  with pytest.raises(DataError, match=r'dataset_info\.json is not the record '
                     rf'of the data the kit wrote \({message}.*\); remove it'):
    prepare.prepare(str(tmp_path))


def test_a_data_dir_that_is_a_file_is_named_so(tmp_path):
  (tmp_path / 'data').write_text('')
  for source in ('auto', 'fake'):
    with pytest.raises(DataError, match=r'--data_dir \S+data is a file, not a '
                       'folder'):
      prepare.prepare(str(tmp_path / 'data'), source)


def _example(**features):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  kinds = {bytes: lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(
      value=v)), int: lambda v: tf.train.Feature(int64_list=tf.train.Int64List(
          value=v)), float: lambda v: tf.train.Feature(
              float_list=tf.train.FloatList(value=v))}
  return tf.train.Example(features=tf.train.Features(feature={
      key: kinds[type(values[0])](values) for key, values in features.items()
  })).SerializeToString()


@pytest.mark.parametrize('features, message', [
    ({'image_raw': [bytes(784)], 'label': [b'7']},
     "its feature 'label' holds 1 bytes value\(s\); expected one int64 value"),
    ({'image_raw': [bytes(784)], 'label': [7.0]},
     "its feature 'label' holds 1 float value"),
    ({'image_raw': [bytes(784)], 'label': [7, 1]},
     "its feature 'label' holds 2 int64 value"),
    ({'image': [bytes(784)], 'label': [7]},
     "it has no feature 'image_raw' \(its features: image, label\)"),
])
def test_tfrecords_of_another_schema_name_the_feature(tmp_path, features,
                                                      message):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'train.tfrecords')
  images, labels = _arrays(3)
  tfrecords.write_records(path, images, labels)
  good = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
  with tf.io.TFRecordWriter(path) as writer:
    for record in good + [_example(**features)]:
      writer.write(record)
  with pytest.raises(DataError, match=r'train\.tfrecords: record 3 is not an '
                     r'MNIST example as the kit writes it: ' + message) as e:
    tfrecords.count_records(path)
  assert 'delete' not in str(e.value)


def test_digits_are_real_handwriting_at_mnist_size(digits_data_dir):
  info = digits_data_dir
  assert info.source == 'digits'
  assert (info.train_examples, info.test_examples) == (1300, 497)
  images, labels = _read_back(info.path('test'))
  assert images.shape == (497, 28, 28)
  assert set(labels) == set(range(10))
  # MNIST layout: the digit in the 20x20 centre, a 4-pixel empty border.
  assert images[:, :4].max() == 0 and images[:, 24:].max() == 0
  assert images.max() >= 250


def test_fake_data_is_learnable_and_labelled():
  splits = sources.load_fake(num_train=50, num_test=10, seed=3)
  images, labels = splits['train']
  rows = 2 + 2 * labels
  assert (images[np.arange(50), rows, 10] == 255).all()
