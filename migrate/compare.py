"""The equivalence checks: a legacy model_fn against the migrated port.

  python -m migrate.compare [--steps=100] [--replicas=1,2,4] [--report=R.json]

Checks: inventory, inputs, inference, one_step, learning_rate, trajectory
(1, 2 and 4 replicas against the single-replica legacy model), stepwise,
evaluation, served_predictions, and dropout (random numbers aligned). Each
returns a dict: name, passed, the measured figures, the tolerance (from
migrate/tolerances.py) and, on failure, what the difference points at.
The command prints one line per check, writes them all to --report and the
loss curves to a PNG beside it, and exits 1 when any fails. Its defaults
compare the kit's own pair; --legacy_model_fn, --legacy_input_fn,
--legacy_serving_input_fn and --port name yours. The README lists the figures
it reaches on the kit's pair (every single-replica check bit-identical).
"""
import os

# oneDNN picks its kernels per graph, so the same op can round differently in
# two graphs. Measured with it on: the single-replica training steps stay
# bit-identical (the port takes its gradients as TF 1 did), but the one-step
# probe differs by 7e-8 and the multi-replica trajectories pass 1e-5 within
# their first 10 steps. Without it every single-replica check is exact to the
# bit. Read when TensorFlow loads: effective for the command, not for a process
# that imported TF before.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')

import sys  # pylint: disable=g-import-not-at-top,wrong-import-position
import tempfile  # pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from migrate import equivalence  # pylint: disable=wrong-import-position
from migrate import legacy as legacy_lib  # pylint: disable=wrong-import-position
from migrate import plot  # pylint: disable=wrong-import-position
from migrate import strategy as strategy_lib  # pylint: disable=wrong-import-position
from migrate import tolerances  # pylint: disable=wrong-import-position
from mnist_common import batching  # pylint: disable=wrong-import-position
from mnist_common import paths  # pylint: disable=wrong-import-position
from mnist_common import prepare  # pylint: disable=wrong-import-position
from mnist_common import tfrecords  # pylint: disable=wrong-import-position
from mnist_common.errors import KitError  # pylint: disable=wrong-import-position


def _max_diff(a: dict, b: dict) -> tuple[float, str]:
  worst = max(a, key=lambda k: float(np.abs(a[k] - b[k]).max()))
  return float(np.abs(a[worst] - b[worst]).max()), worst


def _check(name, value, tolerance, figures, hint):
  passed = bool(value <= tolerance)
  return {'name': name, 'passed': passed, 'max_abs_diff': value,
          'tolerance': tolerance, **figures,
          'message': '' if passed else hint}


def inventory(legacy, migrated) -> dict:
  theirs = {k: list(v.shape) for k, v in legacy.weights().items()}
  ours = {k: list(v.shape) for k, v in migrated.weights().items()}
  missing = sorted(set(theirs) - set(ours))
  extra = sorted(set(ours) - set(theirs))
  shapes = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
  passed = not (missing or extra or shapes)
  return {'name': 'inventory', 'passed': passed, 'variables': theirs,
          'missing_in_port': missing, 'extra_in_port': extra,
          'wrong_shape': shapes,
          'message': '' if passed else (
              'the variables do not map one to one: check the layer names '
              'and sizes, and the port\'s variable map')}


def inputs(legacy_images: np.ndarray, migrated) -> dict:
  ours = next(iter(migrated.port.distribute(
      migrated.strategy, migrated.info.data_dir, equivalence.SPLIT,
      len(legacy_images), False)))[0]
  ours = np.concatenate([t.numpy() for t in
                         migrated.strategy.experimental_local_results(ours)])
  diff = float(np.abs(ours[:len(legacy_images)] - legacy_images).max())
  return _check('inputs', diff, tolerances.INPUT_ATOL,
                {'legacy_range': [float(legacy_images.min()),
                                  float(legacy_images.max())],
                 'port_range': [float(ours.min()), float(ours.max())]},
                'the input pipelines give different images for the same '
                'records: compare the pixel scaling (legacy range vs port '
                'range)')


def inference(legacy, migrated, images) -> dict:
  diff = float(np.abs(legacy.predict(images) - migrated.predict(images)).max())
  return _check('inference', diff, tolerances.INFERENCE_ATOL, {},
                'different outputs at identical weights and inputs: compare '
                'the layers, activations (a missing or misplaced ReLU) and the '
                'variable map (a transposed or swapped kernel)')


