"""Training with tf.distribute: train, evaluate, predict, export.

``run(config, strategy=None, data=None)`` is the whole job, as
estimator_mnist's ``train.run`` is for TPUEstimator; main.py builds the
config from the flags. Tests inject a strategy and data instead of patching
anything.
"""
import contextlib
import hashlib
import os
import signal
import tempfile
import time

from absl import logging
import numpy as np
import tensorflow as tf

from kit_core import atomic
from kit_core import cpu
from kit_core import errors
from kit_core import exits
from kit_core import keras_compat
from kit_core import paths
from kit_core import sharding
from kit_core.errors import KitError
from migrate import cadence as cadence_lib
from migrate import checkpoints
from migrate import config as config_lib
from migrate import custom_loop
from migrate import data as data_lib
from migrate import divergence
from migrate import fit_loop
from migrate import model as model_lib
from migrate import preemption
from migrate import strategy as strategy_lib
from mnist_common import batching
from mnist_common import prepare
from mnist_common import report
from mnist_common import resources
from mnist_common import tfrecords

LOOPS = ('fit', 'custom')


class ServingModule(tf.Module):
  """The exported signature: raw uint8 pixels in, as estimator_mnist's export."""

  def __init__(self, model: tf.keras.Model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[
      tf.TensorSpec([None, *model_lib.IMAGE_SHAPE], tf.uint8, name='image')])
  def serve(self, image):
    logits = self.model(data_lib.scale_image(image), training=False)
    return {'class_ids': tf.argmax(logits, axis=1),
            'probabilities': tf.nn.softmax(logits)}


def export(model: tf.keras.Model, model_dir: str,
           strategy: tf.distribute.Strategy) -> str | None:
  """Writes a SavedModel to model_dir/export/<timestamp>; returns its path.

  Written under a temporary name and renamed, so a reader never sees half of
  it. With several workers all save (it may run collectives); only the
  chief's copy is kept.

  Raises:
    NonFiniteExportError: a weight is not finite; nothing is written.
  """
  divergence.check_export(model)
  module = ServingModule(model)
  chief = strategy_lib.is_chief(strategy)
  base = os.path.join(model_dir, 'export')
  os.makedirs(base, exist_ok=True)

  def save(folder: str) -> None:
    tf.saved_model.save(module, folder, signatures={'serving_default':
                                                    module.serve})

  if not chief:
    with tempfile.TemporaryDirectory() as folder:
      save(folder)  # Every worker takes part in the save; the chief's stays.
    return None
  stamp = int(time.time())
  while os.path.exists(os.path.join(base, str(stamp))):
    stamp += 1  # Two exports within a second.
  final = os.path.join(base, str(stamp))
  with atomic.temporary_path(final, directory=True) as folder:
    save(folder)
  return final


def weights_fingerprint(model: tf.keras.Model) -> str:
  """A short hash of every weight: equal on all workers of a synchronous run."""
  digest = hashlib.sha256()
  for weight in model.get_weights():
    digest.update(np.ascontiguousarray(weight).tobytes())
  return digest.hexdigest()[:16]


def predict(model: tf.keras.Model, info: prepare.DatasetInfo,
            count: int) -> list:
  """Predicts the first `count` test images and prints them."""
  test = tf.data.TFRecordDataset(info.path('test')).take(count).map(
      tfrecords.parse_example).batch(count)
  images, labels = next(iter(test))
  probabilities = tf.nn.softmax(
      model(data_lib.scale_image(images), training=False)).numpy()
  return [report.print_prediction(int(probs.argmax()), float(probs.max()),
                                  int(label))
          for probs, label in zip(probabilities, labels.numpy())]


def _check_memory(strategy: tf.distribute.Strategy, per_replica: int,
                  precision: str) -> None:
  """resources.check_memory for this machine's replicas (a TPU's memory is
  its own: not checked here)."""
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return
  local_replicas = len(getattr(strategy.extended, 'worker_devices', [None]))
  resources.check_memory(model_lib.forward_bytes(precision),
                         per_replica * local_replicas)


def _warn_if_bfloat16_is_emulated(strategy: tf.distribute.Strategy,
                                  precision: str) -> None:
  """mixed_bfloat16 on a CPU without bfloat16 arithmetic: TensorFlow runs
  its bfloat16 convolution gradients on generic kernels there, several times
  slower than float32 (measured: benchmarks/README.md)."""
  if (precision == 'mixed_bfloat16' and
      not isinstance(strategy, tf.distribute.TPUStrategy) and
      not tf.config.list_physical_devices('GPU') and
      cpu.has_bfloat16_arithmetic() is False):
    logging.warning(
        '--precision=mixed_bfloat16 on a CPU without bfloat16 arithmetic '
        '(AVX512_BF16 or AMX): TensorFlow emulates it, which can train '
        'several times slower than float32 (benchmarks/README.md); float32 '
        'is the faster choice on this CPU')


