"""The equivalence harness: a legacy model_fn against its port, check by check.

``compare(pair, port, workdir, placements, options)`` reads batches from the
user's legacy input_fn, runs the legacy model_fn on them as TPUEstimator does
on CPU and the port's own pieces (a port any registered framework accepts:
pair/frameworks/) on each replica count, where its framework places it, from
the same initial state, and returns a ``checks.CheckResult`` for every check of
the registry (registry.py; the kit's own are in checks/, one file each), in
the order of its plan. A check that raises is an ERROR with its cause and the
others still run (unless fail_fast: the first check to fail or raise ends the
comparison, the rest NOT_RUN); a signal stops the comparison. A line goes to
``progress`` as each check ends, and while one runs at least every 30 s.
``write_report`` writes the JSON report and the loss-curve PNG. The command is ``command.py``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from typing import Any, Callable

import numpy as np


from kit_core import atomic
from kit_core import exits
from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools import provenance
from migration_tools.compare import checks
from migration_tools.compare import golden
from migration_tools.compare import plot
from migration_tools.compare import registry
from migration_tools.compare.checks import speed as speed_lib
from migration_tools.compare.checks import CheckResult
from migration_tools.compare.context import Options
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.pair import legacy as legacy_lib
from migration_tools.pair import precision
from migration_tools.pair import frameworks
from migration_tools.pair import recorded
from migration_tools.pair import runs_on
from migration_tools.pair import side

# The command's flag that stops a comparison at its first failure, as the
# NOT_RUN lines name it.
FAIL_FAST_FLAG = '--fail_fast'

__all__ = ['Options', 'LegacyPair', 'compare', 'check_bundle',
           'record_bundle', 'cpu_strategies', 'placements', 'write_report']


@dataclasses.dataclass(frozen=True)
class LegacyPair:
  """The legacy code the port is compared with.

  model_fn: the (TPU)Estimator model_fn.
  input_fn: yields (features, labels), or features, in a fixed order (no
    shuffling), batched by params['batch_size'].
  serving_input_fn: the serving_input_receiver_fn the Estimator exported
    with; None skips the served-predictions check.
  serving_inputs: (params) -> {receiver tensor: examples}, the receiver's
    inputs (e.g. JPEG bytes); None: made from the input_fn's batches.
  """
  model_fn: Callable
  input_fn: Callable
  serving_input_fn: Callable | None = None
  serving_inputs: Callable | None = None


class Recorder:
  """Runs checks, each isolated: one that raises becomes an ERROR result with
  its cause, and the next one runs (a signal is no check's error: it stops
  the comparison). As each ends, a line with its time goes to progress.
  ``results()`` lists every planned check, those never reached as NOT_RUN
  with the reason, each with its bar (bars: {name: bars.Bar}) as run.
  With fail_fast the first check that fails or raises sets ``stopped``:
  the comparison ends there (FAIL_FAST_FLAG)."""

  def __init__(self, planned: list[str],
               progress: progress_lib.Progress | None = None,
               bars: dict | None = None, fail_fast: bool = False):
    self.planned = planned
    self.progress = progress or progress_lib.Progress(None)
    self._bars = bars or {}
    self._results: dict[str, CheckResult] = {}
    self.stopped = ''
    self.fail_fast = fail_fast

  def _stop_if_failed(self, result: CheckResult) -> None:
    if self.fail_fast and result.failed and not self.stopped:
      self.stopped = (f'{FAIL_FAST_FLAG} stopped the comparison at '
                      f'{result.name}, the first check to fail; run without '
                      'it for every verdict')

  def run(self, name: str, check: Callable[[], CheckResult]
          ) -> CheckResult:
    self.progress.now(name)
    started = time.monotonic()
    try:
      result = check()
    except Interrupted:
      raise
    except recorded.NoAnswer as e:
      result = self._unanswered(name, e)
    except Exception as e:  # pylint: disable=broad-except
      # A signal TensorFlow wrapped in its own error is no finding.
      exits.raise_if_signalled()
      result = CheckResult(name, checks.ERROR, one_line(e))
    # One whose exception something swallowed stops here too.
    exits.raise_if_signalled()
    seconds = time.monotonic() - started
    # Its name as planned, and its wall time in the report (what each check
    # costs: benchmarks/scale.py reads it).
    result = dataclasses.replace(result, name=name, figures={
        **result.figures, 'seconds': seconds})
    self._results[name] = result
    self.progress.line(f'{result.summary()} '
                       f'({progress_lib.elapsed(seconds)})')
    self._stop_if_failed(result)
    return result

  def _unanswered(self, name: str, error: recorded.NoAnswer) -> CheckResult:
    """A replay with no answer: after a check that raised, the error broke
    the order the legacy answers are asked in, and the bundle is not to
    blame (it replays a correct port whole); else the bundle's line."""
    raised = [n for n, r in self._results.items() if r.status == checks.ERROR]
    if not raised:
      return CheckResult(name, checks.ERROR, one_line(error))
    return CheckResult(name, checks.NOT_RUN, (
        f'{raised[0]} raised first, which broke the '
        'order in which the bundle\'s legacy answers are asked; fix that '
        'error and run again'))

  def leave_out(self, name: str) -> None:
    """A planned check that does not apply to this pair (Check.applies)."""
    self.planned = [n for n in self.planned if n != name]

  def error(self, names: list[str], message: str) -> None:
    """Records every one of names not yet run as an ERROR with message,
    in one line for them all."""
    names = [name for name in names if name not in self._results]
    for name in names:
      self._results[name] = CheckResult(name, checks.ERROR, message)
      self._stop_if_failed(self._results[name])
    if len(names) == 1:
      self.progress.line(self._results[names[0]].summary())
    elif names:
      self.progress.line(f'ERROR {", ".join(names)}: {message}')

  def results(self) -> list[CheckResult]:
    """Every planned check's result; the first call also prints a line for
    each never reached."""
    reason = self.stopped or 'an earlier step raised (see the errors above)'
    for name in self.planned:
      if name not in self._results:
        self._results[name] = CheckResult(name, checks.NOT_RUN, reason)
        self.progress.line(self._results[name].summary())
    return [dataclasses.replace(self._results[name],
                                bar=self._bars[name].to_json())
            if name in self._bars else self._results[name]
            for name in self.planned]