def one_step(name: str, theirs: dict, ours: dict, legacy, migrated) -> dict:
  loss = abs(theirs['loss'] - ours['loss'])
  gradient, worst = _max_diff(theirs['gradients'], ours['gradients'])
  rate = abs(theirs.get('learning_rate', np.nan) - ours['learning_rate'])
  weights, _ = _max_diff(legacy.weights(), migrated.weights())
  value = max(loss, gradient, weights)
  result = _check(name, value, tolerances.ONE_STEP_ATOL, {
      'loss_diff': loss, 'gradient_diff': gradient, 'worst_gradient': worst,
      'updated_weights_diff': weights, 'learning_rate_diff': rate,
      'legacy_learning_rate': theirs.get('learning_rate'),
      'port_learning_rate': ours['learning_rate']},
                  'one step differs at identical weights: the loss (label '
                  'encoding, sparse vs one-hot, reduction) or its scaling')
  ratio = np.median([np.abs(ours['gradients'][k]).sum() /
                     max(np.abs(theirs['gradients'][k]).sum(), 1e-30)
                     for k in theirs['gradients']])
  result['gradient_scale_ratio'] = float(ratio)
  if not result['passed'] and abs(ratio - 1) > 0.01:
    result['message'] += (f'; the port\'s gradients are {ratio:.3g}x the '
                          'legacy ones: is the loss averaged per replica or '
                          'summed instead of divided by the global batch?')
  return result


def learning_rate_check(name: str, theirs: list, ours: list) -> dict:
  diff = float(np.abs(np.array(theirs) - np.array(ours)).max())
  return _check(name, diff, tolerances.LEARNING_RATE_ATOL,
                {'legacy': theirs[-1], 'port': ours[-1]},
                'the learning rates drift apart: the schedule must step once '
                'per global batch (not per replica, not per epoch)')


def trajectory(name: str, theirs: list, ours: list, legacy, migrated,
               exact_steps: int | None = None) -> dict:
  """Losses step by step, and the final weights.

  exact_steps: judge only the losses of the first steps (multi-replica runs,
  see tolerances.MULTI_REPLICA_EXACT_STEPS); None: every loss and the final
  weights.
  """
  losses = np.abs(np.array(theirs) - np.array(ours))
  weights, worst = _max_diff(legacy.weights(), migrated.weights())
  over = np.flatnonzero(losses > tolerances.TRAJECTORY_ATOL)
  first = int(over[0]) + 1 if over.size else None  # Steps count from 1.
  judged = (float(losses[:exact_steps].max()) if exact_steps else
            max(float(losses.max()), weights))
  hint = ('the trajectories part: check the per-replica batch (global // '
          'replicas) and that the loss is divided by the global batch')
  if first == 1:
    hint = ('the very first loss differs: the replicas do not see the legacy '
            'global batch; is the global batch used as the per-replica batch?')
  return _check(name, judged, tolerances.TRAJECTORY_ATOL,
                {'steps': len(theirs), 'judged_steps': exact_steps or
                 len(theirs), 'max_loss_diff': float(losses.max()),
                 'first_step_over_tolerance': first,
                 'final_weights_diff': weights, 'worst_weight': worst,
                 'bit_identical': bool(losses.max() == 0 and weights == 0),
                 'legacy_losses': [float(x) for x in theirs],
                 'port_losses': [float(x) for x in ours]}, hint)


def evaluation(legacy, migrated, input_fn, source) -> dict:
  """Both evaluations over the source's test split, at identical weights."""
  batches = legacy_lib.legacy_batches(input_fn, source.data_dir,
                                      migrated.global_batch)
  migrated.set_weights(legacy.weights())
  theirs = legacy.evaluate(batches)
  ours = migrated.evaluate(source.data_dir, len(batches))
  accuracy = abs(theirs['accuracy'] - ours['accuracy'])
  loss = abs(theirs['loss'] - ours['loss'])
  return _check('evaluation', accuracy, tolerances.EVAL_ACCURACY_ATOL, {
      'examples': len(batches) * migrated.global_batch,
      'legacy_accuracy': theirs['accuracy'], 'port_accuracy': ours['accuracy'],
      'legacy_loss': theirs['loss'], 'port_loss': ours['loss'],
      'loss_diff': loss},
                'the evaluations disagree at identical weights: compare the '
                'metric (argmax of the logits against int labels) and the '
                'eval input pipeline (split, batching, remainder)')


