"""The equivalence harness: a legacy model_fn against its port, check by check.

``compare(pair, port, workdir, strategies, options)`` reads batches from the
user's legacy input_fn, runs the legacy model_fn on them as TPUEstimator does
on CPU and the port's own pieces (``port.Port``) under each strategy, from the
same initial state, and returns a ``checks.CheckResult`` for every check:
inventory, optimizer, inputs, inference (and where the layers part),
one_step, learning_rate, trajectory, updates (each variable's step and slot,
relative), stepwise, evaluation, served_predictions, dropout (random
numbers aligned), tpu_ready (the port's step compiled with XLA) and, if
asked, speed (the port's step timed against the legacy one). A check that
raises is an ERROR with its cause and the others still run;
``write_report`` writes the JSON report and the loss-curve PNG. The command
is ``command.py``.
"""
import dataclasses
import itertools
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from kit_core import atomic
from kit_core import keras_compat
from kit_core.errors import one_line
from migration_tools import legacy as legacy_lib
from migration_tools import optimizers
from migration_tools import outputs
from migration_tools import port as port_lib
from migration_tools import runners
from migration_tools import serving
from migration_tools import variable_map
from migration_tools.compare import checks
from migration_tools.compare import golden
from migration_tools.compare import layers
from migration_tools.compare import plot
from migration_tools.compare import port_runner
from migration_tools.compare import speed as speed_lib
from migration_tools.compare import tpu_ready as tpu_ready_lib
from migration_tools.compare import updates
from migration_tools.compare.checks import CheckResult

# The two sides, as the checks below ask them (runners.py declares them).
Legacy = runners.LegacySide
Port = runners.PortSide

@dataclasses.dataclass(frozen=True)
class Options:
  """The training compared.

  steps: training steps (the input_fn's batches again from the first if it
    has fewer).
  global_batch: params['batch_size'].
  eval_batches: batches the evaluation check reads, at most.
  params: the user's params for input_fn and model_fn (TPUEstimator's
    params=...); batch_size and use_tpu are added as TPUEstimator adds them.
  seed: the initial weights' seed.
  warm_start_from: the checkpoint TPUEstimator(warm_start_from=...) got;
    the legacy TRAIN graph starts from it (its trainable variables), and
    the port from the legacy start.
  """
  steps: int = 100
  global_batch: int = 64
  eval_batches: int = 20
  params: dict = dataclasses.field(default_factory=dict)
  seed: int = 0
  warm_start_from: str = ''