def planned_checks(labels: list[str], serving: bool,
                   tpu_ready: bool = True, speed: bool = False) -> list[str]:
  """The checks compare() runs, in order, for these replica labels (read
  from the registry)."""
  return registry.names(registry.Plan(tuple(labels), serving, tpu_ready,
                                      speed))


class LiveSource:
  """The legacy side run live (TF 2.15): its input_fn's batches and a
  LegacyRunner per run, each answer also written to tape if one is given."""

  def __init__(self, pair: LegacyPair, options: Options,
               tape: recorded.Keeper | None = None):
    self.pair, self.options, self.tape = pair, options, tape
    self.serving = pair.serving_input_fn is not None
    # {(shards, draws): a run's graphs, no session}: each later run of the
    # same kind starts in sessions of its own on them (LegacyRunner.fresh).
    self._graphs: dict[tuple, legacy_lib.LegacyRunner] = {}

  def data(self) -> side.Data:
    data = legacy_lib.read_input_fn(
        self.pair.input_fn, self.options.params, self.options.global_batch,
        max(self.options.steps, self.options.eval_batches))
    self._spec, self.batches = data.spec, data.batches
    return data

  def runner(self, shards: int, purpose: str, draws: bool = False,
             gradients: bool = True):
    built = self._graphs.get((shards, draws))
    if built is not None:
      runner = built.fresh()
    else:
      runner = legacy_lib.LegacyRunner(
          self.pair.model_fn, self.options.params, self._spec,
          self.options.global_batch, shards, self.options.warm_start_from,
          self.pair.serving_input_fn, self.pair.serving_inputs, draws,
          self.options.seed)
      self._graphs[(shards, draws)] = runner.graphs_only()
    if self.tape is None:
      return runner
    return recorded.RecordingRunner(runner, self.tape, purpose, gradients)

  def timing_runner(self) -> legacy_lib.LegacyRunner:
    """A single-device legacy run, never recorded: timing is no answer a
    bundle keeps."""
    return legacy_lib.LegacyRunner(
        self.pair.model_fn, self.options.params, self._spec,
        self.options.global_batch, 1, self.options.warm_start_from,
        seed=self.options.seed)