def _serve(path: str, images: np.ndarray) -> dict:
  signature = tf.saved_model.load(path).signatures['serving_default']
  return {k: v.numpy() for k, v in signature(tf.constant(images)).items()}


def served_predictions(legacy, migrated, serving_input_fn, source,
                       workdir: str) -> dict:
  """Both SavedModels, loaded back, on the raw test images."""
  images = np.concatenate([image.numpy() for image, _ in tf.data.TFRecordDataset(
      source.path('test')).map(tfrecords.parse_example).batch(1024)])
  migrated.set_weights(legacy.weights())
  # The port first: the legacy export leaves the port's Keras model unusable.
  ours_path = migrated.export(os.path.join(workdir, 'port'))
  theirs = _serve(legacy.export(serving_input_fn, workdir), images)
  ours = _serve(ours_path, images)
  needed = {'class_ids', 'probabilities'}
  if not needed <= set(theirs) & set(ours):
    return {'name': 'served_predictions', 'passed': False,
            'legacy_outputs': sorted(theirs), 'port_outputs': sorted(ours),
            'message': ('the two serving signatures differ: both need the '
                        'outputs class_ids and probabilities')}
  classes = int((theirs['class_ids'] != ours['class_ids']).sum())
  diff = float(np.abs(theirs['probabilities'] - ours['probabilities']).max())
  result = _check('served_predictions', diff, tolerances.INFERENCE_ATOL,
                  {'images': len(images), 'different_classes': classes},
                  'the SavedModels serve different predictions at identical '
                  'weights: compare the serving functions (uint8 input, the '
                  'same pixel scaling as training) and the exported outputs')
  if result['passed'] and classes:
    result['passed'] = False
    result['message'] = (f'{classes} images get another class from the two '
                         'SavedModels: compare their class_ids outputs')
  return result


def _ran_out(name: str) -> dict:
  return {'name': name, 'passed': False,
          'message': ('the port\'s input ran out before the legacy input did: '
                      'it reads more than the global batch per step; is the '
                      'global batch used as the per-replica batch?')}


def _train_pair(name: str, legacy, migrated, batches, steps: int,
                exact_steps: int | None) -> list:
  """One step, then the rest of the trajectory; the checks on them."""
  theirs = [legacy.step(*batches[0])]
  ours = [migrated.step()]
  checks = [one_step(f'one_step ({name})', theirs[0], ours[0], legacy,
                     migrated)]
  try:
    for images, labels in batches[1:steps]:
      theirs.append(legacy.step(images, labels))
      ours.append(migrated.step())
  except (tf.errors.OutOfRangeError, StopIteration):
    return checks + [_ran_out(f'trajectory ({name})')]
  checks.append(learning_rate_check(
      f'learning_rate ({name})', [t.get('learning_rate', np.nan) for t in theirs],
      [o['learning_rate'] for o in ours]))
  checks.append(trajectory(f'trajectory ({name})', [t['loss'] for t in theirs],
                           [o['loss'] for o in ours], legacy, migrated,
                           exact_steps))
  return checks


def stepwise(name: str, legacy, migrated, batches, steps: int) -> dict:
  """Every step of the legacy trajectory as a one-step check.

  Before each step the port takes the legacy weights, so a difference cannot
  grow from step to step: what a free-running multi-replica trajectory can
  only be judged on over its first steps (see tolerances) is judged here over
  all of them, at the one-step bar.
  """
  per_step = []
  for images, labels in batches[:steps]:
    migrated.set_weights(legacy.weights())
    try:
      theirs, ours = legacy.step(images, labels), migrated.step()
    except (tf.errors.OutOfRangeError, StopIteration):
      return _ran_out(name)
    weights, _ = _max_diff(legacy.weights(), migrated.weights())
    per_step.append(max(abs(theirs['loss'] - ours['loss']), weights))
  per_step = np.array(per_step)
  over = np.flatnonzero(per_step > tolerances.ONE_STEP_ATOL)
  first = int(over[0]) + 1 if over.size else None
  return _check(name, float(per_step.max()), tolerances.ONE_STEP_ATOL, {
      'steps': len(per_step), 'per_step_max_diff': per_step.tolist(),
      'first_step_over_tolerance': first},
                f'step {first} of the legacy trajectory differs at identical '
                'weights: the per-replica batch, the loss scaling or the '
                'learning rate at that step')


