"""migrate.train.run in-process, with injected strategies and data."""
import os
import re
import types

import numpy as np
import pytest
import tensorflow as tf

from conftest import cpu_strategy
from kit_core import cpu
from kit_core.errors import KitError
from migrate import cadence
from migrate import checkpoints
from migrate import config
from migrate import custom_loop
from migrate import data
from migrate import divergence
from migrate import fit_loop
from migrate import model as model_lib
from migrate import train
from mnist_common.errors import DivergedError
from mnist_common.errors import NonFiniteExportError

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e


def make_config(model_dir, **overrides):
  """A short run: only what differs from the flags' defaults (config.py)."""
  return config.Config(**{
      'model_dir': str(model_dir), 'batch_size': 64, 'train_steps': 20,
      'learning_rate': 0.1, 'num_predictions': 5, 'steps_per_execution': 5,
      'checkpoint_steps': 10, **overrides})


def _serve(export_dir, images):
  return tf.saved_model.load(export_dir).signatures['serving_default'](
      image=tf.constant(images))


@pytest.mark.parametrize('loop', ['fit', 'custom'])
@pytest.mark.parametrize('replicas', [1, 2])
def test_trains_evaluates_predicts_and_exports(tmp_path, fake_data_dir, loop,
                                               replicas):
  config_ = make_config(tmp_path / 'model', loop=loop)
  result = train.run(config_, cpu_strategy(replicas), fake_data_dir)
  assert result['replicas'] == replicas and result['global_step'] == 20
  assert result['eval']['accuracy'] > 0.5  # The fake data is easy.
  assert len(result['predictions']) == 5
  assert tf.train.latest_checkpoint(config_.model_dir).endswith('ckpt-20')
  # The served model gives the printed predictions.
  test = tf.data.TFRecordDataset(fake_data_dir.path('test')).take(5)
  images = np.stack([tf.io.decode_raw(tf.io.parse_single_example(
      r, {'image_raw': tf.io.FixedLenFeature([], tf.string)})['image_raw'],
                                      tf.uint8).numpy().reshape(28, 28, 1)
                     for r in test])
  served = _serve(result['export_dir'], images)
  assert served['class_ids'].numpy().tolist() == [
      p['class_id'] for p in result['predictions']]
  np.testing.assert_allclose(
      served['probabilities'].numpy().max(axis=1),
      [p['probability'] for p in result['predictions']], atol=1e-6)


@pytest.mark.parametrize('loop, replicas', [('fit', 1), ('custom', 2)])
def test_mixed_bfloat16_trains_exports_float32_and_resumes_in_float32(
    tmp_path, fake_data_dir, loop, replicas, caplog):
  model_dir = tmp_path / 'model'
  mixed = train.run(make_config(model_dir, loop=loop,
                               precision='mixed_bfloat16'),
                    cpu_strategy(replicas), fake_data_dir)
  assert mixed['eval']['accuracy'] > 0.5  # The fake data is easy.
  # Said where this CPU would emulate bfloat16, and only there.
  warned = 'on a CPU without bfloat16 arithmetic' in caplog.text
  assert warned is (cpu.has_bfloat16_arithmetic() is False)
  images = np.zeros([3, 28, 28, 1], np.uint8)
  served = _serve(mixed['export_dir'], images)
  assert served['probabilities'].dtype == tf.float32
  np.testing.assert_allclose(served['probabilities'].numpy().sum(axis=1), 1,
                             rtol=1e-5)
  # Its checkpoint is a float32 model's: it restores exactly in float32.
  restored = train.run(make_config(model_dir, loop=loop, enable_predict=False,
                                  eval_steps=0),
                       cpu_strategy(replicas), fake_data_dir)
  assert restored['global_step'] == 20
  assert restored['fingerprint'] == mixed['fingerprint']


def _checkpoint_steps(model_dir):
  state = tf.train.get_checkpoint_state(str(model_dir))
  return [int(p.rsplit('-', 1)[1]) for p in state.all_model_checkpoint_paths]


