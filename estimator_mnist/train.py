"""Training with TPUEstimator: train, evaluate, predict, export.

``run(flags_obj)`` is the whole job. Tests call it with their own flags and
``data_override`` instead of patching anything.
"""
import os
import signal

from absl import logging
import tensorflow.compat.v1 as tf

from estimator_mnist import data
from estimator_mnist import divergence
from estimator_mnist import model
from mnist_common import batching
from mnist_common import checkpoint_files
from mnist_common import paths
from mnist_common import prepare
from mnist_common import report
from mnist_common import resources
from mnist_common import sources
from mnist_common import stale
from mnist_common import tfrecords
from mnist_common import tpu as tpu_lib
from mnist_common.errors import KitError
from mnist_common.errors import Preempted
from mnist_common.errors import describe_names


def serving_input_receiver_fn(
) -> tf.estimator.export.TensorServingInputReceiver:
  """Serving takes raw uint8 pixels and scales them as the input_fn does."""
  image = tf.placeholder(tf.uint8, [None, sources.IMAGE_SIZE,
                                    sources.IMAGE_SIZE, 1], name='image')
  # A Tensor receiver hands model_fn a Tensor, as the input_fns do, not a dict.
  return tf.estimator.export.TensorServingInputReceiver(
      data.scale_image(image), {'image': image})


def make_estimator(flags_obj, model_dir: str, data_dir: str, eval_batch: int,
                   cluster=None) -> tf.estimator.tpu.TPUEstimator:
  """A TPUEstimator configured from the flags."""
  run_config = tf.estimator.tpu.RunConfig(
      cluster=cluster,
      model_dir=model_dir,
      tf_random_seed=flags_obj.seed,
      save_checkpoints_steps=(flags_obj.save_checkpoints_steps or
                              max(flags_obj.iterations,
                                  model.LOG_EVERY_STEPS)),
      # TPUEstimator logs every ceil(this / iterations_per_loop) session runs,
      # and a session run is a whole loop on a TPU but one step off it.
      log_step_count_steps=(model.LOG_EVERY_STEPS if flags_obj.use_tpu else
                            model.LOG_EVERY_STEPS * flags_obj.iterations),
      tpu_config=tf.estimator.tpu.TPUConfig(
          iterations_per_loop=flags_obj.iterations,
          num_shards=flags_obj.num_shards))
  return tf.estimator.tpu.TPUEstimator(
      model_fn=model.model_fn,
      config=run_config,
      use_tpu=flags_obj.use_tpu,
      train_batch_size=flags_obj.batch_size,
      eval_batch_size=eval_batch,
      predict_batch_size=flags_obj.num_predictions,
      params={'data_dir': data_dir, 'learning_rate': flags_obj.learning_rate,
              'use_tpu': flags_obj.use_tpu, 'seed': flags_obj.seed,
              'num_predictions': flags_obj.num_predictions},
      # Off a TPU, the extra 'serve,tpu' MetaGraph would make a plain
      # tf.saved_model.load(path) fail (it then needs explicit tags).
      export_to_tpu=flags_obj.export_to_tpu)


class StopOnSigterm(tf.estimator.SessionRunHook):
  """Stops training after the session run in progress once SIGTERM came.

  The Estimator has no preemption handling of its own; stopping its loop
  cleanly lets its CheckpointSaverHook save the step reached, as it does at
  the end of every train() call.
  """

  def __init__(self):
    self.received = False

  def on_sigterm(self, signum, frame):  # pylint: disable=unused-argument
    self.received = True

  def after_run(self, run_context, run_values):
    if self.received:
      run_context.request_stop()


def _train(estimator, max_steps: int, use_tpu: bool) -> None:
  """estimator.train up to max_steps, guarded against divergence.

  Raises:
    DivergedError: the loss or the weights stopped being finite; nothing was
      saved from them.
    Preempted: SIGTERM came; the step reached was saved.
  """
  sigterm = StopOnSigterm()
  hook, listener = divergence.guards(estimator.model_dir, use_tpu)
  before = signal.signal(signal.SIGTERM, sigterm.on_sigterm)
  try:
    estimator.train(data.train_input_fn, max_steps=max_steps,
                    hooks=[hook, sigterm], saving_listeners=[listener])
  finally:
    signal.signal(signal.SIGTERM, before)
  if sigterm.received:
    latest = estimator.latest_checkpoint()
    raise Preempted(_step_of(latest), latest)


def _step_of(checkpoint: str | None) -> int:
  return int(tf.train.load_variable(checkpoint, 'global_step')) if (
      checkpoint) else 0


def _unusable(path: str) -> str | None:
  """Why the checkpoint at path cannot be trained or exported from, or None:
  it cannot be read in full, or its weights are not finite (written by a
  diverged run before the kit guarded its saves)."""
  try:
    tensors = checkpoint_files.read_all(path)
  except checkpoint_files.UnreadableCheckpoint as e:
    return f'it cannot be read ({e.reason})'
  names = divergence.non_finite_names(tensors)
  if names:
    return f'its weights are not finite ({describe_names(names)})'
  return None


