"""The absl entry point end to end, and its answers to bad input."""
import glob
import os
import re
import shutil
import time


import numpy as np
import pytest
import tensorflow as tf

from conftest import last_line, run_module
from estimator_mnist import config
from estimator_mnist import data
from estimator_mnist import divergence
from estimator_mnist import model
from estimator_mnist import train
from kit_core import checkpoint_files
from mnist_common import tfrecords
from mnist_common.errors import DivergedError
from mnist_common.errors import NonFiniteExportError

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

FLAG_NAMES = ('tpu', 'tpu_zone', 'gcp_project', 'data_dir', 'data_source',
              'data_url', 'model_dir', 'batch_size', 'train_steps',
              'eval_steps', 'learning_rate', 'iterations', 'num_shards',
              'use_tpu', 'enable_predict', 'num_predictions', 'seed',
              'export_to_tpu', 'version', 'save_checkpoints_steps')


def _test_images(data_dir, count):
  pairs = tf.data.TFRecordDataset(tfrecords.split_path(data_dir, 'test')).map(
      tfrecords.parse_example).take(count)
  images, labels = zip(*pairs.as_numpy_iterator())
  return np.stack(images), np.array(labels)


def _probabilities_from_checkpoint(model_dir, images):
  """Softmax of the network at the latest checkpoint, built independently."""
  with tf.Graph().as_default():
    scaled = data.scale_image(tf.constant(images))
    probs = tf.nn.softmax(model.build_network(scaled, training=False))
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, tf.train.latest_checkpoint(model_dir))
      return sess.run(probs)


@pytest.fixture(scope='module')
def trained(fake_data_dir, tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('run') / 'model')
  result = run_module('estimator_mnist', f'--data_dir={fake_data_dir.data_dir}',
                      f'--model_dir={model_dir}', '--train_steps=60',
                      '--batch_size=64', '--learning_rate=0.1')
  assert result.returncode == 0, result.stderr[-3000:]
  return model_dir, result


def test_main_leaves_checkpoint_eval_accuracy_and_predictions(trained):
  model_dir, result = trained
  assert os.path.exists(os.path.join(model_dir, 'model.ckpt-60.index'))
  accuracy = float(re.search(r'Eval accuracy: ([\d.]+) on 512 test images',
                             result.stdout).group(1))
  assert accuracy > 0.5  # The bars of the fake data are easy to learn.
  predictions = re.findall(r'Prediction is "(\d)" \(([\d.]+)%\), label (\d)',
                           result.stdout)
  assert len(predictions) == 10
  # Training logs its progress: the loss every 100 steps, from step 0.
  assert re.search(r'loss = [\d.]+, step = 0', result.stderr)
  # A user's output, not TensorFlow's: its deprecation notices and the
  # Estimator's graph and session steps are held back (--verbose shows them).
  assert 'Instructions for updating' not in result.stderr
  assert 'Calling model_fn' not in result.stderr
  assert len((result.stdout + result.stderr).splitlines()) <= 40, (
      result.stdout + result.stderr)
  # They are in the model_dir, and the output says where.
  log = os.path.join(model_dir, 'tensorflow.log')
  assert f"TensorFlow's own notices: {log}" in result.stderr
  with open(log) as f:
    held = f.read()
  assert 'Instructions for updating' in held and 'Calling model_fn' in held


def test_saved_model_loads_and_serves_the_checkpoint(trained, fake_data_dir):
  model_dir, result = trained
  export_dir = re.search(r'SavedModel: (\S+)', result.stdout).group(1)
  assert export_dir.startswith(os.path.join(model_dir, 'export'))
  loaded = tf.saved_model.load(export_dir)  # Plain load: no tags needed.
  serve = loaded.signatures['serving_default']
  images, _ = _test_images(fake_data_dir.data_dir, 10)
  served = serve(image=tf.constant(images))
  expected = _probabilities_from_checkpoint(model_dir, images)
  np.testing.assert_allclose(served['probabilities'].numpy(), expected,
                             atol=1e-6)
  np.testing.assert_array_equal(served['class_ids'].numpy(),
                                expected.argmax(axis=1))
  printed = [int(c) for c in re.findall(r'Prediction is "(\d)"',
                                        result.stdout)]
  assert printed == served['class_ids'].numpy().tolist()


def test_helpfull_documents_every_flag():
  result = run_module('estimator_mnist', '--helpfull')
  # absl prints the help to stdout and exits 1 after any help flag.
  assert 'estimator_mnist.main' in result.stdout
  for name in FLAG_NAMES:
    block = re.search(rf'--(\[no\])?{name}:(.*)', result.stdout)
    assert block and block.group(2).strip(), f'--{name} is not documented'