def test_fit_refuses_checkpoints_between_executions(tmp_path, fake_data_dir):
  # Keras returns to Python (and its callbacks) only once per execution of 5
  # steps: a checkpoint every step cannot be kept, so it is refused up front.
  config_ = make_config(tmp_path / 'model', steps_per_execution=5,
                         checkpoint_steps=1)
  with pytest.raises(KitError, match='--checkpoint_steps=1 is not a multiple '
                     'of --steps_per_execution=5'):
    train.run(config_, cpu_strategy(1), fake_data_dir)
  assert not os.path.exists(tmp_path / 'model')
  # The custom loop stops at every checkpoint boundary: it may.
  config_ = make_config(tmp_path / 'model', steps_per_execution=5,
                         checkpoint_steps=3, loop='custom', train_steps=9,
                         enable_predict=False, eval_steps=0)
  train.run(config_, cpu_strategy(1), fake_data_dir)
  assert _checkpoint_steps(tmp_path / 'model') == [3, 6, 9]


def _assert_all_finite(checkpoint_prefix):
  reader = tf.train.load_checkpoint(str(checkpoint_prefix))
  for name in reader.get_variable_to_shape_map():
    value = reader.get_tensor(name)
    if np.issubdtype(np.asarray(value).dtype, np.floating):
      assert np.isfinite(value).all(), name


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_divergence_stops_at_the_last_good_checkpoint(tmp_path, fake_data_dir,
                                                      loop):
  """A rate of 1e30: whether the loss goes non-finite with the weights
  depends on the CPU's kernels (with oneDNN it stays finite); the run stops
  on every CPU."""
  model_dir = tmp_path / 'model'
  train.run(make_config(model_dir, loop=loop, train_steps=10,
                       enable_predict=False, eval_steps=0),
            cpu_strategy(1), fake_data_dir)
  diverging = make_config(model_dir, loop=loop, train_steps=40,
                         learning_rate=1e30)
  with pytest.raises(DivergedError, match=r'^the (weights|training loss) '
                     r'became .* by step \d+: training stopped, the '
                     r'latest checkpoint, ckpt-10, is the last good one, '
                     'nothing was exported'):
    train.run(diverging, cpu_strategy(1), fake_data_dir)
  assert _checkpoint_steps(model_dir) == [10]
  assert len(os.listdir(model_dir / 'export')) == 1  # The first run's.
  _assert_all_finite(model_dir / 'ckpt-10')


class _InfiniteFrom(tf.keras.optimizers.schedules.LearningRateSchedule):
  """0.1, then inf from optimizer step `first`: that step's update makes
  every weight it touches infinite (or NaN where the gradient is 0), from a
  finite loss and finite gradients, on any CPU."""

  def __init__(self, first: int):
    self.first = first

  def __call__(self, step):
    return tf.where(step >= self.first, float('inf'), 0.1)

  def get_config(self):
    return {'first': self.first}


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_non_finite_weights_under_a_finite_loss_are_never_saved(
    tmp_path, fake_data_dir, loop, monkeypatch):
  monkeypatch.setattr(model_lib, 'learning_rate_schedule',
                      lambda rate: _InfiniteFrom(9))  # The 10th update.
  model_dir = tmp_path / 'model'
  with pytest.raises(DivergedError) as raised:
    train.run(make_config(model_dir, loop=loop, train_steps=20,
                         checkpoint_steps=5, steps_per_execution=5),
              cpu_strategy(1), fake_data_dir)
  message = str(raised.value)
  assert re.match(r'the weights became non-finite \(conv1/kernel, .*\) by '
                  r'step 10: training stopped, the latest checkpoint, ckpt-5, '
                  'is the last good one, nothing was exported', message), message
  # Only the weights: the loss of step 10 was finite.
  assert 'loss' not in message, message
  assert _checkpoint_steps(model_dir) == [5]
  _assert_all_finite(model_dir / 'ckpt-5')
  assert not (model_dir / 'export').exists()


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_a_batch_holding_nan_stops_the_run(tmp_path, fake_data_dir, loop,
                                           monkeypatch):
  """NaN pixels: the first convolution's kernel gradient multiplies them, so
  the step's update makes that kernel NaN on any CPU (whether the loss is NaN
  depends on the kernels)."""
  model_dir = tmp_path / 'model'
  train.run(make_config(model_dir, loop=loop, train_steps=10,
                       enable_predict=False, eval_steps=0),
            cpu_strategy(1), fake_data_dir)
  monkeypatch.setattr(data, 'scale_image',
                      lambda image: tf.cast(image, tf.float32) * np.nan)
  with pytest.raises(DivergedError, match=r'^the weights became non-finite '
                     r'\(conv1/kernel.*\).* by step 15: training stopped, '
                     'the latest checkpoint, ckpt-10, is the last good one'):
    train.run(make_config(model_dir, loop=loop, train_steps=20),
              cpu_strategy(1), fake_data_dir)
  assert _checkpoint_steps(model_dir) == [10]
  assert len(os.listdir(model_dir / 'export')) == 1  # The first run's.