def _check_written_by_an_estimator(model_dir: str, path: str) -> None:
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  if 'global_step' not in keys:
    written_by = ('tf.train.Checkpoint (migrate, Keras)'
                  if '_CHECKPOINTABLE_OBJECT_GRAPH' in keys else
                  'something else')
    raise KitError(f'--model_dir {model_dir} holds a checkpoint written by '
                   f'{written_by}, {os.path.basename(path)}, not by an '
                   'Estimator; use another --model_dir')


def fall_back_to_a_usable_checkpoint(model_dir: str) -> None:
  """Makes the newest usable checkpoint the one the Estimator restores: a
  truncated, corrupt or non-finite latest one is skipped with a line naming
  it (the Estimator keeps several).

  Raises:
    KitError: checkpoints are listed and none can be used.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None:
    return
  listed = list(state.all_model_checkpoint_paths) or [
      state.model_checkpoint_path]
  for kept in range(len(listed), 0, -1):
    path = listed[kept - 1]
    reason = _unusable(path)
    if reason is None:
      _check_written_by_an_estimator(model_dir, path)
      if kept < len(listed):
        tf.train.update_checkpoint_state(
            model_dir, path, all_model_checkpoint_paths=listed[:kept])
      return
    logging.warning('Skipped %s: %s; trying an older checkpoint', path,
                    reason)
  raise KitError(f'no checkpoint in --model_dir {model_dir} can be used '
                 f'({", ".join(os.path.basename(p) for p in listed)}); move '
                 'them away to start afresh, or use another --model_dir')


def _predict(estimator, info: prepare.DatasetInfo, count: int) -> list:
  test = tf.data.TFRecordDataset(info.path('test')).take(count)
  labels = [int(label) for _, label in
            test.map(tfrecords.parse_example).as_numpy_iterator()]
  results = []
  for pred, label in zip(estimator.predict(data.predict_input_fn), labels):
    class_id = int(pred['class_ids'])
    results.append(report.print_prediction(
        class_id, float(pred['probabilities'][class_id]), label))
  return results


def run(flags_obj, data_override: prepare.DatasetInfo | None = None) -> dict:
  """Trains, evaluates, predicts and exports; returns what it measured.

  Args:
    flags_obj: the absl FLAGS (or any object with the same attributes).
    data_override: prepared data to use instead of --data_dir/--data_source.

  Returns:
    {'model_dir', 'global_step', 'eval' (metrics or None), 'predictions',
     'export_dir'}.

  Raises:
    KitError: bad input; nothing has been written to --model_dir.
  """
  cluster = None
  if flags_obj.use_tpu:
    batching.per_replica_batch(flags_obj.batch_size, flags_obj.num_shards,
                               '--num_shards')
    cluster = tpu_lib.find_tpu(flags_obj.tpu, flags_obj.tpu_zone,
                               flags_obj.gcp_project)
  info = data_override or prepare.prepare(
      flags_obj.data_dir, flags_obj.data_source, flags_obj.data_url,
      flags_obj.seed)
  shards = flags_obj.num_shards if flags_obj.use_tpu else 1
  evaluation = batching.plan(flags_obj.batch_size, flags_obj.eval_steps,
                             info.train_examples, info.test_examples, shards)
  eval_batch, eval_steps = evaluation.batch, evaluation.steps
  if not (flags_obj.use_tpu or flags_obj.skip_resource_checks):
    resources.check_memory(model.forward_bytes(), flags_obj.batch_size)
  model_dir = paths.ensure_writable_dir(flags_obj.model_dir, 'estimator_mnist_')
  estimator = make_estimator(flags_obj, model_dir, info.data_dir, eval_batch,
                             cluster)
  logging.info('TPUEstimator: model_dir=%s use_tpu=%s global batch=%d%s',
               model_dir, flags_obj.use_tpu, flags_obj.batch_size,
               f' ({flags_obj.batch_size // shards} per core, '
               f'{flags_obj.iterations} steps per loop)' if flags_obj.use_tpu
               else ' (iterations_per_loop has no effect off a TPU)')

  stale.remove(model_dir, stale.checkpoint_temp('model.ckpt'),
               'unfinished checkpoint folders')
  fall_back_to_a_usable_checkpoint(model_dir)
  # tf.compat.v1.layers draw initializer seeds from Python's random module,
  # not the graph seed: seed everything for repeatable runs.
  tf.compat.v2.keras.utils.set_random_seed(flags_obj.seed)
  _train(estimator, flags_obj.train_steps, flags_obj.use_tpu)
  result = {'model_dir': model_dir,
            'global_step': int(estimator.get_variable_value('global_step')),
            'eval': None, 'predictions': [], 'export_dir': None}

  if eval_steps:
    metrics = estimator.evaluate(data.eval_input_fn, steps=eval_steps)
    result['eval'] = {k: float(v) for k, v in metrics.items()}
    report.print_eval(metrics['accuracy'], eval_steps * eval_batch,
                      metrics['loss'], metrics['global_step'])

  if flags_obj.enable_predict:
    result['predictions'] = _predict(estimator, info, flags_obj.num_predictions)

  latest = estimator.latest_checkpoint()
  divergence.check_export(latest)
  export_dir = estimator.export_saved_model(
      os.path.join(model_dir, 'export'), serving_input_receiver_fn,
      checkpoint_path=latest)
  result['export_dir'] = export_dir.decode()
  print(f'SavedModel: {result["export_dir"]}')
  return result

