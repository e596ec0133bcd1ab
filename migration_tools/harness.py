"""The equivalence harness: a legacy model_fn against its port, check by check.

``compare(pair, port, source, workdir, strategies, options)`` runs the legacy
model_fn as TPUEstimator does on CPU and the port's own pieces (``port.Port``)
under each strategy, on the same records from the same initial weights, and
returns a ``checks.CheckResult`` for every check: inventory, inputs,
inference, one_step, learning_rate, trajectory, stepwise, evaluation,
served_predictions and dropout (random numbers aligned). A check that raises
is an ERROR with its cause and the others still run; ``write_report`` writes
the JSON report and the loss-curve PNG. The command is ``compare.py``.
"""
import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from migration_tools import checks
from migration_tools import legacy as legacy_lib
from migration_tools import plot
from migration_tools import port as port_lib
from migration_tools import port_runner
from migration_tools.checks import CheckResult
from mnist_common import paths
from mnist_common import prepare
from mnist_common import process
from mnist_common import tfrecords
from mnist_common.errors import one_line


@dataclasses.dataclass(frozen=True)
class Options:
  """The training compared: steps, global batch, learning rate, seed."""
  steps: int = 100
  global_batch: int = 64
  learning_rate: float = 0.05
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class LegacyPair:
  """The legacy code the port is compared with.

  model_fn: the (TPU)Estimator model_fn.
  input_fn: reads params['data_dir'] and params['batch_size'] and yields
    (features, labels) in file order, without shuffling.
  serving_input_fn: the serving_input_receiver_fn the Estimator exported
    with; None skips the served-predictions check.
  """
  model_fn: Callable
  input_fn: Callable
  serving_input_fn: Callable | None = None


class Recorder:
  """Runs checks, each isolated: one that raises becomes an ERROR result with
  its cause, and the next one runs. ``results()`` lists every planned check,
  those never reached as NOT_RUN with the reason."""

  def __init__(self, planned: list[str]):
    self.planned = planned
    self._results: dict[str, CheckResult] = {}
    self.stopped = ''

  def run(self, name: str, check: Callable[[], CheckResult]
          ) -> CheckResult:
    try:
      result = check()
    except Exception as e:  # pylint: disable=broad-except
      result = CheckResult(name, checks.ERROR, one_line(e))
    result.name = name
    self._results[name] = result
    return result

  def error(self, names: list[str], message: str) -> None:
    """Records every one of names not yet run as an ERROR with message."""
    for name in names:
      self._results.setdefault(name, CheckResult(name, checks.ERROR, message))

  def results(self) -> list[CheckResult]:
    reason = self.stopped or 'an earlier step raised (see the errors above)'
    return [self._results.get(name) or
            CheckResult(name, checks.NOT_RUN, reason)
            for name in self.planned]


def planned_checks(labels: list[str], serving: bool) -> list[str]:
  """The checks compare() runs, in order, for these replica labels."""
  names = ['inventory', 'inputs', 'inference']
  for index, label in enumerate(labels):
    names += [f'one_step ({label})', f'learning_rate ({label})',
              f'trajectory ({label})']
    if index == 0:
      names += ['evaluation'] + (['served_predictions'] if serving else [])
    else:
      names.append(f'stepwise ({label})')
  return names + ['dropout (1 replica)']


def write_comparison_data(source: prepare.DatasetInfo, directory: str,
                          examples: int) -> str:
  """The first `examples` train records of source (cycled), in file order,
  written as the split port_runner.SPLIT of directory; returns directory."""
  records = tf.data.TFRecordDataset(source.path('train')).repeat().take(
      examples).map(tfrecords.parse_example).batch(examples)
  images, labels = next(iter(records))
  path = tfrecords.split_path(directory, port_runner.SPLIT)
  tfrecords.write_records(path, images.numpy()[..., 0], labels.numpy())
  return directory


def _first_port_batch(runner: port_runner.PortRunner) -> np.ndarray:
  iterator = process.keep_alive(iter(runner.dataset(port_runner.SPLIT)))
  features = next(iterator)[0]
  return np.concatenate([t.numpy() for t in
                         runner.strategy.experimental_local_results(features)])