def test_the_loss_alone_stops_the_run():
  manager = types.SimpleNamespace(latest_checkpoint='/m/ckpt-20',
                                  non_finite_weights=lambda: [])
  divergence.check_execution(2.3, 25, manager)
  with pytest.raises(DivergedError, match=r'^the training loss became inf by '
                     r'step 25: training stopped, the latest checkpoint, '
                     'ckpt-20, is the last good one'):
    divergence.check_execution(float('inf'), 25, manager)


def test_a_checkpoint_with_non_finite_weights_is_skipped_on_restore(
    tmp_path, fake_data_dir, caplog):
  model_dir = tmp_path / 'model'
  common = dict(loop='custom', checkpoint_steps=5, enable_predict=False,
                eval_steps=0)
  train.run(make_config(model_dir, train_steps=10, **common), cpu_strategy(1),
            fake_data_dir)
  # What a diverged run saved before the kit guarded its saves.
  strategy = cpu_strategy(1)
  with strategy.scope():
    net = model_lib.build_model(checkpointed_random=True)
    optimizer = model_lib.make_optimizer(0.1)
    optimizer.build(net.trainable_variables)
    checkpoint = checkpoints.make_checkpoint(net, optimizer, strategy)
  checkpoint.restore(str(model_dir / 'ckpt-10')).assert_consumed()
  kernel = net.get_layer('dense').kernel
  kernel.assign(tf.fill(kernel.shape, np.nan))
  checkpoint.write(str(model_dir / 'ckpt-10'))
  with caplog.at_level('INFO', logger='absl'):
    result = train.run(make_config(model_dir, train_steps=15, **common),
                       cpu_strategy(1), fake_data_dir)
  assert re.search(r'Skipped \S+ckpt-10: its weights are not finite '
                   r'\(dense/kernel\); trying an older checkpoint',
                   caplog.text), caplog.text[-2000:]
  assert 'Restored ' + str(model_dir / 'ckpt-5') in caplog.text
  assert result['global_step'] == 15
  _assert_all_finite(model_dir / 'ckpt-15')


def test_export_refuses_non_finite_weights(tmp_path):
  strategy = cpu_strategy(1)
  with strategy.scope():
    net = model_lib.build_model()
  bias = net.get_layer('logits').bias
  bias.assign(tf.fill(bias.shape, np.inf))
  with pytest.raises(NonFiniteExportError, match=r'^the weights to export are '
                     r'not finite \(logits/bias\): nothing was exported'):
    train.export(net, str(tmp_path), strategy)
  assert not (tmp_path / 'export').exists()


@pytest.mark.parametrize('train_steps, per_execution, replicas, saved', [
    (23, 5, 2, [10, 20, 23]), (7, 50, 1, [7])])
def test_fit_trains_exactly_the_steps_asked(tmp_path, fake_data_dir,
                                            train_steps, per_execution,
                                            replicas, saved):
  """Keras 3 runs whole executions; the fit trainer must not."""
  config_ = make_config(tmp_path / 'model', train_steps=train_steps,
                         steps_per_execution=per_execution,
                         checkpoint_steps=max(10, per_execution),
                         enable_predict=False, eval_steps=3)
  result = train.run(config_, cpu_strategy(replicas), fake_data_dir)
  assert result['global_step'] == train_steps
  assert _checkpoint_steps(tmp_path / 'model') == saved
  assert result['eval']['accuracy'] > 0


def test_fit_blocks_add_up_to_the_steps_asked():
  assert fit_loop.executions(23, 5) == [(20, 5), (3, 3)]
  assert fit_loop.executions(20, 5) == [(20, 5)]
  assert fit_loop.executions(7, 50) == [(7, 7)]
  assert fit_loop.executions(0, 5) == []