def _save_at_step(manager: tf.train.CheckpointManager, optimizer,
                  strategy: tf.distribute.Strategy) -> tuple[int, str | None]:
  """Saves at the optimizer's step; returns it and the chief's checkpoint."""
  step = int(optimizer.iterations.numpy())
  checkpoints.save_final(manager, step)
  return step, (manager.latest_checkpoint if strategy_lib.is_chief(strategy)
                else None)


def _summary_writer(model_dir: str, strategy):
  if strategy_lib.is_chief(strategy):
    return tf.summary.create_file_writer(os.path.join(model_dir, 'train'))
  return tf.summary.create_noop_writer()


def _check_loop(config: config_lib.Config,
                strategy: tf.distribute.Strategy) -> None:
  """Raises KitError when --loop=fit cannot train as configured."""
  if config.loop != 'fit':
    return
  reason = keras_compat.fit_unsupported_reason(strategy)
  if reason:
    raise KitError(f'--loop=fit cannot train here: {reason}; use '
                   '--loop=custom, which trains the same model')
  if config.checkpoint_steps % config.steps_per_execution:
    # Keras returns to Python, where a checkpoint can be saved, only
    # between executions.
    raise KitError(
        f'--checkpoint_steps={config.checkpoint_steps} is not a '
        f'multiple of --steps_per_execution={config.steps_per_execution}'
        ': --loop=fit can save only between executions; use a multiple, a '
        'smaller --steps_per_execution, or --loop=custom')


def _check_jit_compile(config: config_lib.Config,
                       strategy: tf.distribute.Strategy) -> None:
  """Raises KitError when --jit_compile cannot compile the step: TensorFlow's
  XLA compiles a step for one CPU only. Measured on TF 2.15 and 2.21: with
  replicas on logical CPUs the step compiled for CPU:0 cannot reach replica
  1's variables; with workers, XLA has no collectives on CPUs."""
  replicas = strategy.num_replicas_in_sync
  if not config.jit_compile or replicas == 1:
    return
  if any(tf.DeviceSpec.from_string(device).device_type != 'CPU'
         for device in strategy.extended.worker_devices):
    return  # A TPU's (XLA's own path) or GPUs' (not measured here).
  raise KitError(
      f'--jit_compile cannot compile a step of {replicas} replicas on CPUs '
      '(TensorFlow\'s XLA compiles for one CPU device and has no cross-replica '
      'sum there); use one replica (--num_cpu_devices=1, one worker) to run '
      'the step through XLA as a TPU core does, or drop --jit_compile')


def _build_and_restore(config: config_lib.Config,
                       strategy: tf.distribute.Strategy, model_dir: str):
  """The model and optimizer, restored from model_dir's latest usable
  checkpoint if there is one, and the manager that saves them."""
  tf.keras.utils.set_random_seed(config.seed)
  with strategy.scope():
    model = model_lib.build_model(precision=config.precision,
                                  checkpointed_random=True)
    optimizer = model_lib.make_optimizer(config.learning_rate)
    # Creates the slot variables now, so that a restore can check that the
    # checkpoint matches the model and optimizer in full.
    optimizer.build(model.trainable_variables)
    checkpoint = checkpoints.make_checkpoint(model, optimizer, strategy)
  restored = checkpoints.restore(checkpoint, model_dir,
                                 strategy_lib.is_chief(strategy))
  manager = checkpoints.make_manager(checkpoint, model_dir, strategy)
  logging.info('model_dir=%s, loop=%s, precision=%s%s, %s at step %d of %d',
               model_dir, config.loop, config.precision,
               ', steps compiled with XLA' if config.jit_compile else '',
               'resuming' if restored else 'starting',
               int(optimizer.iterations.numpy()), config.train_steps)
  return model, optimizer, manager