def test_version_names_the_estimator_build():
  result = run_module('estimator_mnist', '--version')
  assert result.returncode == 0
  assert re.search(r'^tensorflow 2\.15\.', result.stdout, re.M)
  assert re.search(r'^estimator (tensorflow-estimator|tf-estimator-nightly)==',
                   result.stdout, re.M)


def _assert_clean_failure(result, message, model_dir=None):
  assert result.returncode != 0
  assert re.search(message, last_line(result.stderr)), result.stderr[-2000:]
  if model_dir:
    assert not os.path.exists(model_dir), os.listdir(model_dir)


def test_use_tpu_without_tpu_fails_fast_and_writes_nothing(tmp_path,
                                                           fake_data_dir):
  model_dir = str(tmp_path / 'model')
  start = time.monotonic()
  result = run_module('estimator_mnist', '--use_tpu',
                      f'--data_dir={fake_data_dir.data_dir}',
                      f'--model_dir={model_dir}', timeout=60)
  assert time.monotonic() - start < 30
  _assert_clean_failure(result, r'^error: no TPU found on this machine; pass '
                        '--tpu=', model_dir)


def test_batch_not_divisible_by_shards_under_tpu(tmp_path):
  model_dir = str(tmp_path / 'model')
  result = run_module('estimator_mnist', '--use_tpu', '--batch_size=1000',
                      '--num_shards=16', f'--model_dir={model_dir}')
  _assert_clean_failure(result, r'^error: --batch_size=1000 is not divisible '
                        'by --num_shards=16', model_dir)


@pytest.mark.parametrize('flag', ['--train_steps=0', '--train_steps=-5',
                                  '--batch_size=0', '--iterations=0'])
def test_non_positive_counts_are_refused(flag):
  result = run_module('estimator_mnist', flag)
  assert result.returncode != 0
  name = flag.split('=')[0]
  assert re.fullmatch(rf'error: flag {name}=\S+: \S+ is not (a positive '
                      r'integer|an integer in the range \[1, \d+\]); see '
                      'python -m estimator_mnist --help\n', result.stderr), (
                          result.stderr[-1000:])


@pytest.mark.parametrize('value', ['nan', 'inf'])
def test_non_finite_learning_rate_is_refused(tmp_path, value):
  result = run_module('estimator_mnist', f'--learning_rate={value}',
                      f'--model_dir={tmp_path / "model"}')
  assert result.returncode != 0
  assert (f'flag --learning_rate={value}: must be a finite number' in
          result.stderr), result.stderr[-1000:]
  assert not os.path.exists(tmp_path / 'model')


# oneDNN's kernels (the default on CPUs with AVX-512 VNNI/BF16 or AMX) keep
# the loss finite over NaN weights; TensorFlow's own let it become NaN. Each
# is asked for, so both run on any x86 CPU.
@pytest.mark.parametrize('onednn', ['0', '1'])
def test_divergence_stops_at_the_last_good_checkpoint(tmp_path, fake_data_dir,
                                                      onednn):
  model_dir = tmp_path / 'model'
  common = (f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model_dir}',
            '--batch_size=64', '--save_checkpoints_steps=5', '--eval_steps=0',
            '--noenable_predict')
  env = {'TF_ENABLE_ONEDNN_OPTS': onednn}
  good = run_module('estimator_mnist', *common, '--train_steps=10',
                    '--learning_rate=0.1', env=env)
  assert good.returncode == 0, good.stderr[-2000:]
  diverged = run_module('estimator_mnist', *common, '--train_steps=30',
                        '--learning_rate=1e30', env=env)
  assert diverged.returncode != 0
  assert re.search(r'^error: the (weights|training loss) became .* by step '
                   r'\d+: training stopped, the latest checkpoint, '
                   r'model.ckpt-\d+, is the last good one, nothing was '
                   'exported', last_line(diverged.stderr)), diverged.stderr[-2000:]
  _assert_all_finite(tf.train.latest_checkpoint(str(model_dir)))
  exports = os.listdir(model_dir / 'export')
  assert len(exports) == 1  # The good run's only.


def _assert_all_finite(path):
  assert not divergence.non_finite_names(checkpoint_files.read_all(path)), path


def _config(model_dir, **overrides):
  """A short run: only what differs from the flags' defaults (config.py)."""
  return config.Config(**{
      'model_dir': str(model_dir), 'batch_size': 64, 'train_steps': 20,
      'eval_steps': 0, 'learning_rate': 0.1, 'iterations': 5,
      'enable_predict': False, 'num_predictions': 5,
      'save_checkpoints_steps': 5, **overrides})