def test_custom_loop_runs_several_steps_per_call(tmp_path, fake_data_dir):
  strategy = cpu_strategy(2)
  with strategy.scope():
    net = model_lib.build_model()
    optimizer = model_lib.make_optimizer(0.1)
  trainer = custom_loop.Trainer(net, optimizer, strategy, 64)
  calls = []
  steps_fn = trainer.train_steps

  def counted(iterator, steps):
    calls.append(int(steps))
    return steps_fn(iterator, steps)

  trainer.train_steps = counted
  checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer)
  manager = checkpoints.make_manager(checkpoint, str(tmp_path), strategy)
  dataset = data.distribute(strategy, fake_data_dir.data_dir, 'train', 64, True)
  custom_loop.train(trainer, dataset, 4, cadence.Cadence(manager, 10, 23),
                    tf.summary.create_noop_writer())
  # Calls stop at each log boundary (10, 20) and at the end (23).
  assert calls == [4, 4, 2, 4, 4, 2, 3]
  assert int(optimizer.iterations.numpy()) == 23
  assert _checkpoint_steps(tmp_path) == [10, 20, 23]


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_restart_resumes_from_the_last_checkpoint(tmp_path, fake_data_dir,
                                                  loop):
  model_dir = tmp_path / 'model'
  first = train.run(make_config(model_dir, loop=loop, train_steps=10,
                               enable_predict=False, eval_steps=0),
                    cpu_strategy(1), fake_data_dir)
  assert first['global_step'] == 10
  second = train.run(make_config(model_dir, loop=loop, train_steps=20,
                                enable_predict=False, eval_steps=0),
                     cpu_strategy(1), fake_data_dir)
  assert second['global_step'] == 20
  assert _checkpoint_steps(model_dir) == [10, 20]
  # A run that is already done trains no further.
  third = train.run(make_config(model_dir, loop=loop, train_steps=20,
                               enable_predict=False, eval_steps=0),
                    cpu_strategy(1), fake_data_dir)
  assert third['global_step'] == 20
  assert third['fingerprint'] == second['fingerprint']


def test_resume_restores_weights_and_step_exactly(tmp_path, fake_data_dir):
  """Checkpoints written by one trainer restore in the other."""
  model_dir = tmp_path / 'model'
  done = train.run(make_config(model_dir, loop='fit', train_steps=10,
                              enable_predict=False, eval_steps=0),
                   cpu_strategy(1), fake_data_dir)
  again = train.run(make_config(model_dir, loop='custom', train_steps=10,
                               enable_predict=False, eval_steps=0),
                    cpu_strategy(2), fake_data_dir)
  assert again['global_step'] == 10
  assert again['fingerprint'] == done['fingerprint']


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_jit_compile_refuses_replicas_on_cpus(tmp_path, fake_data_dir, loop):
  # Measured: the step compiled for CPU:0 cannot reach replica 1's variables.
  with pytest.raises(KitError, match=r'^--jit_compile cannot compile a step of '
                     r'2 replicas on CPUs .*use one replica'):
    train.run(make_config(tmp_path / 'model', loop=loop, jit_compile=True),
              cpu_strategy(2), fake_data_dir)
  assert not os.path.exists(tmp_path / 'model')


def test_batch_not_divisible_by_replicas(tmp_path, fake_data_dir):
  with pytest.raises(KitError, match=r'--batch_size=64 is not divisible by the '
                     r'number of replicas=3'):
    train.run(make_config(tmp_path / 'model'), cpu_strategy(3), fake_data_dir)
  assert not os.path.exists(tmp_path / 'model')


def test_checkpoint_of_another_model_is_refused(tmp_path, fake_data_dir):
  other = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
  tf.train.Checkpoint(model=other).save(str(tmp_path / 'ckpt'))
  with pytest.raises(KitError, match=r'holds a checkpoint of another model'):
    train.run(make_config(tmp_path), cpu_strategy(1), fake_data_dir)


def test_estimator_checkpoint_is_refused_with_a_pointer_to_the_converter(
    tmp_path, fake_data_dir):
  with tf.Graph().as_default():
    tf.compat.v1.get_variable('conv1/kernel', [5, 5, 1, 32])
    tf.compat.v1.train.create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, str(tmp_path / 'model.ckpt'),
                                      global_step=100)
  with pytest.raises(KitError, match=r'holds a name-based \(Estimator or TF1\) '
                     r'checkpoint, model\.ckpt-100; convert it with '
                     r'migration-convert-checkpoint'):
    train.run(make_config(tmp_path), cpu_strategy(1), fake_data_dir)