class ReplaySource:
  """The legacy side answered from a golden bundle, on any TensorFlow."""

  def __init__(self, bundle: golden.Bundle):
    self.bundle = bundle
    self.serving = bundle.serving

  def data(self) -> side.Data:
    return side.Data(None, self.bundle.batches)

  def runner(self, shards: int, purpose: str, draws: bool = False,
             gradients: bool = True):
    del shards, draws, gradients  # Recorded with the run.
    return recorded.ReplayedRunner(self.bundle.tape, purpose)

  def timing_runner(self) -> None:
    return None  # A bundle's legacy side is not run.


def compare(pair: LegacyPair, port: Any, workdir: str,
            strategies: dict[str, Any],
            options: Options = Options(),
            tape: recorded.Keeper | None = None,
            tpu_ready: bool = True,
            speed: speed_lib.Options | None = None,
            progress: progress_lib.Progress | None = None,
            about: dict | None = None,
            dots: precision.Dots | None = None,
            fail_fast: bool = False
            ) -> list[CheckResult]:
  """Runs every check, the legacy side live, and returns every planned one,
  in order.

  Args:
    pair: the legacy model_fn, input_fn and serving function.
    port: the port's pieces (its framework's check has accepted it).
    workdir: where the SavedModels are written.
    strategies: {label: placement}, the first one '1 replica', as
      placements() gives them (a Keras port's strategy, an ArrayPort's
      replica count); each gets a trajectory against the single-replica
      legacy model.
    options: the training compared.
    tape: if given, every answer of the legacy side is written to it (for
      record_bundle).
    tpu_ready: also check that the port's step compiles for a TPU
      (its framework adapter's tpu_ready).
    speed: also time the port's step against the legacy one, on each
      strategy (compare/checks/speed.py); None: not timed.
    progress: where a line goes as each check ends, and while one runs at
      least every 30 s; None: silent.
    about: if given, gets 'port_ran_on': where the port ran (runs_on).
    dots: how the port's dots compute (its framework's precision.Dots,
      with the rounding --emulate_precision declared, for the device_drift
      check); None: the framework's own.
    fail_fast: end the comparison at the first check that fails or raises;
      the checks after it are NOT_RUN, saying so.

  Returns:
    A CheckResult per check of planned_checks(); a check that raised is an
    ERROR with its cause, one never reached is NOT_RUN with the reason.

  Raises:
    KitError: the legacy input_fn fails before any check can run.
  """
  return run_checks(LiveSource(pair, options, tape), port, workdir,
                    strategies, options, tpu_ready, speed, progress, about,
                    dots, fail_fast)


def check_bundle(bundle: golden.Bundle,
                 port: Any, workdir: str,
                 tpu_ready: bool = True,
                 speed: speed_lib.Options | None = None,
                 progress: progress_lib.Progress | None = None,
                 replica_counts: list[int] | None = None,
                 about: dict | None = None,
                 dots: precision.Dots | None = None,
                 fail_fast: bool = False
                 ) -> list[CheckResult]:
  """compare(), the legacy side answered from a golden bundle: the same
  checks on the replica counts it recorded (or those of them given), with
  its options. about, if given, gets 'port_ran_on' (runs_on) and
  'replicas_skipped' {label: why}: the counts no device here can hold.
  fail_fast: as compare()'s."""
  skipped = {}
  strategies = placements(port, replica_counts or bundle.replica_counts,
                          progress, skipped)
  if about is not None:
    about['replicas_skipped'] = skipped
  # A bundle recorded before an option was added ran without it.
  options = Options(**{'beyond_init': 0.0, **bundle.options})
  return run_checks(ReplaySource(bundle), port, workdir, strategies,
                    options, tpu_ready, speed, progress, about, dots,
                    fail_fast)


def record_bundle(pair: LegacyPair, port: Any, workdir: str,
                  replica_counts: list[int], options: Options,
                  tape: recorded.Keeper,
                  tpu_ready: bool = True,
                  speed: speed_lib.Options | None = None,
                  progress: progress_lib.Progress | None = None,
                  about: dict | None = None,
                  dots: precision.Dots | None = None
                  ) -> tuple[list[CheckResult], golden.Bundle]:
  """compare() on these replica counts, the legacy side's answers kept on
  tape (a golden.Recording writes them as they come); returns the results
  and the bundle, whose tape is tape (Recording.finish completes the file
  with it). about: as compare()'s."""
  source = LiveSource(pair, options, tape)
  results = run_checks(source, port, workdir,
                       placements(port, replica_counts, progress), options,
                       tpu_ready, speed, progress, about, dots)
  # No legacy flags: none recorded (as in bundles made before they were).
  recorded = {k: v for k, v in dataclasses.asdict(options).items()
              if k != 'legacy_flags' or v}
  bundle = golden.Bundle(
      recorded, list(replica_counts),
      pair.serving_input_fn is not None and port.export is not None,
      source.batches, tape, {'tensorflow': tf.__version__,
                             'format': golden.FORMAT, **provenance.kit()})
  return results, bundle