def test_non_finite_weights_under_a_finite_loss_are_never_saved(
    tmp_path, fake_data_dir, monkeypatch):
  """A rate that becomes inf at the 10th update: that update makes every
  weight infinite (or NaN) from a finite loss and finite gradients, on any
  CPU, and the save due at step 10 must not happen."""
  monkeypatch.setattr(model, 'learning_rate_schedule', lambda rate: tf.where(
      tf.compat.v1.train.get_global_step() >= 9, np.inf, 0.1))
  model_dir = tmp_path / 'model'
  with pytest.raises(DivergedError) as raised:
    train.run(_config(model_dir), fake_data_dir)
  message = str(raised.value)
  assert re.match(r'the weights became non-finite \(.*\) by step 10: training '
                  r'stopped, the latest checkpoint, model.ckpt-5, is the last '
                  'good one, nothing was exported', message), message
  assert 'loss' not in message, message
  assert tf.train.latest_checkpoint(str(model_dir)).endswith('model.ckpt-5')
  _assert_all_finite(str(model_dir / 'model.ckpt-5'))
  assert not (model_dir / 'export').exists()


def test_a_batch_holding_nan_stops_after_its_step(tmp_path, fake_data_dir,
                                                  monkeypatch):
  """NaN pixels: the first convolution's kernel gradient multiplies them, so
  the step's update makes that kernel NaN on any CPU."""
  monkeypatch.setattr(data, 'scale_image',
                      lambda image: tf.cast(image, tf.float32) * np.nan)
  model_dir = tmp_path / 'model'
  with pytest.raises(DivergedError, match=r'^the weights became non-finite '
                     r'\(conv1/kernel.*\).* by step 1: training stopped, the '
                     'latest checkpoint, model.ckpt-0, is the last good one'):
    train.run(_config(model_dir), fake_data_dir)
  assert tf.train.latest_checkpoint(str(model_dir)).endswith('model.ckpt-0')


def _trained_ten_steps(model_dir, data):
  """A good run of 10 steps, checkpoints every 5; returns its flags but
  --train_steps, for the next run."""
  common = (f'--data_dir={data.data_dir}', f'--model_dir={model_dir}',
            '--batch_size=64', '--save_checkpoints_steps=5', '--eval_steps=0',
            '--noenable_predict', '--learning_rate=0.1')
  first = run_module('estimator_mnist', *common, '--train_steps=10')
  assert first.returncode == 0, first.stderr[-2000:]
  return common


def test_a_checkpoint_with_non_finite_weights_is_skipped(tmp_path,
                                                          fake_data_dir):
  model_dir = tmp_path / 'model'
  common = _trained_ten_steps(model_dir, fake_data_dir)
  # What a diverged run saved before the kit guarded its saves.
  latest = str(model_dir / 'model.ckpt-10')
  values = checkpoint_files.read_all(latest)
  values['dense/kernel'] = np.full_like(values['dense/kernel'], np.nan)
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(value, name=name)
                 for name, value in values.items()]
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(variables).save(
          session, latest, write_meta_graph=False, write_state=False)
  with pytest.raises(NonFiniteExportError, match=r'^the weights to export are '
                     r'not finite \(dense/kernel\): nothing was exported'):
    divergence.check_export(latest)
  again = run_module('estimator_mnist', *common, '--train_steps=15')
  assert again.returncode == 0, again.stderr[-2000:]
  assert re.search(r'Skipped \S+model.ckpt-10: its weights are not finite '
                   r'\(dense/kernel\); trying an older checkpoint',
                   again.stderr), again.stderr[-2000:]
  final = tf.train.latest_checkpoint(str(model_dir))
  assert final.endswith('model.ckpt-15')
  _assert_all_finite(final)