def _run_trajectory(rec: Recorder, label: str, legacy, runner, batches,
                    options: Options) -> None:
  """one_step, learning_rate and trajectory on one strategy."""
  replicas = runner.strategy.num_replicas_in_sync
  theirs, ours = [], []

  def first_step():
    theirs.append(legacy.step(*batches[0]))
    ours.append(runner.step())
    return checks.one_step(f'one_step ({label})', theirs[0], ours[0],
                           legacy.weights(), runner.weights(), replicas)

  rec.run(f'one_step ({label})', first_step)
  names = [f'learning_rate ({label})', f'trajectory ({label})']
  if not ours:
    rec.error(names, 'the first step raised (see one_step)')
    return
  try:
    for features, labels in batches[1:options.steps]:
      theirs.append(legacy.step(features, labels))
      ours.append(runner.step())
  except (tf.errors.OutOfRangeError, StopIteration):
    rec.error(names, f'the port\'s input ran out at step {len(ours) + 1} '
              'while the legacy input had more: it reads more than the '
              'global batch per step (e.g. the global batch used as the '
              'per-replica batch)')
    return
  except Exception as e:  # pylint: disable=broad-except
    rec.error(names, f'step {len(ours) + 1} raised: {one_line(e)}')
    return
  rec.run(names[0], lambda: checks.learning_rate(
      names[0], [t.get('learning_rate', np.nan) for t in theirs],
      [o['learning_rate'] for o in ours]))
  rec.run(names[1], lambda: checks.trajectory(
      names[1], [t['loss'] for t in theirs], [o['loss'] for o in ours],
      legacy.weights(), runner.weights(), judge_each_step=replicas == 1))


def _stepwise(label: str, legacy, runner, batches, steps: int
              ) -> CheckResult:
  """Every step of the legacy trajectory as a one-step check: before each
  step the port takes the legacy weights, so no difference can grow."""
  per_step = []
  for features, labels in batches[:steps]:
    runner.set_weights(legacy.weights())
    theirs, ours = legacy.step(features, labels), runner.step()
    weights, _ = checks.max_diff(legacy.weights(), runner.weights())
    per_step.append(max(abs(theirs['loss'] - ours['loss']), weights))
  return checks.stepwise(f'stepwise ({label})', np.array(per_step))


def _evaluate(legacy, runner, input_fn, source, global_batch) -> CheckResult:
  batches = legacy_lib.legacy_batches(input_fn, source.data_dir, global_batch)
  runner.set_weights(legacy.weights())
  return checks.evaluation(legacy.evaluate(batches),
                           runner.evaluate(source.data_dir, len(batches)),
                           len(batches) * global_batch)


def _serve(path: str, images: np.ndarray) -> dict:
  signature = tf.saved_model.load(path).signatures['serving_default']
  return {k: v.numpy() for k, v in signature(tf.constant(images)).items()}


def _served_predictions(legacy, runner, serving_input_fn, source,
                        workdir: str) -> CheckResult:
  """Both SavedModels, loaded back, on the raw test images."""
  images = np.concatenate([image.numpy() for image, _ in tf.data.TFRecordDataset(
      source.path('test')).map(tfrecords.parse_example).batch(1024)])
  runner.set_weights(legacy.weights())
  # The port first: the legacy export leaves the port's Keras model unusable.
  ours = runner.export(os.path.join(workdir, 'port'))
  theirs = legacy.export(serving_input_fn, workdir)
  return checks.served_predictions(_serve(theirs, images), _serve(ours, images))


def _dropout(rec: Recorder, pair: LegacyPair, port, params, data_dir, batches,
             start: dict, options: Options) -> None:
  """Both sides trained with dropout on, their random numbers aligned.

  Both graphs are built inside one DeterministicRandomTestTool scope
  ('constant' mode), which gives every stateful random op the same seeds: the
  legacy graph's dropout op and the port's, in its tf.function, then draw the
  same mask at the same step (one draw per step on each side).
  """
  def run() -> CheckResult:
    tool = tf.compat.v1.keras.utils.DeterministicRandomTestTool()
    with tool.scope():
      legacy = legacy_lib.LegacyRunner(pair.model_fn, params,
                                       options.global_batch)
      runner = port_runner.PortRunner(
          port, tf.distribute.OneDeviceStrategy('/cpu:0'), data_dir,
          options.global_batch, options.learning_rate)
      legacy.set_weights(start)
      runner.set_weights(start)
      theirs, ours = [], []
      for features, labels in batches[:options.steps]:
        theirs.append(legacy.step(features, labels)['loss'])
        ours.append(runner.train_loss())
    result = checks.trajectory('dropout (1 replica)', theirs, ours,
                               legacy.weights(), runner.weights())
    if not result.passed:
      result.message = (
          'with dropout on (random numbers aligned) the trajectories part; '
          'if the dropout-off trajectory passes, dropout is the difference: '
          'compare the dropout rate and where the dropout layer sits. (Masks '
          'align only when both draw them with stateful random ops, as '
          'tf.compat.v1.layers and Keras 2.15 layers do by default.)')
    return result
  rec.run('dropout (1 replica)', run)


