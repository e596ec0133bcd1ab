"""Training with TPUEstimator: train, evaluate, predict, export.

``run(config, data=None)`` is the whole job, as migrate's ``train.run`` is
for tf.distribute; main.py builds the config from the flags. Tests build
their own config and pass ``data`` instead of patching anything.
"""
import os
import re
import signal

from absl import logging
import tensorflow.compat.v1 as tf

from estimator_mnist import config as config_lib
from estimator_mnist import data as data_lib
from estimator_mnist import divergence
from estimator_mnist import model
from kit_core import checkpoint_files
from kit_core import errors
from kit_core import exits
from kit_core import framework_logs
from kit_core import paths
from kit_core import sharding
from kit_core import stale
from kit_core.errors import KitError
from kit_core.errors import Preempted
from mnist_common import batching
from mnist_common import prepare
from mnist_common import report
from mnist_common import resources
from mnist_common import sources
from mnist_common import tfrecords
from mnist_common import tpu as tpu_lib
from mnist_common.errors import describe_names


def serving_input_receiver_fn(
) -> tf.estimator.export.TensorServingInputReceiver:
  """Serving takes raw uint8 pixels and scales them as the input_fn does."""
  image = tf.placeholder(tf.uint8, [None, sources.IMAGE_SIZE,
                                    sources.IMAGE_SIZE, 1], name='image')
  # A Tensor receiver hands model_fn a Tensor, as the input_fns do, not a dict.
  return tf.estimator.export.TensorServingInputReceiver(
      data_lib.scale_image(image), {'image': image})


def make_estimator(config: config_lib.Config, model_dir: str, data_dir: str,
                   eval_batch: int,
                   cluster=None) -> tf.estimator.tpu.TPUEstimator:
  """A TPUEstimator configured from the run's config."""
  run_config = tf.estimator.tpu.RunConfig(
      cluster=cluster,
      model_dir=model_dir,
      tf_random_seed=config.seed,
      save_checkpoints_steps=(config.save_checkpoints_steps or
                              max(config.iterations,
                                  model.LOG_EVERY_STEPS)),
      # TPUEstimator logs every ceil(this / iterations_per_loop) session runs,
      # and a session run is a whole loop on a TPU but one step off it.
      log_step_count_steps=(model.LOG_EVERY_STEPS if config.use_tpu else
                            model.LOG_EVERY_STEPS * config.iterations),
      tpu_config=tf.estimator.tpu.TPUConfig(
          iterations_per_loop=config.iterations,
          num_shards=config.num_shards))
  return tf.estimator.tpu.TPUEstimator(
      model_fn=model.model_fn,
      config=run_config,
      use_tpu=config.use_tpu,
      train_batch_size=config.batch_size,
      eval_batch_size=eval_batch,
      predict_batch_size=config.num_predictions,
      params={'data_dir': data_dir, 'learning_rate': config.learning_rate,
              'use_tpu': config.use_tpu, 'seed': config.seed,
              'num_predictions': config.num_predictions},
      # Off a TPU, the extra 'serve,tpu' MetaGraph would make a plain
      # tf.saved_model.load(path) fail (it then needs explicit tags).
      export_to_tpu=config.export_to_tpu)


class StopOnSignal(tf.estimator.SessionRunHook):
  """Stops training after the session run in progress once SIGTERM (or
  Ctrl-C, SIGINT) came.

  The Estimator has no preemption handling of its own; stopping its loop
  cleanly lets its CheckpointSaverHook save the step reached, as it does at
  the end of every train() call.
  """
  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.received = None

  def on_signal(self, signum, frame):  # pylint: disable=unused-argument
    self.received = self.received or signal.Signals(signum).name

  def after_run(self, run_context, run_values):
    if self.received:
      run_context.request_stop()


def _train(estimator, max_steps: int, use_tpu: bool, again: str) -> None:
  """estimator.train up to max_steps, guarded against divergence; again
  says how to resume after a signal (errors.run_again).

  Raises:
    DivergedError: the loss or the weights stopped being finite; nothing was
      saved from them.
    Preempted: SIGTERM or SIGINT came; the step reached was saved.
  """
  stop = StopOnSignal()
  hook, listener = divergence.guards(estimator.model_dir, use_tpu)
  before = {s: signal.signal(s, stop.on_signal) for s in stop.SIGNALS}
  try:
    estimator.train(data_lib.train_input_fn, max_steps=max_steps,
                    hooks=[hook, stop], saving_listeners=[listener])
  finally:
    exits.restore_handlers(before)
  if stop.received:
    latest = estimator.latest_checkpoint()
    raise Preempted(_step_of(latest), latest, stop.received, again)


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