def run_checks(source: side.LegacySource,
               port: Any,
               workdir: str, strategies: dict[str, Any],
               options: Options, tpu_ready: bool = True,
               speed: speed_lib.Options | None = None,
               progress: progress_lib.Progress | None = None,
               about: dict | None = None,
               dots: precision.Dots | None = None,
               fail_fast: bool = False
               ) -> list[CheckResult]:
  """compare() on a legacy source, live or replayed: the registered checks
  of the plan, in order (registry.plan). strategies: {label: placement},
  placements() gives them. about, if given, gets 'port_ran_on': where the
  port ran (runs_on), once its first run is built. fail_fast: as
  compare()'s."""
  serving = source.serving and port.export is not None
  plan = registry.Plan(tuple(strategies), serving, tpu_ready,
                       speed is not None)
  steps = registry.plan(plan)
  rec = Recorder([name for _, _, name in steps], progress,
                 {name: check.bar for check, _, name in steps}, fail_fast)
  data = source.data()
  run = Run(source, port, data, legacy_lib.cycled(data, options.steps),
            options, workdir, rec.progress, speed=speed,
            placement_counts=[Replicas(label, p).count
                              for label, p in strategies.items()],
            dots=dots or frameworks.framework_of(port).dots())
  with rec.progress.heartbeat():
    if about is not None:
      about['seeded'] = _seeded(run, options.seed)
    with _deterministic(run, options.seed):
      for index, (label, strategy) in enumerate(strategies.items()):
        mine = [(c, n) for c, l, n in steps
                if l == label and c.scope in (registry.ONCE, registry.EACH)]
        if not _run_replicas(rec, run, Replicas(label, strategy), mine,
                             first=index == 0, about=about):
          return rec.results()
    # Last, with dropout on, as the step runs on a TPU.
    for check, label, name in steps:
      if rec.stopped:
        break
      if check.scope in (registry.AFTER, registry.AFTER_EACH):
        replicas = Replicas(label, strategies[label]) if label else None
        rec.run(name, lambda c=check, r=replicas: c.run(run, r))
  return rec.results()


def _seeded(run: Run, seed: int) -> dict:
  """The report's 'seeded': how both sides' starts are seeded from --seed,
  so that the same command gives the same start, and verdict, every run."""
  return {
      'seed': seed,
      'legacy': (f'every graph of the model_fn with graph seed '
                 f'{legacy_lib.graph_seed(seed)} (TensorFlow\'s default '
                 f'{legacy_lib.DEFAULT_GRAPH_SEED} + --seed); an op given a '
                 'seed of its own draws what it drew under TPUEstimator'),
      'port': (f'{run.framework.seeds_with or "not said by its framework"};'
               ' its weights, slots and averages then set to the legacy '
               'start (inventory)'),
  }


@contextlib.contextmanager
def _deterministic(run: Run, seed: int):
  """Seeded, and dropout off while the graphs are built, as the port's
  framework does it."""
  np.random.seed(seed)
  with run.framework.seeded(seed):
    yield


def _applies(check: registry.Check, run: Run, replicas: Replicas) -> bool:
  """Whether check applies (Check.applies); where asking raises (what it
  reads broke first), it runs, and its own run says why."""
  if check.applies is None:
    return True
  try:
    return bool(check.applies(run, replicas))
  except Interrupted:
    raise
  except Exception:  # pylint: disable=broad-except
    exits.raise_if_signalled()
    return True