def dropout_trajectory(model_fn, port, params, info, batches, start: dict,
                       steps: int) -> dict:
  """Both sides trained with dropout on, their random numbers aligned.

  Both graphs are built inside one DeterministicRandomTestTool scope
  ('constant' mode), which gives every stateful random op the same seeds: the
  legacy graph's dropout op and the port's, in its tf.function, then draw the
  same mask at the same step (one draw per step on each side). A wrong rate,
  or a dropout in the wrong place, shows from the first step.
  """
  tool = tf.compat.v1.keras.utils.DeterministicRandomTestTool()
  global_batch = len(batches[0][1])
  with tool.scope():
    legacy = legacy_lib.LegacyRunner(model_fn, params, global_batch)
    strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
    migrated = equivalence.MigratedRunner(port, strategy, info, global_batch,
                                          params['learning_rate'])
    legacy.set_weights(start)
    migrated.set_weights(start)
    theirs, ours = [], []
    for images, labels in batches[:steps]:
      theirs.append(legacy.step(images, labels)['loss'])
      ours.append(migrated.train_loss())
  result = trajectory('dropout (1 replica)', theirs, ours, legacy, migrated)
  if not result['passed']:
    result['message'] = (
        'with dropout on (random numbers aligned) the trajectories part: '
        'compare the dropout rate and where the dropout layer sits; if the '
        'dropout-off trajectory passes, dropout is the difference. (Masks '
        'align only when both draw them with stateful random ops, as '
        'tf.compat.v1.layers and Keras 2.15 layers do by default.)')
  return result


def compare(model_fn, input_fn, port: equivalence.Port,
            source, workdir: str, strategies: dict, steps: int = 100,
            global_batch: int = 64, learning_rate: float = 0.05,
            seed: int = 0, serving_input_fn=None) -> list:
  """Runs every check and returns them.

  Args:
    model_fn, input_fn: the legacy pair; input_fn reads params['data_dir'] and
      params['batch_size'] and yields (images, labels) in file order.
    port: the migrated pieces.
    source: prepared data: the comparison's training records are taken from
      its train split; evaluation and serving use its test split.
    workdir: where the comparison records and SavedModels are written.
    strategies: {name: strategy}, the first one single-replica; each gets a
      trajectory against the single-replica legacy model.
    steps, global_batch, learning_rate, seed: the training compared.
    serving_input_fn: the legacy serving_input_receiver_fn; None skips the
      served-predictions check.
  """
  info = equivalence.write_comparison_data(source, workdir,
                                           steps * global_batch)
  batches = legacy_lib.legacy_batches(input_fn, info.data_dir, global_batch)
  params = {'learning_rate': learning_rate, 'use_tpu': False}
  checks = []
  tf.keras.utils.set_random_seed(seed)
  with equivalence.dropout_disabled():
    start = None
    for index, (name, strategy) in enumerate(strategies.items()):
      legacy = legacy_lib.LegacyRunner(model_fn, params, global_batch)
      start = start or legacy.weights()
      legacy.set_weights(start)
      migrated = equivalence.MigratedRunner(port, strategy, info,
                                            global_batch, learning_rate)
      if index == 0:
        checks.append(inventory(legacy, migrated))
        if not checks[-1]['passed']:
          return checks
      migrated.set_weights(start)
      if index == 0:
        checks.append(inputs(batches[0][0], migrated))
        checks.append(inference(legacy, migrated, batches[0][0]))
      checks += _train_pair(name, legacy, migrated, batches, steps,
                            None if strategy.num_replicas_in_sync == 1 else
                            tolerances.MULTI_REPLICA_EXACT_STEPS)
      if index == 0:
        # Here, before another legacy graph makes this port model unusable.
        checks.append(evaluation(legacy, migrated, input_fn, source))
        if serving_input_fn is not None:
          checks.append(served_predictions(legacy, migrated, serving_input_fn,
                                           source, workdir))
      else:
        legacy = legacy_lib.LegacyRunner(model_fn, params, global_batch)
        legacy.set_weights(start)
        migrated = equivalence.MigratedRunner(port, strategy, info,
                                              global_batch, learning_rate)
        checks.append(stepwise(f'stepwise ({name})', legacy, migrated,
                               batches, steps))
  checks.append(dropout_trajectory(model_fn, port, params, info, batches,
                                   start, steps))
  return checks


