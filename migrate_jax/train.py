"""Training on JAX: train, evaluate, predict, export.

``run(config, data=None)`` is the whole job, as migrate's ``train.run`` is
on tf.distribute; main.py builds the config from the flags (and fixes the
devices before JAX starts).
"""
import hashlib

from absl import logging
import jax
import keras
import numpy as np

from kit_core import errors
from kit_core import exits
from kit_core import paths
from kit_core import progress as progress_lib
from kit_core import sharding
from kit_core.errors import KitError
from migrate_jax import checkpoints
from migrate_jax import config as config_lib
from migrate_jax import data as data_lib
from migrate_jax import divergence
from migrate_jax import export as export_lib
from migrate_jax import model as model_lib
from migrate_jax import preemption
from mnist_common import batching
from mnist_common import prepare
from mnist_common import report
from mnist_common import resources


def describe(devices: list, global_batch: int, per_replica: int) -> str:
  kinds = sorted({d.platform.upper() for d in devices})
  return (f'DataParallel over {len(devices)} {"/".join(kinds)} device(s): '
          f'global batch {global_batch}, {per_replica} per replica')


def weights_fingerprint(model: keras.Model) -> str:
  """A short hash of every weight: equal for two runs that trained alike."""
  digest = hashlib.sha256()
  for weight in model.get_weights():
    digest.update(np.ascontiguousarray(weight).tobytes())
  return digest.hexdigest()[:16]


def forward_bytes(model: keras.Model) -> int:
  """resources.forward_bytes for a Keras model: its layers' outputs for one
  example, at 4 bytes a value."""
  total = 0
  for layer in model.layers:
    shape = layer.output.shape[1:]
    total += 4 * int(np.prod([d for d in shape if d is not None]))
  return total


def compile_model(model: keras.Model, optimizer, steps_per_execution: int
                  ) -> None:
  """The loss averaged over the global batch; XLA compiles the step (JAX's
  only path), several steps per call as iterations_per_loop did."""
  model.compile(optimizer=optimizer, loss=model_lib.per_example_loss,
                metrics=[keras.metrics.SparseCategoricalAccuracy('accuracy')],
                steps_per_execution=steps_per_execution, jit_compile=True)


def executions(steps: int, steps_per_execution: int) -> list[tuple[int, int]]:
  """(steps, steps_per_execution) blocks that add up to exactly `steps`:
  Keras runs whole executions, so a remainder gets a block of its own."""
  whole = steps // steps_per_execution * steps_per_execution
  blocks = [(whole, steps_per_execution)] if whole else []
  if steps > whole:
    blocks.append((steps - whole, steps - whole))
  return blocks


class Cadence(keras.callbacks.Callback):
  """After each execution of steps: the divergence guard, a checkpoint and a
  log line at every multiple of checkpoint_steps, a signal's save; the last
  save at the end."""

  def __init__(self, config: config_lib.Config, model_dir: str, optimizer,
               watch: preemption.Watch, start: int,
               progress: progress_lib.Progress):
    super().__init__()
    self._config, self._model_dir = config, model_dir
    self._optimizer, self._watch = optimizer, watch
    self._last_saved = start
    self._progress = progress
    progress.now(f'training from step {start} of {config.train_steps}')
    self.last_checkpoint = (checkpoints.find(model_dir) or [None])[-1]

  def _arrays(self) -> dict[str, np.ndarray]:
    # self.model brings JAX's training state back into the variables.
    return checkpoints.state(self.model, self._optimizer)

  def save(self) -> tuple[int, str]:
    arrays = self._arrays()
    step = checkpoints.step_of(self._optimizer)
    if self._last_saved == step and self.last_checkpoint:
      return step, self.last_checkpoint
    divergence.check(arrays, None, step, self.last_checkpoint)
    self.last_checkpoint = checkpoints.save(
        self._model_dir, step, arrays, self._config.keep_checkpoints)
    self._last_saved = step
    return step, self.last_checkpoint

  def on_train_batch_end(self, batch, logs=None):
    arrays = self._arrays()
    step = checkpoints.step_of(self._optimizer)
    divergence.check(arrays, float(logs['loss']), step, self.last_checkpoint)
    every = self._config.checkpoint_steps
    if (step // every > self._last_saved // every or
        step >= self._config.train_steps):
      self.save()
      self._progress.line(
          f'step {step}/{self._config.train_steps}: loss {logs["loss"]:.4f}, '
          f'accuracy {logs["accuracy"]:.4f} (checkpoint saved)')
    self._progress.now(f'training: step {step} of {self._config.train_steps}'
                       ' done')
    self._watch.save_if_received(self.save)

  def on_train_end(self, logs=None):
    self.save()


def _check_config(config: config_lib.Config) -> None:
  if config.tpu or config.tpu_zone or config.gcp_project:
    raise KitError('--tpu, --tpu_zone and --gcp_project name a TPU node '
                   'across the network, which JAX does not reach; run on the '
                   'TPU VM itself with --use_tpu, where JAX finds its cores')
  if config.use_tpu and jax.default_backend() != 'tpu':
    raise KitError(f'--use_tpu: JAX finds no TPU here (its devices are '
                   f'{jax.default_backend().upper()}); run on a TPU VM with '
                   'jax[tpu] installed, or drop --use_tpu')
  if config.checkpoint_steps % config.steps_per_execution:
    raise KitError(
        f'--checkpoint_steps={config.checkpoint_steps} is not a multiple of '
        f'--steps_per_execution={config.steps_per_execution}: a checkpoint '
        'can be saved only between executions; use a multiple, or a smaller '
        '--steps_per_execution')