def _run_replicas(rec: Recorder, run: Run, replicas: Replicas,
                  mine: list, first: bool, about: dict | None = None) -> bool:
  """One replica count's checks on its legacy run and port; False if the
  comparison cannot go on (a gate failed, or the first run cannot be
  built). The first says where the port runs, in a line and in about."""
  rec.progress.now(f'building the {replicas.label} run')
  try:
    replicas.legacy = run.legacy(replicas.label, replicas.count)
    replicas.port = run.port_runner(replicas.placement)
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    exits.raise_if_signalled()
    names = [n for c, n in mine if c.gate] if first else [n for _, n in mine]
    rec.error(names, f'building the {replicas.label} run raised: '
              f'{one_line(e)}')
    if first:
      rec.stopped = 'the single-replica run could not be built'
    return not rec.stopped
  if first:
    _say_where(rec, run, replicas, about)
  try:
    for check, name in mine:
      if not _applies(check, run, replicas):
        rec.leave_out(name)
        continue
      result = rec.run(name, lambda c=check: c.run(run, replicas))
      if check.gate and not result.passed:
        rec.stopped = check.gate
      if rec.stopped:
        return False
    return True
  finally:
    # Its runs hold the model and its slots a few times over (a legacy
    # graph per mode, the port): gone before the next runs are built.
    replicas.release(described=False)


def _say_where(rec: Recorder, run: Run, replicas: Replicas,
               about: dict | None) -> None:
  """The line and the report's 'port_ran_on': the platform, devices,
  versions and precision of the port's first run. Reading it never fails
  the comparison: what cannot be read is said."""
  try:
    ran_on = port_ran_on(run, replicas)
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    ran_on = {'error': one_line(e)}
    rec.progress.line(f'Ran on: not known ({one_line(e)})')
  else:
    if run.dots.emulated:
      ran_on['emulated'] = run.dots.emulated.name
    rec.progress.line(runs_on.line(ran_on))
  run.ran_on = ran_on
  if about is not None:
    about['port_ran_on'] = ran_on


def port_ran_on(run: Run, replicas: Replicas) -> dict:
  """Where the port's first run (replicas) runs, as its framework says."""
  return run.framework.ran_on(run.port, replicas.port, replicas.placement,
                              run.placement_counts, run.batches)


def placements(port: Any,
               replica_counts: list[int],
               progress: progress_lib.Progress | None = None,
               skipped: dict | None = None) -> dict[str, Any]:
  """{label: placement} for each replica count, as the port's framework
  places it (a Keras port's strategies; an ArrayPort's counts, beyond the
  accelerator's devices on host CPU devices, said in one line to progress);
  a count no device here holds is left out, in one line and in skipped
  {label: why}.

  Raises:
    KitError: no replica count can run here.
  """
  return frameworks.framework_of(port).placements(
      replica_counts, progress or progress_lib.Progress(None),
      {} if skipped is None else skipped)


def cpu_strategies(replica_counts: list[int]) -> dict[str, Any]:
  """Deprecated: placements(port, replica_counts), which asks the port's
  framework; this one gives a Keras port's strategies."""
  warnings.warn('harness.cpu_strategies is deprecated: use '
                'harness.placements(port, replica_counts), which places the '
                'replicas as the port\'s framework does', DeprecationWarning,
                stacklevel=2)
  on_tf = next(f for f in frameworks.registered() if f.on_tensorflow)
  return on_tf.placements(replica_counts, progress_lib.Progress(None), {})


# The report's schema (compare/report.schema.json): its name and version.
REPORT_SCHEMA = {'schema': 'migration-compare report', 'schema_version': 3}


def write_report(results: list[CheckResult], path: str, figures: dict) -> str:
  """The JSON report at path, then the loss-curve PNG beside it; returns what
  it wrote, for the user. Each is written to a temporary name and renamed; a
  plot that fails costs the plot only."""
  exits.raise_if_signalled()  # No report of a stopped comparison.
  rows = [r.to_json() for r in results]
  atomic.write_json(path, {**REPORT_SCHEMA,
                          'passed': not any(r.failed for r in results),
                          'checks': rows, **figures},
                   default=lambda value: value.item())
  plot_path = os.path.splitext(path)[0] + '.png'
  try:
    plot.loss_curves(rows, plot_path)
  except Exception as e:  # pylint: disable=broad-except
    return f'{path} (no plot: {one_line(e)})'
  return f'{path}, plot: {plot_path}'


def write_error_report(path: str, error: str, figures: dict) -> None:
  """The report of a comparison that could not run: passed false, no
  checks, the error's line; no plot."""
  atomic.write_json(path, {**REPORT_SCHEMA, 'passed': False, 'error': error,
                          'checks': [], **figures})