def _train(config: config_lib.Config, strategy: tf.distribute.Strategy,
           info: prepare.DatasetInfo, eval_batch: int, eval_steps: int,
           model, optimizer, manager, model_dir: str):
  """Trains to config.train_steps with the configured loop, SIGTERM
  watched; returns a function that evaluates the trained model."""
  start = int(optimizer.iterations.numpy())
  # The custom loop resumes exactly: its input pipeline starts where the
  # checkpoint's step left it. fit starts a new pass (README: "Resuming").
  train_data = data_lib.distribute(
      strategy, info.data_dir, 'train', config.batch_size, True, config.seed,
      start_step=start if config.loop == 'custom' else 0)
  eval_data = data_lib.distribute(strategy, info.data_dir, 'test',
                                  eval_batch, False)
  before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
  sigterm = preemption.watch(
      strategy, lambda: _save_at_step(manager, optimizer, strategy),
      errors.run_again(config.model_dir, model_dir))
  cadence = cadence_lib.Cadence(manager, config.checkpoint_steps,
                                config.train_steps, sigterm, start)
  try:
    if config.loop == 'fit':
      fit_loop.train(model, optimizer, train_data,
                     config.steps_per_execution, cadence, model_dir,
                     verbose=1 if strategy_lib.is_chief(strategy) else 0,
                     jit_compile=config.jit_compile)
      return lambda: fit_loop.evaluate(model, optimizer, eval_data,
                                       eval_steps, config.steps_per_execution,
                                       config.jit_compile)
    trainer = custom_loop.Trainer(model, optimizer, strategy,
                                  config.batch_size, config.jit_compile)
    custom_loop.train(trainer, train_data, config.steps_per_execution,
                      cadence, _summary_writer(model_dir, strategy))
    return lambda: custom_loop.evaluate(trainer, eval_data, eval_steps)
  finally:
    # Training is saved: from here the signals do what they did before.
    exits.restore_handlers(before)


def run(config: config_lib.Config,
        strategy: tf.distribute.Strategy | None = None,
        data: prepare.DatasetInfo | None = None) -> dict:
  """Trains, evaluates, predicts and exports; returns what it measured.

  Args:
    config: the run's options (main.py builds them from the flags).
    strategy: a strategy to use instead of config.strategy's.
    data: prepared data to use instead of config.data_dir/data_source.

  Returns:
    {'model_dir', 'global_step', 'eval' (or None), 'predictions',
     'export_dir', 'fingerprint', 'replicas'}.

  Raises:
    KitError: bad input; nothing has been written to --model_dir.
  """
  strategy = strategy or strategy_lib.make_strategy(
      config.strategy, config.tpu, config.tpu_zone, config.gcp_project,
      config.worker_wait_seconds)
  _check_loop(config, strategy)
  _check_jit_compile(config, strategy)
  replicas = strategy.num_replicas_in_sync
  per_replica = sharding.per_replica_batch(config.batch_size, replicas,
                                           'the number of replicas')
  logging.info('Strategy: %s', strategy_lib.describe(
      strategy, config.batch_size, per_replica))
  info = data or prepare.prepare(config.data_dir, config.data_source,
                                 config.data_url, config.seed)
  evaluation = batching.plan(
      config.batch_size, config.eval_steps, info.train_examples,
      info.test_examples, replicas,
      config.num_predictions if config.enable_predict else 0)
  if not config.skip_resource_checks:
    _check_memory(strategy, per_replica, config.precision)
  _warn_if_bfloat16_is_emulated(strategy, config.precision)
  model_dir = paths.ensure_writable_dir(config.model_dir, 'migrate_')
  # Only the chief writes into model_dir; the other workers share the flag.
  with (paths.one_trainer(model_dir) if strategy_lib.is_chief(strategy)
        else contextlib.nullcontext()):
    return _train_evaluate_export(config, strategy, info, evaluation,
                                  replicas, model_dir)


def _train_evaluate_export(config: config_lib.Config,
                           strategy: tf.distribute.Strategy,
                           info: prepare.DatasetInfo,
                           evaluation: batching.Evaluation, replicas: int,
                           model_dir: str) -> dict:
  """run()'s work once its input is checked and model_dir is held."""
  eval_batch, eval_steps = evaluation.batch, evaluation.steps
  model, optimizer, manager = _build_and_restore(config, strategy, model_dir)
  evaluate = _train(config, strategy, info, eval_batch, eval_steps, model,
                    optimizer, manager, model_dir)

  result = {'model_dir': model_dir,
            'replicas': replicas,
            'global_step': int(optimizer.iterations.numpy()), 'eval': None,
            'predictions': [], 'fingerprint': weights_fingerprint(model)}
  logging.info('Weights fingerprint at step %d: %s', result['global_step'],
               result['fingerprint'])
  saved = (manager.latest_checkpoint if strategy_lib.is_chief(strategy) else
           'the chief\'s model_dir')
  # A signal from here on loses no training: the export is what it stops.
  again = errors.run_again(config.model_dir, model_dir)
  with exits.interruptible(f'training is saved in {saved}, nothing was '
                           f'exported; {again} to evaluate and export'):
    if eval_steps:
      metrics = evaluate()
      result['eval'] = {k: float(v) for k, v in metrics.items()}
      report.print_eval(metrics['accuracy'], eval_steps * eval_batch,
                        metrics['loss'], result['global_step'])
    if config.enable_predict:
      result['predictions'] = predict(model, info, config.num_predictions)
    result['export_dir'] = export(model, model_dir, strategy)
  if result['export_dir']:
    print(f'SavedModel: {result["export_dir"]}')
  return result