def test_an_unreadable_latest_checkpoint_falls_back(tmp_path, fake_data_dir):
  model_dir = tmp_path / 'model'
  common = _trained_ten_steps(model_dir, fake_data_dir)
  latest = tf.train.latest_checkpoint(str(model_dir))
  assert latest.endswith('model.ckpt-10')
  data_file = latest + '.data-00000-of-00001'
  with open(data_file, 'r+b') as f:
    f.truncate(os.path.getsize(data_file) // 2)
  (model_dir / 'model.ckpt-12_temp').mkdir()  # A kill during a save.
  again = run_module('estimator_mnist', *common, '--train_steps=15')
  assert again.returncode == 0, again.stderr[-2000:]
  assert re.search(r'Skipped \S+model.ckpt-10: it cannot be read', again.stderr)
  assert 'unfinished checkpoint folders' in again.stderr
  assert not (model_dir / 'model.ckpt-12_temp').exists()
  assert tf.train.latest_checkpoint(str(model_dir)).endswith('model.ckpt-15')


def test_a_lost_state_file_resumes_from_the_newest_checkpoint_files(
    tmp_path, fake_data_dir):
  """Missing, then garbage, then naming a deleted checkpoint: each run
  resumes from the newest checkpoint left, never from step 0 over them."""
  model_dir = tmp_path / 'model'
  common = _trained_ten_steps(model_dir, fake_data_dir)
  state = model_dir / 'checkpoint'
  for steps, damage, problem, resumed in (
      (15, state.unlink, 'is missing', 10),
      (20, lambda: state.write_text('garbage {{{'), 'cannot be read', 15),
      (25, lambda: [p.unlink() for p in model_dir.glob('model.ckpt-20.*')],
       'names model.ckpt-20, which is gone', 15)):
    damage()
    again = run_module('estimator_mnist', *common, f'--train_steps={steps}')
    assert again.returncode == 0, again.stderr[-2000:]
    assert re.search(rf'The checkpoint state file in \S+ {problem}: resuming '
                     rf'from model.ckpt-{resumed}, the newest', again.stderr)
    assert f'Restoring parameters from {model_dir}/model.ckpt-{resumed}' in (
        again.stderr), again.stderr[-2000:]
    assert tf.train.latest_checkpoint(str(model_dir)).endswith(
        f'model.ckpt-{steps}')


def test_unwritable_model_dir(tmp_path, fake_data_dir):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  result = run_module('estimator_mnist', f'--data_dir={fake_data_dir.data_dir}',
                      f'--model_dir={blocker}/model')
  _assert_clean_failure(result, r'^error: --model_dir .*/a_file/model is not a '
                        'writable directory')


def test_empty_data_dir(tmp_path):
  model_dir = str(tmp_path / 'model')
  (tmp_path / 'empty').mkdir()
  result = run_module('estimator_mnist', f'--data_dir={tmp_path}/empty',
                      f'--model_dir={model_dir}')
  _assert_clean_failure(result, r'^error: --data_dir .*/empty holds no MNIST '
                        'data', model_dir)


def test_corrupt_tfrecord_names_the_file(tmp_path, fake_data_dir):
  data_dir = tmp_path / 'data'
  shutil.copytree(fake_data_dir.data_dir, data_dir)
  with open(data_dir / 'test.tfrecords', 'r+b') as f:
    f.seek(3000)
    f.write(b'\x00' * 16)
  model_dir = str(tmp_path / 'model')
  result = run_module('estimator_mnist', f'--data_dir={data_dir}',
                      f'--model_dir={model_dir}')
  # Every record is as long (784 pixels, a one-byte label): the damage is
  # in the one that holds byte 3000, named with the byte it starts at.
  size = os.path.getsize(data_dir / 'test.tfrecords') // (
      fake_data_dir.test_examples)
  _assert_clean_failure(result, r'^error: .*/data/test\.tfrecords is corrupt '
                        rf'at or after record {3000 // size} \(corrupted '
                        rf'record at {3000 // size * size}\); put a complete '
                        'copy in its place', model_dir)


def test_stray_arguments_are_refused():
  result = run_module('estimator_mnist', 'train')
  _assert_clean_failure(result, r"^error: unexpected arguments \['train'\]")


def test_no_stray_temporary_files(trained, fake_data_dir):
  assert not glob.glob(os.path.join(fake_data_dir.data_dir, '.tmp-*'))


@pytest.mark.slow
def test_default_job_on_offline_default_data(tmp_path):
  """`python -m estimator_mnist` as the README runs it: defaults, no data."""
  cache = tmp_path / 'cache'
  result = run_module('estimator_mnist', f'--model_dir={tmp_path / "model"}',
                      env={'XDG_CACHE_HOME': str(cache)}, timeout=3600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert re.search(r'Data: scikit-learn handwritten digits .* \(1300 train, '
                   r'497 test examples\)', result.stderr)
  assert os.path.isfile(cache / 'tpu_migration_kit' / 'mnist' /
                        'train.tfrecords')
  accuracy = float(re.search(r'Eval accuracy: ([\d.]+) on 497 test images '
                             r'\(loss [\d.]+, step 1000\)',
                             result.stdout).group(1))
  assert accuracy >= 0.95