@dataclasses.dataclass(frozen=True)
class LegacyPair:
  """The legacy code the port is compared with.

  model_fn: the (TPU)Estimator model_fn.
  input_fn: yields (features, labels), or features, in a fixed order (no
    shuffling), batched by params['batch_size'].
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


def planned_checks(labels: list[str], serving: bool,
                   tpu_ready: bool = True, speed: bool = False) -> list[str]:
  """The checks compare() runs, in order, for these replica labels."""
  names = ['inventory', 'optimizer', 'inputs', 'inference']
  for index, label in enumerate(labels):
    names += [f'inputs ({label})'] if index else []
    names += [f'one_step ({label})', f'learning_rate ({label})',
              f'trajectory ({label})']
    if index == 0:
      names += ['evaluation'] + (['served_predictions'] if serving else [])
    names += [f'updates ({label})', f'stepwise ({label})']
  names += ['dropout (1 replica)'] + (['tpu_ready'] if tpu_ready else [])
  return names + ([f'speed ({label})' for label in labels] if speed else [])


class LiveSource:
  """The legacy side run live (TF 2.15): its input_fn's batches and a
  LegacyRunner per run, each answer also written to tape if one is given."""

  def __init__(self, pair: LegacyPair, options: Options,
               tape: golden.Tape | None = None):
    self.pair, self.options, self.tape = pair, options, tape
    self.serving_input_fn = pair.serving_input_fn

  def data(self) -> runners.Data:
    data = legacy_lib.read_input_fn(
        self.pair.input_fn, self.options.params, self.options.global_batch,
        max(self.options.steps, self.options.eval_batches))
    self._spec, self.batches = data.spec, data.batches
    return data

  def runner(self, shards: int, purpose: str):
    runner = legacy_lib.LegacyRunner(
        self.pair.model_fn, self.options.params, self._spec,
        self.options.global_batch, shards, self.options.warm_start_from)
    if self.tape is None:
      return runner
    return golden.RecordingRunner(runner, self.tape, purpose)

  def timing_runner(self) -> legacy_lib.LegacyRunner:
    """A single-device legacy run, never recorded: timing is no answer a
    bundle keeps."""
    return legacy_lib.LegacyRunner(
        self.pair.model_fn, self.options.params, self._spec,
        self.options.global_batch, 1, self.options.warm_start_from)


class ReplaySource:
  """The legacy side answered from a golden bundle, on any TensorFlow."""

  def __init__(self, bundle: golden.Bundle):
    self.bundle = bundle
    # Only passed back to the replayed runner, which ignores it.
    self.serving_input_fn = 'recorded' if bundle.serving else None

  def data(self) -> runners.Data:
    return runners.Data(None, self.bundle.batches)

  def runner(self, shards: int, purpose: str):
    del shards  # Recorded with the run.
    return golden.ReplayedRunner(self.bundle.tape, purpose)

  def timing_runner(self) -> None:
    return None  # A bundle's legacy side is not run.


@dataclasses.dataclass
class _Run:
  """What every stage shares: the data, the params and the initial state."""
  source: runners.LegacySource
  port: port_lib.Port
  data: runners.Data
  batches: list
  options: Options
  pairs: dict = dataclasses.field(default_factory=dict)
  start: dict | None = None
  # {legacy slot suffix: port token}, for an optimizer read by what it does.
  slot_map: dict | None = None
  # Where the layers' outputs part (compare/layers), '' if they do not.
  parting: str = ''

  def legacy(self, purpose: str, shards: int = 1):
    legacy = self.source.runner(shards, purpose)
    if self.start is not None:
      legacy.set_state(self.start)
    return legacy

  def port_runner(self, strategy) -> port_runner.PortRunner:
    runner = port_runner.PortRunner(
        self.port, strategy, legacy_lib.model_params(
            self.options.params, self.options.global_batch), self.batches)
    if self.pairs:
      runner.use_map(self.pairs)
      runner.set_state(self.start)
    if self.slot_map is not None:
      runner.use_slot_map(self.slot_map)
    return runner


def _slots_compared(legacy: Legacy, runner: Port) -> bool:
  theirs = legacy.describe_optimizer()
  if theirs is None:  # Read by what it does: through the slot map.
    return bool(runner.slot_map)
  return theirs.kind == runner.describe_optimizer().kind


def _optimizer(legacy: Legacy, runner: Port, run: _Run) -> CheckResult:
  """The optimizer check; for one the kit does not read by its ops, the
  slot map its updates and slots are compared through."""
  theirs = legacy.describe_optimizer()
  if theirs is not None:
    return checks.optimizer(theirs, runner.describe_optimizer())
  slot_map = optimizers.resolve_slot_map(
      optimizers.slot_tokens(legacy.slots()), runner.slot_tokens(),
      run.port.slot_map)
  run.slot_map = slot_map.pairs
  runner.use_slot_map(slot_map.pairs)
  return checks.optimizer_by_behaviour(
      legacy.describe_run(), runner.describe_optimizer(), slot_map)


def _one_step_check(name: str, legacy: Legacy, runner: Port, theirs,
                    ours) -> CheckResult:
  """one_step, saying how the legacy step was taken: as on TPU cores, or
  (and why) on the whole batch."""
  both = _slots_compared(legacy, runner)
  result = checks.one_step(
      name, theirs, ours, legacy.state(), runner.state(),
      runner.strategy.num_replicas_in_sync,
      legacy.slots() if both else None,
      runner.slots(ours['learning_rate']) if both else None)
  reference = legacy.describe_run()['reference']
  result.figures['legacy_reference'] = reference
  if runner.strategy.num_replicas_in_sync > 1 and 'not as on' in reference:
    result.message += ('; ' if result.message else '') + (
        f'the legacy step was taken {reference}')
  return result


def _run_trajectory(rec: Recorder, label: str, legacy: Legacy, runner: Port,
                    run: _Run) -> None:
  """one_step, learning_rate and trajectory on one strategy."""
  theirs, ours = [], []

  def first_step():
    theirs.append(legacy.step(*run.batches[0]))
    ours.append(runner.step())
    return _one_step_check(f'one_step ({label})', legacy, runner, theirs[0],
                           ours[0])

  result = rec.run(f'one_step ({label})', first_step)
  # Exact: the step left gradients, weights, statistics and slots equal to
  # the bit (a loss averaged in another order may still differ by an ulp).
  exact = result.status != checks.ERROR and all(
      result.figures.get(k) == 0 for k in (
          'gradient_diff', 'updated_weights_diff', 'other_state_diff')) and (
              result.figures.get('slots_diff') in (0, None))  # None: none.
  names = [f'learning_rate ({label})', f'trajectory ({label})']
  if not ours:
    rec.error(names, 'the first step raised (see one_step)')
    return
  try:
    for features, labels in run.batches[1:]:
      theirs.append(legacy.step(features, labels))
      ours.append(runner.step())
  except Exception as e:  # pylint: disable=broad-except
    rec.error(names, f'step {len(ours) + 1} raised: {one_line(e)}')
    return
  rec.run(names[0], lambda: checks.learning_rate(
      names[0], [t.get('learning_rate', np.nan) for t in theirs],
      [o['learning_rate'] for o in ours],
      legacy.describe_run()['rate_source']))
  rec.run(names[1], lambda: checks.trajectory(
      names[1], [t['loss'] for t in theirs], [o['loss'] for o in ours],
      legacy.state(), runner.state(),
      # Judged step by step when the steps replay exactly: a first step equal
      # to the bit, against a reference that groups its sums as the
      # replicas do. Else rounding grows chaotically (see tolerances) and
      # stepwise judges every step.
      judge_each_step=exact and (
          legacy.shards == runner.strategy.num_replicas_in_sync),
      global_steps=(legacy.global_step(), runner.global_step())))


@dataclasses.dataclass
class _Resynced:
  """Every step of the legacy trajectory at identical state.

  per_step: each step's max difference (loss, state, slots).
  losses: the legacy losses.
  steps: what each step did to each variable and slot (updates.Step).
  """
  per_step: np.ndarray
  losses: list[float]
  steps: list


def _resynced_steps(legacy: Legacy, runner: Port, run: _Run,
                    dropout: bool = False) -> _Resynced:
  """Every step of the legacy trajectory at identical state: before each
  step the port takes the legacy state (weights, slots, step), so no
  difference can grow.

  Args:
    dropout: take the port's step as its trainer does, all of it in its step
      function (the loss its metric records), for a dropout mask drawn once.
  """
  per_step, losses, steps, rate = [], [], [], 0.0
  trainable = set()
  both = _slots_compared(legacy, runner)
  for number, (features, labels) in enumerate(run.batches, 1):
    before = legacy.state()
    runner.set_state(before)
    runner.set_global_step(legacy.global_step())
    if both and rate:
      runner.set_slots(legacy.slots(), rate)
    theirs = legacy.step(features, labels)
    ours = runner.train_loss() if dropout else runner.step()['loss']
    rate = runner.learning_rate()
    after = legacy.state()
    diffs = [outputs.output_diff(np.float64(theirs['loss']),
                                 np.float64(ours)),
             checks.max_diff(after, runner.state())[0]]
    legacy_slots = legacy.slots() if both else {}
    port_slots = runner.slots(rate) if legacy_slots else {}
    if legacy_slots:
      diffs.append(checks.max_diff(legacy_slots, port_slots)[0])
    per_step.append(max(diffs))
    losses.append(float(theirs['loss']))
    # The optimizer's variables: a run's first step answers with their
    # gradients (state moved otherwise, e.g. batch-norm statistics, stepwise
    # holds).
    trainable = trainable or set(theirs.get('gradients', ()))
    ours_after = runner.state()
    steps.append(updates.step(
        number, before, {k: after[k] for k in trainable},
        {k: ours_after[k] for k in trainable}, legacy_slots, port_slots,
        theirs.get('learning_rate')))
  return _Resynced(np.array(per_step), losses, steps)


def _stepwise_and_updates(rec: Recorder, label: str, shards: int,
                          strategy: tf.distribute.Strategy,
                          run: _Run) -> None:
  """stepwise and updates from one pass over the legacy trajectory, on a
  fresh legacy run and port."""
  names = [f'stepwise ({label})', f'updates ({label})']
  resynced = []

  def stepwise():
    legacy = run.legacy(names[0], shards)
    resynced.append(_resynced_steps(legacy, run.port_runner(strategy), run))
    return checks.stepwise(names[0], resynced[0].per_step)

  rec.run(names[0], stepwise)
  if not resynced:
    rec.error(names[1:], 'the stepwise pass raised (see stepwise)')
    return
  rec.run(names[1], lambda: updates.check(names[1], resynced[0].steps,
                                          run.parting))


def _evaluate(legacy: Legacy, runner: Port, run: _Run) -> CheckResult:
  batches = run.data.batches[:run.options.eval_batches]
  runner.set_state(legacy.state())
  return checks.evaluation(legacy.evaluate(batches), runner.evaluate(batches),
                           run.port.metric_map,
                           len(batches) * run.options.global_batch)


def _served_predictions(legacy: Legacy, runner: Port, run: _Run, workdir: str
                        ) -> CheckResult:
  """Both SavedModels, loaded back, on the same receiver inputs."""
  serving_input_fn = run.source.serving_input_fn
  inputs = serving.inputs(legacy.receiver_spec(serving_input_fn), run.data,
                          run.options.seed)
  runner.set_state(legacy.state())
  # The port first: the legacy export leaves the port's Keras model unusable.
  ours = runner.export(os.path.join(workdir, 'port'))
  theirs = legacy.serve(serving_input_fn, workdir, inputs)
  result = checks.served_predictions(theirs, serving.serve(ours, inputs),
                                     run.port.output_map)
  result.figures['inputs'] = {k: [*v.shape] for k, v in inputs.items()}
  return result


def _dropout(rec: Recorder, run: _Run) -> None:
  """Every step with dropout on, at identical state, random numbers aligned.

  Both graphs are built inside one DeterministicRandomTestTool scope
  ('constant' mode), which gives every stateful random op the same seeds: the
  legacy graph's dropout op and the port's, in its tf.function, then draw the
  same mask at the same step (one draw per step on each side; giving the
  port the legacy state between steps moves no random state).
  """
  def check() -> CheckResult:
    if keras_compat.is_keras3():
      return CheckResult(
          'dropout (1 replica)', checks.SKIPPED,
          'Keras 3 draws dropout masks from its own seed generator, which '
          'cannot be aligned with TF 1\'s random ops; dropout is compared on '
          'Keras 2 (TF 2.15) only')
    tool = tf.compat.v1.keras.utils.DeterministicRandomTestTool()
    with tool.scope():
      legacy = run.legacy('dropout (1 replica)')
      runner = run.port_runner(tf.distribute.OneDeviceStrategy('/cpu:0'))
      resynced = _resynced_steps(legacy, runner, run, dropout=True)
    result = checks.stepwise('dropout (1 replica)', resynced.per_step)
    result.figures['legacy_losses'] = resynced.losses
    if not result.passed:
      result.message = (
          f'with dropout on (random numbers aligned) step '
          f'{result.figures["first_step_over_tolerance"]} differs by '
          f'{result.max_abs_diff:.3g} at identical state; if stepwise and '
          'one_step pass, dropout is the difference: compare the dropout '
          'rate and where the dropout layer sits. (Masks align only when '
          'both draw them with stateful random ops, as tf.compat.v1.layers '
          'and Keras 2.15 layers do by default.)')
    return result
  rec.run('dropout (1 replica)', check)


def _inference(legacy: Legacy, runner: Port, run: _Run) -> CheckResult:
  """The outputs at identical state, and each layer's (compare/layers):
  where inside the model the two sides part, if they do."""
  features = run.data.batches[0][0]
  result = checks.inference(legacy.predict(features), runner.predict(features),
                            run.port.output_map)
  figures = layers.compare(legacy.layer_outputs(features),
                           runner.layer_outputs(features),
                           layers.pairs(run.pairs))
  result.figures['layers'] = figures
  run.parting = layers.parting_text(figures)
  if run.parting:
    result.message += ('; ' if result.message else 'the outputs agree within '
                       'the bar, but inside the model ') + run.parting
  return result


def _single_replica_checks(rec: Recorder, legacy: Legacy, runner: Port,
                           run: _Run, workdir: str) -> None:
  """optimizer, inputs, inference, the 1-replica training checks,
  evaluation, serving."""
  rec.run('optimizer', lambda: _optimizer(legacy, runner, run))
  rec.run('inputs', lambda: checks.inputs(run.data.batches[0],
                                          runner.first_pipeline_batch()))
  rec.run('inference', lambda: _inference(legacy, runner, run))
  _run_trajectory(rec, '1 replica', legacy, runner, run)
  # Here, before another legacy graph makes this port model unusable.
  rec.run('evaluation', lambda: _evaluate(legacy, runner, run))
  if 'served_predictions' in rec.planned:
    rec.run('served_predictions', lambda: _served_predictions(
        legacy, runner, run, workdir))
  # Last: its legacy graph leaves this port model unusable.
  _stepwise_and_updates(rec, '1 replica', 1, runner.strategy, run)


def _inventory(rec: Recorder, run: _Run, legacy: Legacy, runner: Port) -> bool:
  """Pairs the variables (given or inferred map) and checks them; False if
  they cannot be aligned."""
  def check():
    theirs = legacy.state()
    resolved = variable_map.resolve(
        {k: v.shape for k, v in theirs.items()}, runner.shapes(),
        run.port.variable_map)
    runner.use_map(resolved.pairs)
    result = checks.inventory(theirs, runner.state())
    result.figures['paired_by_order'] = resolved.by_order()
    warm = legacy.describe_run()['warm_start']
    result.figures['warm_start'] = warm
    if warm and result.passed:
      result.message = 'both sides start from the legacy warm start: ' + (
          ', '.join(f'{path} ({count} variables)'
                    for path, count in warm.items()))
    if result.passed:
      run.pairs, run.start = resolved.pairs, theirs
      runner.set_state(theirs)
    return result
  return rec.run('inventory', check).passed


def compare(pair: LegacyPair, port: port_lib.Port, workdir: str,
            strategies: dict[str, tf.distribute.Strategy],
            options: Options = Options(),
            tape: golden.Tape | None = None,
            tpu_ready: bool = True,
            speed: speed_lib.Options | None = None) -> list[CheckResult]:
  """Runs every check, the legacy side live, and returns every planned one,
  in order.

  Args:
    pair: the legacy model_fn, input_fn and serving function.
    port: the port's pieces (port.check_port has accepted it).
    workdir: where the SavedModels are written.
    strategies: {label: strategy}, the first one '1 replica'; each gets a
      trajectory against the single-replica legacy model.
    options: the training compared.
    tape: if given, every answer of the legacy side is written to it (for
      record_bundle).
    tpu_ready: also check that the port's step compiles for a TPU
      (compare/tpu_ready).
    speed: also time the port's step against the legacy one, on each
      strategy (compare/speed); None: not timed.

  Returns:
    A CheckResult per check of planned_checks(); a check that raised is an
    ERROR with its cause, one never reached is NOT_RUN with the reason.

  Raises:
    KitError: the legacy input_fn fails before any check can run.
  """
  return run_checks(LiveSource(pair, options, tape), port, workdir,
                    strategies, options, tpu_ready, speed)


def check_bundle(bundle: golden.Bundle, port: port_lib.Port, workdir: str,
                 tpu_ready: bool = True,
                 speed: speed_lib.Options | None = None
                 ) -> list[CheckResult]:
  """compare(), the legacy side answered from a golden bundle: the same
  checks on the replica counts it recorded, with its options."""
  return run_checks(ReplaySource(bundle), port, workdir,
                    cpu_strategies(bundle.replica_counts),
                    Options(**bundle.options), tpu_ready, speed)


def record_bundle(pair: LegacyPair, port: port_lib.Port, workdir: str,
                  replica_counts: list[int], options: Options,
                  tpu_ready: bool = True,
                  speed: speed_lib.Options | None = None
                  ) -> tuple[list[CheckResult], golden.Bundle]:
  """compare() on these replica counts, recording the legacy side; returns
  the results and the bundle (golden.save writes it)."""
  tape = golden.Tape()
  source = LiveSource(pair, options, tape)
  results = run_checks(source, port, workdir, cpu_strategies(replica_counts),
                       options, tpu_ready, speed)
  bundle = golden.Bundle(
      dataclasses.asdict(options), list(replica_counts),
      pair.serving_input_fn is not None and port.export is not None,
      source.batches, tape, {'tensorflow': tf.__version__,
                             'format': golden.FORMAT})
  return results, bundle


def run_checks(source: runners.LegacySource, port: port_lib.Port,
               workdir: str, strategies: dict[str, tf.distribute.Strategy],
               options: Options, tpu_ready: bool = True,
               speed: speed_lib.Options | None = None) -> list[CheckResult]:
  """compare() on a legacy source, live or replayed."""
  serving = source.serving_input_fn is not None and port.export is not None
  rec = Recorder(planned_checks(list(strategies), serving, tpu_ready,
                                speed is not None))
  data = source.data()
  run = _Run(source, port, data, legacy_lib.cycled(data, options.steps),
             options)
  tf.keras.utils.set_random_seed(options.seed)
  with port_runner.dropout_disabled():
    for label, strategy in strategies.items():
      single = strategy.num_replicas_in_sync == 1
      replicas = strategy.num_replicas_in_sync
      try:
        legacy = run.legacy(label, replicas)
        runner = run.port_runner(strategy)
      except Exception as e:  # pylint: disable=broad-except
        rec.error(['inventory'] if single else
                  [n for n in rec.planned if n.endswith(f'({label})')],
                  f'building the {label} run raised: {one_line(e)}')
        if single:
          rec.stopped = 'the single-replica run could not be built'
          return rec.results()
        continue
      if single:
        if not _inventory(rec, run, legacy, runner):
          rec.stopped = 'inventory failed: the state cannot be aligned'
          return rec.results()
        _single_replica_checks(rec, legacy, runner, run, workdir)
      else:
        # The port's own pipeline on this many replicas (e.g. a per-replica
        # batch that is the global one shows only here).
        rec.run(f'inputs ({label})', lambda: checks.inputs(
            run.data.batches[0], runner.first_pipeline_batch()))
        _run_trajectory(rec, label, legacy, runner, run)
        _stepwise_and_updates(rec, label, replicas, strategy, run)
  _dropout(rec, run)
  if tpu_ready:  # Last, with dropout on, as the step runs on a TPU.
    rec.run('tpu_ready', lambda: tpu_ready_lib.check(
        port, legacy_lib.model_params(options.params, options.global_batch),
        run.batches))
  if speed is not None:
    _speed(rec, run, strategies, speed)
  return _with_parting(rec.results(), run.parting)


def _speed(rec: Recorder, run: _Run,
           strategies: dict[str, tf.distribute.Strategy],
           options: speed_lib.Options) -> None:
  """The legacy step timed and profiled once (live only), then the port's
  on each strategy: speed (label) for each."""
  steps = options.window_steps
  examples = steps * run.options.global_batch
  names = [f'speed ({label})' for label in strategies]
  legacy_rate = legacy_kernels = None
  try:
    legacy = run.source.timing_runner()
    if legacy is not None:
      if run.start is not None:
        legacy.set_state(run.start)
      batches = itertools.cycle(run.batches)

      def legacy_window():
        for _ in range(steps):
          legacy.train_only(*next(batches))
      legacy_rate = speed_lib.timed(legacy_window, examples, options.windows)
      legacy_kernels = speed_lib.kernels(legacy_window, steps)
  except Exception as e:  # pylint: disable=broad-except
    rec.error(names, f'timing the legacy step raised: {one_line(e)}')
    return
  for name, strategy in zip(names, strategies.values()):
    def check(name=name, strategy=strategy):
      runner = run.port_runner(strategy)
      window = lambda: runner.train_window(steps)
      port = speed_lib.timed(window, examples, options.windows)
      table = None if legacy_kernels is None else speed_lib.kernel_table(
          legacy_kernels, speed_lib.kernels(window, steps))
      return speed_lib.check(name, legacy_rate, port, table)
    rec.run(name, check)


def _with_parting(results: list[CheckResult], parting: str
                  ) -> list[CheckResult]:
  """Failed step checks also say where inside the model the two sides part
  (inference found it), which tells which lines of the model_fn to read."""
  for result in results:
    if (parting and result.status == checks.FAILED and
        result.name.startswith(('one_step', 'stepwise')) and
        parting not in result.message):
      result.message += f'; inside the model, {parting} (see inference)'
  return results


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
  atomic.write_json(path, {'passed': not any(r.failed for r in results),
                          'checks': rows, **figures},
                   default=lambda value: value.item())
  plot_path = os.path.splitext(path)[0] + '.png'
  try:
    plot.loss_curves(rows, plot_path)
  except Exception as e:  # pylint: disable=broad-except
    return f'{path} (no plot: {one_line(e)})'
  return f'{path}, plot: {plot_path}'
