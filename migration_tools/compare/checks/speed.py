"""speed: with --speed, the port's training step timed against its
model_fn's, and where the time goes on each side.

The legacy step is taken as TPUEstimator took it off a TPU: one
``session.run(train_op)`` per step on the whole global batch, one device. The
port's is its own ``Trainer.train_steps``, ``window_steps`` steps per call
(as ``steps_per_execution`` runs them), under each strategy compared. Both
read the same batches (the legacy input_fn's, again and again) at the same
global batch. Each side runs a warm-up window (tracing, first allocations),
then ``windows`` timed windows; the rate is the median window's examples/s,
and the spread the timed windows' (max - min) / median. Then one more window
of each runs under TensorFlow's profiler (``kit_core.profile``), and the
kernels whose time per step differs most between the two sides are listed.

A port slower than ``tolerances.SPEED_MARGIN`` times the legacy rate is a
finding to look at (``REVIEW``), with that table, not a failed equivalence
check: what it computes is judged by the other checks. Rates are comparable
only within one run on one machine, so a bundle (recorded elsewhere, or
earlier) is never timed against: from a bundle the port's rate alone is
reported.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import statistics
import time
from typing import Callable

from kit_core import profile as profile_lib
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import AFTER_EACH
from migration_tools.compare.registry import Check
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import PASSED
from migration_tools.compare.verdict import REVIEW
from migration_tools.compare.verdict import SKIPPED
import tempfile

# The bar: below this share of the legacy rate, a REVIEW (no failure).
BAR = Bar(words=f'below {tolerances.SPEED_MARGIN:.0%} of the legacy rate: '
          '`REVIEW`, which fails nothing')


# Kernels shown, by how much their time per step differs.
SHOWN = 5


@dataclasses.dataclass(frozen=True)
class Options:
  """window_steps: steps per timed window (and per port train_steps call);
  windows: timed windows per side, after one warm-up window."""
  window_steps: int = 10
  windows: int = 3


def timed(run_window: Callable[[], None], examples: int, windows: int
          ) -> dict:
  """{examples_per_s, window_rates, spread} of run_window, after a warm-up
  call; examples: what one window trains on."""
  run_window()
  rates = []
  for _ in range(windows):
    start = time.perf_counter()
    run_window()
    rates.append(examples / (time.perf_counter() - start))
  median = statistics.median(rates)
  return {'examples_per_s': median, 'window_rates': rates,
          'spread': (max(rates) - min(rates)) / median}


def kernels(run_window: Callable[[], None], steps: int) -> dict[str, float]:
  """{kernel: ms per step} of one window under the profiler; a kernel is
  what ran an op (Conv2DBackpropFilter, or oneDNN's
  _MklNativeConv2DBackpropFilter), summed over the ops it ran."""
  with tempfile.TemporaryDirectory() as logdir:
    with profile_lib.profiled(logdir):
      run_window()
    rows = profile_lib.kernel_times(logdir, steps)
  totals = collections.defaultdict(float)
  for row in rows:
    totals[row['kernel']] += row['ms_per_step']
  return dict(totals)


def kernel_table(legacy: dict[str, float], port: dict[str, float],
                 shown: int = SHOWN) -> list[dict]:
  """The kernels whose ms per step differ most between the sides."""
  rows = [{'kernel': k, 'legacy_ms_per_step': legacy.get(k, 0.0),
           'port_ms_per_step': port.get(k, 0.0),
           'difference_ms': port.get(k, 0.0) - legacy.get(k, 0.0)}
          for k in set(legacy) | set(port)]
  rows.sort(key=lambda row: -abs(row['difference_ms']))
  return rows[:shown]


def _table_text(rows: list[dict]) -> str:
  return ', '.join(f'{r["kernel"]} {r["legacy_ms_per_step"]:.2f} -> '
                   f'{r["port_ms_per_step"]:.2f}' for r in rows)


def judge(name: str, legacy: dict | None, port: dict,
          table: list[dict] | None, margin: float = tolerances.SPEED_MARGIN
          ) -> CheckResult:
  """The speed result: PASSED within the margin, REVIEW below it, SKIPPED
  without a legacy timing (from a bundle).

  Args:
    name: 'speed (2 replicas)'.
    legacy, port: timed()'s figures; legacy None from a bundle.
    table: kernel_table() of the two sides' profiles, or None.
    margin: the fraction of the legacy rate below which the port is
      reported.
  """
  figures = {'port': port, 'margin': margin}
  rate = (f'{port["examples_per_s"]:.0f} examples/s (spread '
          f'{port["spread"]:.0%})')
  if legacy is None:
    return CheckResult(
        name, SKIPPED,
        f'the port trains at {rate}; the legacy step is timed live only '
        '(rates compare within one run on one machine, not against a '
        'bundle\'s)', figures=figures)
  ratio = port['examples_per_s'] / legacy['examples_per_s']
  figures.update(legacy=legacy, ratio=ratio, kernels=table or [])
  summary = (f'the port trains at {ratio:.2f}x the legacy step: {rate} '
             f'against {legacy["examples_per_s"]:.0f} (spread '
             f'{legacy["spread"]:.0%}); kernels that differ most, ms per step '
             f'legacy -> port: {_table_text(table or [])}')
  if ratio >= margin:
    return CheckResult(name, PASSED, summary, figures=figures)
  return CheckResult(
      name, REVIEW,
      f'{summary}; below {margin:.0%} of the legacy rate: look at the '
      'kernels above (a GradientTape where the model_fn took tf.gradients, '
      'a cast or layout change, a step not in a tf.function), not a '
      'difference in what it computes', figures=figures)


def _legacy_rate(run: Run, options: Options):
  """The legacy step timed and profiled once (live only): (rate, kernels),
  (None, None) from a bundle."""
  legacy = run.source.timing_runner()
  if legacy is None:
    return None, None
  if run.start is not None:
    legacy.set_state(run.start)
  batches = itertools.cycle(run.batches)

  def legacy_window():
    for _ in range(options.window_steps):
      legacy.train_only(*next(batches))
  run.progress.now('speed: timing the legacy step')
  examples = options.window_steps * run.options.global_batch
  return (timed(legacy_window, examples, options.windows),
          kernels(legacy_window, options.window_steps))


def drive(run: Run, replicas: Replicas) -> CheckResult:
  options = run.speed
  legacy_rate, legacy_kernels = run.memo.once(
      'legacy timing', lambda: _legacy_rate(run, options),
      'timing the legacy step raised (see the first speed check)')
  steps = options.window_steps
  runner = run.port_runner(replicas.placement)
  window = lambda: runner.train_window(steps)
  run.progress.now(f'speed ({replicas.label}): timing the port\'s step')
  port = timed(window, steps * run.options.global_batch,
               options.windows)
  table = None if legacy_kernels is None else kernel_table(
      legacy_kernels, kernels(window, steps))
  return judge(f'speed ({replicas.label})', legacy_rate, port,
               table)


CHECK = Check(
    'speed', 'the port\'s examples/s against the legacy step\'s, the spread '
    'of the timed windows, and the kernels whose time per step differs most '
    '(below); with `--speed`', AFTER_EACH, drive,
    needs=('legacy.train_only', 'port.train_window'),
    bar=BAR,
    planned=lambda plan: plan.speed)