def _truncate(path, keep=0.5):
  size = os.path.getsize(path)
  with open(path, 'r+b') as f:
    f.truncate(int(size * keep))


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_an_unreadable_latest_checkpoint_falls_back_to_an_older_one(
    tmp_path, fake_data_dir, loop, caplog):
  model_dir = tmp_path / 'model'
  train.run(make_config(model_dir, loop=loop, train_steps=15,
                       checkpoint_steps=5, enable_predict=False, eval_steps=0),
            cpu_strategy(1), fake_data_dir)
  assert _checkpoint_steps(model_dir) == [5, 10, 15]
  _truncate(model_dir / 'ckpt-15.data-00000-of-00001')
  # What a kill during a save leaves, and names that only look like it.
  (model_dir / 'ckpt-17_temp').mkdir()
  (model_dir / 'ckpt-17_temp' / 'part-00000-of-00001.data-00000-of-00001'
   ).write_bytes(b'x')
  (model_dir / 'ckpt-17_temp_mine').mkdir()
  # The kit's name, the user's content: TensorFlow never writes a .csv there.
  (model_dir / 'ckpt-18_temp').mkdir()
  (model_dir / 'ckpt-18_temp' / 'results.csv').write_text('mine')
  (model_dir / 'notes_temp').write_text('mine')
  with caplog.at_level('INFO', logger='absl'):
    result = train.run(make_config(model_dir, loop=loop, train_steps=20,
                                  checkpoint_steps=5, enable_predict=False,
                                  eval_steps=0),
                       cpu_strategy(1), fake_data_dir)
  assert result['global_step'] == 20
  assert re.search(r'Skipped \S+ckpt-15: it cannot be read \(\w+Error',
                   caplog.text), caplog.text[-2000:]
  assert 'Restored ' + str(model_dir / 'ckpt-10') in caplog.text
  assert not (model_dir / 'ckpt-17_temp').exists()
  assert (model_dir / 'ckpt-17_temp_mine').exists()
  assert (model_dir / 'ckpt-18_temp' / 'results.csv').exists()
  assert (model_dir / 'notes_temp').exists()


def _damage_state_file(model_dir, damage):
  """What a copy without its state file, a garbage one, or one naming a
  deleted checkpoint leaves; returns the newest checkpoint step left."""
  state = model_dir / 'checkpoint'
  if damage == 'missing':
    state.unlink()
  elif damage == 'garbage':
    state.write_bytes(b'\xff\xfe not a state {{{')
  else:  # The newest deleted, the state file still naming it.
    newest = max(int(p.name.split('-')[1].split('.')[0])
                 for p in model_dir.glob('*.index'))
    for path in model_dir.glob(f'*-{newest}.*'):
      path.unlink()
  return max(int(p.name.split('-')[1].split('.')[0])
             for p in model_dir.glob('*.index'))


@pytest.mark.parametrize('damage', ['missing', 'garbage', 'stale'])
def test_a_lost_state_file_resumes_from_the_newest_checkpoint_files(
    tmp_path, fake_data_dir, damage, caplog):
  model_dir = tmp_path / 'model'
  config = dict(loop='custom', checkpoint_steps=5, enable_predict=False,
                eval_steps=0)
  train.run(make_config(model_dir, train_steps=15, **config), cpu_strategy(1),
            fake_data_dir)
  newest = _damage_state_file(model_dir, damage)
  with caplog.at_level('INFO', logger='absl'):
    result = train.run(make_config(model_dir, train_steps=20, **config),
                       cpu_strategy(1), fake_data_dir)
  assert f'resuming at step {newest} of 20' in caplog.text
  problem = {'missing': 'is missing', 'garbage': 'cannot be read',
             'stale': 'names ckpt-15, which is gone'}[damage]
  assert re.search(rf'The checkpoint state file in \S+ {problem}: resuming '
                   rf'from ckpt-{newest}, the newest checkpoint found among '
                   'the files', caplog.text), caplog.text[-2000:]
  assert result['global_step'] == 20
  assert tf.train.latest_checkpoint(str(model_dir)).endswith('ckpt-20')
  assert (model_dir / f'ckpt-{newest}.index').exists()


def test_no_readable_checkpoint_is_one_line(tmp_path, fake_data_dir):
  model_dir = tmp_path / 'model'
  train.run(make_config(model_dir, loop='custom', train_steps=10,
                       checkpoint_steps=5, enable_predict=False, eval_steps=0),
            cpu_strategy(1), fake_data_dir)
  for step in (5, 10):
    _truncate(model_dir / f'ckpt-{step}.data-00000-of-00001', keep=0)
  with pytest.raises(KitError, match=r'no checkpoint in --model_dir \S+ can '
                     r'be used \(ckpt-10, ckpt-5\); move them away'):
    train.run(make_config(model_dir, loop='custom', train_steps=20,
                         enable_predict=False, eval_steps=0),
              cpu_strategy(1), fake_data_dir)
