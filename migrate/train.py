"""Training with tf.distribute: train, evaluate, predict, export.

``run(flags_obj, strategy_override=None, data_override=None)`` is the whole
job, as estimator_mnist's ``train.run`` is for TPUEstimator. Tests inject a
strategy and data instead of patching anything.
"""
import hashlib
import os
import shutil
import signal
import tempfile
import time

from absl import logging
import numpy as np
import tensorflow as tf

from migrate import checkpoints
from migrate import custom_loop
from migrate import data
from migrate import divergence
from migrate import fit_loop
from migrate import model as model_lib
from migrate import preemption
from migrate import strategy as strategy_lib
from mnist_common import batching
from mnist_common import cpu
from mnist_common import keras_compat
from mnist_common import paths
from mnist_common import prepare
from mnist_common import report
from mnist_common import resources
from mnist_common import tfrecords
from mnist_common.errors import KitError

LOOPS = ('fit', 'custom')


class ServingModule(tf.Module):
  """The exported signature: raw uint8 pixels in, as estimator_mnist's export."""

  def __init__(self, model: tf.keras.Model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[
      tf.TensorSpec([None, *model_lib.IMAGE_SHAPE], tf.uint8, name='image')])
  def serve(self, image):
    logits = self.model(data.scale_image(image), training=False)
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
  tmp = tempfile.mkdtemp(dir=base if chief else None, prefix='.tmp-')
  try:
    tf.saved_model.save(module, tmp, signatures={'serving_default':
                                                 module.serve})
    if not chief:
      return None
    stamp = int(time.time())
    while os.path.exists(os.path.join(base, str(stamp))):
      stamp += 1  # Two exports within a second.
    final = os.path.join(base, str(stamp))
    os.replace(tmp, final)
    return final
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


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
      model(data.scale_image(images), training=False)).numpy()
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