def _single_replica_checks(rec: Recorder, pair: LegacyPair, legacy, runner,
                           batches, source, workdir: str,
                           options: Options) -> None:
  """inputs, inference, the 1-replica training checks, evaluation, serving."""
  rec.run('inputs', lambda: checks.inputs(batches[0][0],
                                          _first_port_batch(runner)))
  rec.run('inference', lambda: checks.inference(
      legacy.predict(batches[0][0]), runner.predict(batches[0][0])))
  _run_trajectory(rec, '1 replica', legacy, runner, batches, options)
  # Here, before another legacy graph makes this port model unusable.
  rec.run('evaluation', lambda: _evaluate(
      legacy, runner, pair.input_fn, source, options.global_batch))
  if pair.serving_input_fn is not None:
    rec.run('served_predictions', lambda: _served_predictions(
        legacy, runner, pair.serving_input_fn, source, workdir))


def compare(pair: LegacyPair, port: port_lib.Port, source: prepare.DatasetInfo,
            workdir: str, strategies: dict[str, tf.distribute.Strategy],
            options: Options = Options()) -> list[CheckResult]:
  """Runs every check and returns every planned one, in order.

  Args:
    pair: the legacy model_fn, input_fn and serving function.
    port: the port's pieces (port.check_port has accepted it).
    source: prepared data: the comparison's training records are taken from
      its train split; evaluation and serving use its test split.
    workdir: where the comparison records and SavedModels are written.
    strategies: {label: strategy}, the first one '1 replica'; each gets a
      trajectory against the single-replica legacy model.
    options: the training compared.

  Returns:
    A CheckResult per check of planned_checks(); a check that raised is an
    ERROR with its cause, one never reached is NOT_RUN with the reason.

  Raises:
    KitError: the legacy input_fn fails before any check can run.
  """
  rec = Recorder(planned_checks(list(strategies),
                                pair.serving_input_fn is not None))
  data_dir = write_comparison_data(source, workdir,
                                   options.steps * options.global_batch)
  batches = legacy_lib.legacy_batches(pair.input_fn, data_dir,
                                      options.global_batch)
  params = {'learning_rate': options.learning_rate, 'use_tpu': False}
  tf.keras.utils.set_random_seed(options.seed)
  start = None

  def build(strategy):
    legacy = legacy_lib.LegacyRunner(pair.model_fn, params,
                                     options.global_batch)
    legacy.set_weights(start or legacy.weights())
    runner = port_runner.PortRunner(port, strategy, data_dir,
                                    options.global_batch,
                                    options.learning_rate)
    return legacy, runner

  with port_runner.dropout_disabled():
    for label, strategy in strategies.items():
      single = strategy.num_replicas_in_sync == 1
      try:
        legacy, runner = build(strategy)
      except Exception as e:  # pylint: disable=broad-except
        rec.error(['inventory'] if single else
                  [n for n in rec.planned if n.endswith(f'({label})')],
                  f'building the {label} run raised: {one_line(e)}')
        if single:
          rec.stopped = 'the single-replica run could not be built'
          return rec.results()
        continue
      if single:
        start = legacy.weights()
        if not rec.run('inventory', lambda: checks.inventory(
            legacy.weights(), runner.weights())).passed:
          rec.stopped = 'inventory failed: the weights cannot be aligned'
          return rec.results()
        runner.set_weights(start)
        _single_replica_checks(rec, pair, legacy, runner, batches, source,
                               workdir, options)
      else:
        runner.set_weights(start)
        _run_trajectory(rec, label, legacy, runner, batches, options)
        rec.run(f'stepwise ({label})', lambda: _stepwise(
            label, *build(strategy), batches, options.steps))
  _dropout(rec, pair, port, params, data_dir, batches, start, options)
  return rec.results()


def cpu_strategies(replica_counts: list[int]
                   ) -> dict[str, tf.distribute.Strategy]:
  """{'1 replica': ..., '2 replicas': ...} over the logical CPU devices.

  ReductionToOneDevice, not collectives: strategies of several sizes over the
  same devices in one process would clash on collective group keys.
  """
  strategies = {}
  for count in replica_counts:
    devices = [f'/cpu:{i}' for i in range(count)]
    label = f'{count} replica' + ('s' if count > 1 else '')
    strategies[label] = (tf.distribute.OneDeviceStrategy(devices[0])
                         if count == 1 else tf.distribute.MirroredStrategy(
                             devices, cross_device_ops=(
                                 tf.distribute.ReductionToOneDevice())))
  return strategies


def write_report(results: list[CheckResult], path: str, figures: dict) -> str:
  """The JSON report at path, then the loss-curve PNG beside it; returns what
  it wrote, for the user. Each is written to a temporary name and renamed; a
  plot that fails costs the plot only."""
  rows = [r.to_json() for r in results]
  paths.write_json(path, {'passed': all(r.passed for r in results),
                          'checks': rows, **figures},
                   default=lambda value: value.item())
  plot_path = os.path.splitext(path)[0] + '.png'
  try:
    plot.loss_curves(rows, plot_path)
  except Exception as e:  # pylint: disable=broad-except
    return f'{path} (no plot: {one_line(e)})'
  return f'{path}, plot: {plot_path}'