def run(config: config_lib.Config,
        data: prepare.DatasetInfo | None = None) -> dict:
  """Trains, evaluates, predicts and exports; returns what it measured.

  Args:
    config: the run's options (main.py builds them from the flags).
    data: prepared data to use instead of config.data_dir/data_source.

  Returns:
    {'model_dir', 'global_step', 'eval' (or None), 'predictions',
     'export_dir', 'fingerprint', 'replicas'}.

  Raises:
    KitError: bad input; nothing has been written to --model_dir.
  """
  _check_config(config)
  devices = jax.devices()
  per_replica = sharding.per_replica_batch(config.batch_size, len(devices),
                                           'the number of devices')
  logging.info('Distribution: %s', describe(devices, config.batch_size,
                                            per_replica))
  info = data or prepare.prepare(config.data_dir, config.data_source,
                                 config.data_url, config.seed)
  evaluation = batching.plan(
      config.batch_size, config.eval_steps, info.train_examples,
      info.test_examples, len(devices),
      config.num_predictions if config.enable_predict else 0)
  keras.distribution.set_distribution(
      keras.distribution.DataParallel(devices=devices))
  model_dir = paths.ensure_writable_dir(config.model_dir, 'migrate_jax_')
  with paths.one_trainer(model_dir):
    return _train_evaluate_export(config, info, evaluation, len(devices),
                                  model_dir)


def _build_and_restore(config: config_lib.Config, model_dir: str):
  keras.utils.set_random_seed(config.seed)
  model = model_lib.build_model(precision=config.precision, seed=config.seed)
  if not config.skip_resource_checks and jax.default_backend() == 'cpu':
    resources.check_memory(forward_bytes(model), config.batch_size)
  optimizer = model_lib.make_optimizer(config.learning_rate)
  # Creates the optimizer's variables now, so that a restore can check that
  # the checkpoint holds them all.
  optimizer.build(model.trainable_variables)
  restored = checkpoints.restore(model_dir, model, optimizer)
  logging.info('model_dir=%s, precision=%s, %s at step %d of %d', model_dir,
               config.precision, 'resuming' if restored else 'starting',
               checkpoints.step_of(optimizer), config.train_steps)
  return model, optimizer


def _train(config: config_lib.Config, info: prepare.DatasetInfo, model,
           optimizer, model_dir: str) -> Cadence:
  start = checkpoints.step_of(optimizer)
  images, labels = data_lib.load(info, 'train')
  batches = data_lib.TrainingBatches(images, labels, config.batch_size,
                                     config.seed)
  watch = preemption.Watch(errors.run_again(config.model_dir, model_dir))
  # A line at least every 30 s: an execution of steps can take longer.
  progress = progress_lib.Progress(logging.info)
  cadence = Cadence(config, model_dir, optimizer, watch, start, progress)
  before = watch.start()
  try:
    with progress.heartbeat():
      step = start
      for steps, per_execution in executions(
          max(config.train_steps - start, 0), config.steps_per_execution):
        compile_model(model, optimizer, per_execution)
        model.fit(data_lib.Steps(batches, step, steps), epochs=1,
                  callbacks=[cadence], verbose=0, shuffle=False)
        step += steps
  finally:
    # Training is saved: from here the signals do what they did before.
    exits.restore_handlers(before)
  return cadence


def evaluate(model: keras.Model, optimizer, info: prepare.DatasetInfo,
             evaluation: batching.Evaluation,
             steps_per_execution: int) -> dict:
  """Metrics over exactly evaluation.steps batches, in one pass."""
  steps, batch = evaluation.steps, evaluation.batch
  per_execution = max(n for n in range(1, min(steps, steps_per_execution) + 1)
                      if steps % n == 0)
  compile_model(model, optimizer, per_execution)
  images, labels = data_lib.load(info, 'test')
  return model.evaluate(images[:steps * batch], labels[:steps * batch],
                        batch_size=batch, steps=steps, verbose=0,
                        return_dict=True)


def predict(model: keras.Model, info: prepare.DatasetInfo,
            count: int) -> list:
  """Predicts the first `count` test images and prints them."""
  images, labels = data_lib.load(info, 'test')
  logits = np.asarray(model.predict_on_batch(images[:count]))
  probabilities = np.asarray(keras.ops.softmax(logits))
  return [report.print_prediction(int(probs.argmax()), float(probs.max()),
                                  int(label))
          for probs, label in zip(probabilities, labels[:count])]


def _train_evaluate_export(config: config_lib.Config,
                           info: prepare.DatasetInfo,
                           evaluation: batching.Evaluation, replicas: int,
                           model_dir: str) -> dict:
  """run()'s work once its input is checked and model_dir is held."""
  model, optimizer = _build_and_restore(config, model_dir)
  cadence = _train(config, info, model, optimizer, model_dir)
  result = {'model_dir': model_dir, 'replicas': replicas,
            'global_step': checkpoints.step_of(optimizer), 'eval': None,
            'predictions': [], 'fingerprint': weights_fingerprint(model)}
  logging.info('Weights fingerprint at step %d: %s', result['global_step'],
               result['fingerprint'])
  again = errors.run_again(config.model_dir, model_dir)
  with exits.interruptible(f'training is saved in {cadence.last_checkpoint}, '
                           f'nothing was exported; {again} to evaluate and '
                           'export'):
    if evaluation.steps:
      metrics = evaluate(model, optimizer, info, evaluation,
                         config.steps_per_execution)
      result['eval'] = {k: float(v) for k, v in metrics.items()}
      report.print_eval(metrics['accuracy'],
                        evaluation.steps * evaluation.batch, metrics['loss'],
                        result['global_step'])
    if config.enable_predict:
      result['predictions'] = predict(model, info, config.num_predictions)
    result['export_dir'] = export_lib.export(model, model_dir)
  print(f'Exported program: {result["export_dir"]}')
  return result