def run(flags_obj, strategy_override: tf.distribute.Strategy | None = None,
        data_override: prepare.DatasetInfo | None = None) -> dict:
  """Trains, evaluates, predicts and exports; returns what it measured.

  Args:
    flags_obj: the absl FLAGS (or any object with the same attributes).
    strategy_override: a strategy to use instead of --strategy.
    data_override: prepared data to use instead of --data_dir/--data_source.

  Returns:
    {'model_dir', 'global_step', 'eval' (or None), 'predictions',
     'export_dir', 'fingerprint', 'replicas'}.

  Raises:
    KitError: bad input; nothing has been written to --model_dir.
  """
  strategy = strategy_override or strategy_lib.make_strategy(
      flags_obj.strategy, flags_obj.tpu, flags_obj.tpu_zone,
      flags_obj.gcp_project,
      flags_obj.worker_wait_seconds)
  if flags_obj.loop == 'fit':
    reason = keras_compat.fit_unsupported_reason(strategy)
    if reason:
      raise KitError(f'--loop=fit cannot train here: {reason}; use '
                     '--loop=custom, which trains the same model')
    if flags_obj.checkpoint_steps % flags_obj.steps_per_execution:
      # Keras returns to Python, where a checkpoint can be saved, only
      # between executions.
      raise KitError(
          f'--checkpoint_steps={flags_obj.checkpoint_steps} is not a '
          f'multiple of --steps_per_execution={flags_obj.steps_per_execution}'
          ': --loop=fit can save only between executions; use a multiple, a '
          'smaller --steps_per_execution, or --loop=custom')
  replicas = strategy.num_replicas_in_sync
  per_replica = batching.per_replica_batch(flags_obj.batch_size, replicas,
                                           'the number of replicas')
  logging.info('Strategy: %s', strategy_lib.describe(
      strategy, flags_obj.batch_size, per_replica))
  info = data_override or prepare.prepare(
      flags_obj.data_dir, flags_obj.data_source, flags_obj.data_url,
      flags_obj.seed)
  evaluation = batching.plan(flags_obj.batch_size, flags_obj.eval_steps,
                             info.train_examples, info.test_examples, replicas)
  eval_batch, eval_steps = evaluation.batch, evaluation.steps
  if not flags_obj.skip_resource_checks:
    _check_memory(strategy, per_replica, flags_obj.precision)
  _warn_if_bfloat16_is_emulated(strategy, flags_obj.precision)
  model_dir = paths.ensure_writable_dir(flags_obj.model_dir, 'migrate_')

  tf.keras.utils.set_random_seed(flags_obj.seed)
  with strategy.scope():
    model = model_lib.build_model(precision=flags_obj.precision,
                                  checkpointed_random=True)
    optimizer = model_lib.make_optimizer(flags_obj.learning_rate)
    # Creates the slot variables now, so that a restore can check that the
    # checkpoint matches the model and optimizer in full.
    optimizer.build(model.trainable_variables)
    checkpoint = checkpoints.make_checkpoint(model, optimizer, strategy)
  restored = checkpoints.restore(checkpoint, model_dir)
  manager = checkpoints.make_manager(checkpoint, model_dir, strategy)
  start = int(optimizer.iterations.numpy())
  logging.info('model_dir=%s, loop=%s, precision=%s, %s at step %d of %d',
               model_dir, flags_obj.loop, flags_obj.precision,
               'resuming' if restored else 'starting', start,
               flags_obj.train_steps)

  # The custom loop resumes exactly: its input pipeline starts where the
  # checkpoint's step left it. fit starts a new pass (README: "Resuming").
  train_data = data.distribute(
      strategy, info.data_dir, 'train', flags_obj.batch_size, True,
      flags_obj.seed, start_step=start if flags_obj.loop == 'custom' else 0)
  eval_data = data.distribute(strategy, info.data_dir, 'test', eval_batch,
                              False)

  before = signal.getsignal(signal.SIGTERM)
  sigterm = preemption.watch(
      strategy, lambda: _save_at_step(manager, optimizer, strategy))
  try:
    if flags_obj.loop == 'fit':
      fit_loop.train(model, optimizer, train_data, flags_obj.train_steps,
                     flags_obj.steps_per_execution, manager, model_dir,
                     flags_obj.checkpoint_steps, sigterm,
                     verbose=1 if strategy_lib.is_chief(strategy) else 0)
      evaluate = lambda: fit_loop.evaluate(model, optimizer, eval_data,
                                           eval_steps,
                                           flags_obj.steps_per_execution)
    else:
      trainer = custom_loop.Trainer(model, optimizer, strategy,
                                    flags_obj.batch_size)
      custom_loop.train(trainer, train_data, flags_obj.train_steps,
                        flags_obj.steps_per_execution, manager,
                        _summary_writer(model_dir, strategy),
                        flags_obj.checkpoint_steps, sigterm)
      evaluate = lambda: custom_loop.evaluate(trainer, eval_data, eval_steps)
  finally:
    # Training is saved: from here SIGTERM does what it did before.
    signal.signal(signal.SIGTERM, before)

  result = {'model_dir': model_dir,
            'replicas': replicas,
            'global_step': int(optimizer.iterations.numpy()), 'eval': None,
            'predictions': [], 'fingerprint': weights_fingerprint(model)}
  logging.info('Weights fingerprint at step %d: %s', result['global_step'],
               result['fingerprint'])
  if eval_steps:
    metrics = evaluate()
    result['eval'] = {k: float(v) for k, v in metrics.items()}
    report.print_eval(metrics['accuracy'], eval_steps * eval_batch,
                      metrics['loss'], result['global_step'])
  if flags_obj.enable_predict:
    result['predictions'] = predict(model, info, flags_obj.num_predictions)
  result['export_dir'] = export(model, model_dir, strategy)
  if result['export_dir']:
    print(f'SavedModel: {result["export_dir"]}')
  return result