def cpu_strategies(replica_counts: list[int]) -> dict:
  """{'1 replica': ..., '2 replicas': ...} over the logical CPU devices.

  ReductionToOneDevice, not collectives: strategies of several sizes over the
  same devices in one process would clash on collective group keys.
  """
  strategies = {}
  for count in replica_counts:
    devices = [f'/cpu:{i}' for i in range(count)]
    name = f'{count} replica' + ('s' if count > 1 else '')
    strategies[name] = (tf.distribute.OneDeviceStrategy(devices[0])
                        if count == 1 else tf.distribute.MirroredStrategy(
                            devices, cross_device_ops=(
                                tf.distribute.ReductionToOneDevice())))
  return strategies


def _define_flags() -> None:
  """Command-line flags; defined only when run as a command, so that
  importing this module defines none."""
  flags.DEFINE_string('legacy_model_fn', legacy_lib.DEFAULT_MODEL_FN,
                      'The legacy model_fn, as package.module:name.')
  flags.DEFINE_string('legacy_input_fn', 'estimator_mnist.data:eval_input_fn',
                      'A legacy input_fn that reads params["data_dir"] and '
                      'params["batch_size"] and yields (images, labels) in file '
                      'order, without shuffling.')
  flags.DEFINE_string('legacy_serving_input_fn',
                      'estimator_mnist.train:serving_input_receiver_fn',
                      'The legacy serving_input_receiver_fn the Estimator '
                      'exported with; empty: skip the served-predictions '
                      'check.')
  flags.DEFINE_string('port', 'migrate.equivalence:Port',
                      'A callable returning the equivalence.Port to check.')
  flags.DEFINE_string('data_dir', None, 'Where the compared records come from '
                      '(see python -m migrate --helpfull); unset: the kit\'s '
                      'default data.')
  flags.DEFINE_integer('steps', 100, 'Training steps compared.', lower_bound=1)
  flags.DEFINE_integer('batch_size', 64, 'Global batch.', lower_bound=1)
  flags.DEFINE_float('learning_rate', 0.05, 'Initial learning rate.')
  flags.DEFINE_list('replicas', ['1', '2', '4'],
                    'Replica counts to run the port on; the first must be 1.')
  flags.DEFINE_string('report', 'equivalence_report.json',
                      'Where the JSON report goes; the loss plot goes beside '
                      'it, with the suffix .png.')


FLAGS = flags.FLAGS


def _summary(check: dict) -> str:
  figure = check.get('max_abs_diff')
  figure = '' if figure is None else (
      f' max diff {figure:.3g} (tolerance {check["tolerance"]:.0e})')
  return (f'{"PASS" if check["passed"] else "FAIL"} {check["name"]}:{figure}'
          f'{"; " + check["message"] if check["message"] else ""}')


def main(argv: list[str]) -> None:
  del argv
  logging.set_verbosity(logging.WARNING)
  try:
    counts = [int(r) for r in FLAGS.replicas]
    if counts[0] != 1:
      raise KitError('--replicas must start with 1, the legacy single '
                     'replica reference')
    for count in counts:
      batching.per_replica_batch(FLAGS.batch_size, count, '--replicas')
    strategy_lib.split_cpu(max(counts))
    serving = FLAGS.legacy_serving_input_fn
    serving = legacy_lib.load_callable(serving) if serving else None
    model_fn = legacy_lib.load_callable(FLAGS.legacy_model_fn)
    input_fn = legacy_lib.load_callable(FLAGS.legacy_input_fn)
    port = legacy_lib.load_callable(FLAGS.port)()
    source = prepare.prepare(FLAGS.data_dir)
    with tempfile.TemporaryDirectory() as workdir:
      checks = compare(model_fn, input_fn, port, source, workdir,
                       cpu_strategies(counts), FLAGS.steps, FLAGS.batch_size,
                       FLAGS.learning_rate, serving_input_fn=serving)
  except KitError as e:
    sys.exit(f'error: {e}')
  for check in checks:
    print(_summary(check))
  plot_path = os.path.splitext(FLAGS.report)[0] + '.png'
  plot.loss_curves(checks, plot_path)
  report = {'passed': all(c['passed'] for c in checks), 'checks': checks,
            'steps': FLAGS.steps, 'batch_size': FLAGS.batch_size,
            'learning_rate': FLAGS.learning_rate, 'data': source.description,
            'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS')}
  paths.write_json(FLAGS.report, report, default=lambda value: value.item())
  print(f'Report: {FLAGS.report}, plot: {plot_path}')
  if not report['passed']:
    sys.exit(1)


if __name__ == '__main__':
  _define_flags()
  app.run(main)