def _check_checkpoint_is_ours(model_dir: str, path: str) -> None:
  """KitError unless the checkpoint at path is an Estimator's of this
  model: the Estimator would fail at its restore, in a traceback, in train,
  or at export when the checkpoint's step is already past --train_steps."""
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  name = os.path.basename(path)
  if 'global_step' not in keys:
    written_by = ('tf.train.Checkpoint (migrate, Keras)'
                  if '_CHECKPOINTABLE_OBJECT_GRAPH' in keys else
                  'something else')
    raise KitError(f'--model_dir {model_dir} holds a checkpoint written by '
                   f'{written_by}, {name}, not by an Estimator; use another '
                   '--model_dir')
  expected = model.variable_shapes()
  missing = sorted(set(expected) - set(keys))
  shapes = [f'{v} {keys[v]} (expected {expected[v]})' for v in sorted(
      set(expected) & set(keys)) if list(keys[v]) != expected[v]]
  if missing or shapes:
    found = (f'it lacks {describe_names(missing)}' if missing else
             f'wrong shapes: {describe_names(shapes)}')
    raise KitError(f'--model_dir {model_dir} holds a checkpoint of another '
                   f'model ({name}: {found}); use another --model_dir')


def fall_back_to_a_usable_checkpoint(model_dir: str) -> None:
  """Makes the newest usable checkpoint the one the Estimator restores: a
  truncated, corrupt or non-finite latest one is skipped with a line naming
  it (the Estimator keeps several), and one the state file does not name
  (missing, garbage, or naming a deleted checkpoint) is found by its files.

  Raises:
    KitError: checkpoints are there and none can be used.
  """
  found = checkpoint_files.find(model_dir)
  for path in found:
    reason = _unusable(path)
    if reason is None:
      _check_checkpoint_is_ours(model_dir, path)
      checkpoint_files.record_state(model_dir, found, path)
      return
    logging.warning('Skipped %s: %s; trying an older checkpoint', path,
                    reason)
  if found:
    raise KitError(f'no checkpoint in --model_dir {model_dir} can be used '
                   f'({", ".join(os.path.basename(p) for p in found)}); move '
                   'them away to start afresh, or use another --model_dir')


def _predict(estimator, info: prepare.DatasetInfo, count: int) -> list:
  test = tf.data.TFRecordDataset(info.path('test')).take(count)
  labels = [int(label) for _, label in
            test.map(tfrecords.parse_example).as_numpy_iterator()]
  results = []
  predictions = estimator.predict(data_lib.predict_input_fn)
  for pred, label in zip(predictions, labels):
    class_id = int(pred['class_ids'])
    results.append(report.print_prediction(
        class_id, float(pred['probabilities'][class_id]), label))
  return results


# Where the Estimator writes an export before renaming it into place.
EXPORT_TEMP = re.compile(r'temp-\d+')
# TensorFlow's log lines that the command holds back (main.py), in the
# model_dir: each run's appended.
LOG_FILE = 'tensorflow.log'


def export(estimator: tf.estimator.tpu.TPUEstimator, model_dir: str) -> str:
  """Exports the latest checkpoint, as migrate's export does its weights;
  returns the SavedModel's folder.

  Raises:
    NonFiniteExportError: a weight is not finite; nothing is written.
  """
  latest = estimator.latest_checkpoint()
  divergence.check_export(latest)
  base = os.path.join(model_dir, 'export')
  # The Estimator writes into export/temp-N and renames it when done: a
  # temp-N that appears from here on is this export's.
  exporting = stale.watch(base, EXPORT_TEMP)
  try:
    return estimator.export_saved_model(
        base, serving_input_receiver_fn, checkpoint_path=latest).decode()
  except BaseException:
    exporting.remove_new('an unfinished export')
    raise


