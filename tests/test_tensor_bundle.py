"""kit_core/tensor_bundle.py reads a checkpoint as TensorFlow reads it, with
numpy alone (the jax profile converts Estimator checkpoints with it), and
refuses in one line what it cannot read; checkpoint_files finds checkpoints
without TensorFlow too. Checkpoints are written here by TF 1's Saver."""
import os

import numpy as np
import pytest
import tensorflow as tf

from kit_core import checkpoint_files
from kit_core import tensor_bundle


def _save(folder, variables: dict, partitioned: bool = False) -> str:
  """A name-based checkpoint of these {name: value} in folder; its prefix."""
  with tf.Graph().as_default():
    for name, value in variables.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value))
    if partitioned:
      tf.compat.v1.get_variable(
          'table', shape=[8, 2], initializer=tf.compat.v1.ones_initializer(),
          partitioner=tf.compat.v1.fixed_size_partitioner(2))
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return tf.compat.v1.train.Saver().save(
          session, str(folder / 'model.ckpt'), global_step=7)


def _as_tensorflow_reads(prefix: str) -> dict:
  reader = tf.train.load_checkpoint(prefix)
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_every_tensor_reads_as_tensorflow_reads_it(tmp_path):
  rng = np.random.default_rng(0)
  variables = {
      'dense/kernel': rng.standard_normal((3, 4)).astype(np.float32),
      'step': np.int64(-5), 'count': np.int32(3),
      'half': np.array([1.5, -2.25], np.float16),
      'double': np.array([1e300], np.float64),
      'flags': np.array([True, False]), 'bytes': np.arange(5, dtype=np.uint8),
      'empty': np.zeros((0, 3), np.float32),
      'brain': tf.constant([1.5, 2.5], tf.bfloat16)}
  # Enough names for the index to hold several blocks of entries.
  variables.update({f'layer_{i:04d}/' + 'x' * 80: np.float32(i)
                    for i in range(3000)})
  prefix = _save(tmp_path, variables)
  # TensorFlow's tables cut a block at 256 KiB.
  assert os.path.getsize(prefix + '.index') > 262144
  ours, theirs = tensor_bundle.read(prefix), _as_tensorflow_reads(prefix)
  assert sorted(ours) == sorted(theirs)
  for name, value in theirs.items():
    assert ours[name].dtype == value.dtype, name
    assert ours[name].shape == value.shape, name
    np.testing.assert_array_equal(ours[name], value)


def _damaged(tmp_path, suffix: str, change) -> str:
  prefix = _save(tmp_path, {'a': np.arange(6, dtype=np.float32),
                            'b': np.ones(4, np.float32)})
  path = prefix + suffix
  data = bytearray(open(path, 'rb').read())
  with open(path, 'wb') as f:
    f.write(change(data))
  return prefix


@pytest.mark.parametrize('suffix, change, said', [
    ('.data-00000-of-00001', lambda d: d[:4] + bytes([d[4] ^ 1]) + d[5:],
     'a does not match its CRC (corrupt data)'),
    ('.data-00000-of-00001', lambda d: d[:-3], 'runs past the end of its data'),
    ('.index', lambda d: d[:-10], 'not a checkpoint index'),
    ('.index', lambda d: d[:8] + bytes([d[8] ^ 1]) + d[9:],
     'does not match its CRC (corrupt)'),
])
def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, suffix, change,
                                                     said):
  prefix = _damaged(tmp_path, suffix, change)
  with pytest.raises(tensor_bundle.BundleError, match=said.replace('(', r'\(')
                     .replace(')', r'\)')) as raised:
    tensor_bundle.read(prefix)
  assert '\n' not in str(raised.value)


def test_what_it_does_not_read_is_named(tmp_path):
  (tmp_path / 'strings').mkdir()
  prefix = _save(tmp_path / 'strings', {'vocab': np.array([b'a', b'b'])})
  with pytest.raises(tensor_bundle.BundleError,
                     match='vocab is a string tensor.*read this checkpoint '
                     'with TensorFlow'):
    tensor_bundle.read(prefix)
  (tmp_path / 'sliced').mkdir()
  prefix = _save(tmp_path / 'sliced', {}, partitioned=True)
  with pytest.raises(tensor_bundle.BundleError,
                     match='table is saved in slices'):
    tensor_bundle.read(prefix)


def test_without_tensorflow_the_state_file_is_read_as_text(tmp_path,
                                                           monkeypatch):
  prefix = _save(tmp_path, {'a': np.float32(1)})
  with tf.Graph().as_default():
    tf.compat.v1.train.update_checkpoint_state(
        str(tmp_path), os.path.basename(prefix),
        all_model_checkpoint_paths=['model.ckpt-3', 'model.ckpt-7'])
  with_tf = checkpoint_files._read_state(str(tmp_path))  # pylint: disable=protected-access
  monkeypatch.setattr(checkpoint_files.lazy, 'installed', lambda name: False)
  assert checkpoint_files._read_state(str(tmp_path)) == with_tf  # pylint: disable=protected-access
  assert with_tf[0].endswith('model.ckpt-7')
  assert checkpoint_files.latest(str(tmp_path)) == prefix
  np.testing.assert_array_equal(checkpoint_files.read_all(prefix)['a'], 1)
  (tmp_path / 'checkpoint').write_text('garbage {')
  assert checkpoint_files._read_state(str(tmp_path)) is None  # pylint: disable=protected-access
  os.remove(prefix + '.index')
  with pytest.raises(checkpoint_files.UnreadableCheckpoint):
    checkpoint_files.read_all(prefix)