def run(config: config_lib.Config,
        data: prepare.DatasetInfo | None = None) -> dict:
  """Trains, evaluates, predicts and exports; returns what it measured.

  Args:
    config: the run's options (main.py builds them from the flags).
    data: prepared data to use instead of config.data_dir/data_source.

  Returns:
    {'model_dir', 'global_step', 'eval' (metrics or None), 'predictions',
     'export_dir'}.

  Raises:
    KitError: bad input; nothing has been written to --model_dir.
  """
  cluster = None
  if config.use_tpu:
    sharding.per_replica_batch(config.batch_size, config.num_shards,
                               '--num_shards')
    cluster = tpu_lib.find_tpu(config.tpu, config.tpu_zone,
                               config.gcp_project)
  info = data or prepare.prepare(
      config.data_dir, config.data_source, config.data_url,
      config.seed)
  evaluation = batching.plan(
      config.batch_size, config.eval_steps, info.train_examples,
      info.test_examples, config.shards,
      config.num_predictions if config.enable_predict else 0)
  if not (config.use_tpu or config.skip_resource_checks):
    resources.check_memory(model.forward_bytes(), config.batch_size)
  model_dir = paths.ensure_writable_dir(config.model_dir, 'estimator_mnist_')
  with paths.one_trainer(model_dir):
    return _train_evaluate_export(config, info, evaluation, cluster,
                                  model_dir)


def _train_evaluate_export(config: config_lib.Config,
                           info: prepare.DatasetInfo,
                           evaluation: batching.Evaluation, cluster,
                           model_dir: str) -> dict:
  """run()'s work once its input is checked and model_dir is held."""
  log = os.path.join(model_dir, LOG_FILE)
  if framework_logs.write_held_back_to(log):
    if framework_logs.failure():
      logging.warning("TensorFlow's own notices are not kept (%s); "
                      '--verbose prints them', framework_logs.failure())
    else:
      logging.info("TensorFlow's own notices: %s (--verbose prints them)",
                   log)
  eval_batch, eval_steps = evaluation.batch, evaluation.steps
  estimator = make_estimator(config, model_dir, info.data_dir, eval_batch,
                             cluster)
  logging.info('TPUEstimator: model_dir=%s use_tpu=%s global batch=%d%s',
               model_dir, config.use_tpu, config.batch_size,
               f' ({config.batch_size // config.shards} per core, '
               f'{config.iterations} steps per loop)' if config.use_tpu
               else ' (iterations_per_loop has no effect off a TPU)')

  stale.remove(model_dir, stale.checkpoint_temp('model.ckpt'),
               'unfinished checkpoint folders')
  # A save the disk refuses leaves its temporary folder: this run's.
  stale.watch(model_dir, stale.checkpoint_temp('model.ckpt'))
  stale.remove(os.path.join(model_dir, 'export'), EXPORT_TEMP,
               'unfinished exports', stale.SAVED_MODEL_FOLDER)
  fall_back_to_a_usable_checkpoint(model_dir)
  # tf.compat.v1.layers draw initializer seeds from Python's random module,
  # not the graph seed: seed everything for repeatable runs.
  tf.compat.v2.keras.utils.set_random_seed(config.seed)
  again = errors.run_again(config.model_dir, model_dir)
  _train(estimator, config.train_steps, config.use_tpu, again)
  result = {'model_dir': model_dir,
            'global_step': int(estimator.get_variable_value('global_step')),
            'eval': None, 'predictions': [], 'export_dir': None}

  # A signal from here on loses no training: the export is what it stops.
  with exits.interruptible(f'training is saved in '
                           f'{estimator.latest_checkpoint()}, nothing was '
                           f'exported; {again} to evaluate and export'):
    if eval_steps:
      metrics = estimator.evaluate(data_lib.eval_input_fn, steps=eval_steps)
      result['eval'] = {k: float(v) for k, v in metrics.items()}
      report.print_eval(metrics['accuracy'], eval_steps * eval_batch,
                        metrics['loss'], metrics['global_step'])
    if config.enable_predict:
      result['predictions'] = _predict(estimator, info,
                                       config.num_predictions)
    result['export_dir'] = export(estimator, model_dir)
  print(f'SavedModel: {result["export_dir"]}')
  return result

