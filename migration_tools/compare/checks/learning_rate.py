"""learning_rate: the rate each side applied at every step of the run that
one_step began.
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import NOT_RUN

# The bar: the rate within atol + rtol x the legacy rate, at every step.
BAR = Bar(atol=tolerances.LEARNING_RATE_ATOL,
          rtol=tolerances.LEARNING_RATE_RTOL, scale='the legacy rate')


def judge(name: str, theirs: list[float], ours: list[float],
          legacy_source: str = '', bar: Bar = BAR) -> CheckResult:
  """The rate each side applied at every step.

  Args:
    theirs: the legacy rates, NaN where they cannot be read.
    legacy_source: where the legacy rate is read, or why it cannot be.
  """
  if any(np.isnan(theirs)):
    return CheckResult(name, NOT_RUN, 'the legacy learning rate cannot be '
                       f'read ({legacy_source}); the updates checks judge the '
                       'rate through each step\'s size',
                       figures={'port': ours[-1]})
  diffs = outputs.elementwise_diff(theirs, ours)
  bars = bar.atol + bar.rtol * np.abs(np.asarray(theirs, np.float64))
  over = np.flatnonzero(diffs > bars)
  first = int(over[0]) + 1 if over.size else None
  at = (first or 1) - 1
  # Judged at the first step over its bar, else by the largest difference
  # against the largest bar.
  value = float(diffs[at] if first else diffs.max())
  return judged(name, value, float(bars[at] if first else bars.max()),
                {'legacy': theirs[-1], 'port': ours[-1],
                 'first_step_over_tolerance': first},
                f'the learning rates part at step {first} ({theirs[at]:.6g} '
                f'vs {ours[at]:.6g}): ' + rate_cause(theirs[at], ours[at]))


def rate_cause(theirs: float, ours: float) -> str:
  if theirs == 0 and ours:
    return ('the legacy rate is 0 there, as a warmup from 0 starts: compare '
            'the port\'s warmup (its length, and that it has one)')
  return ('the schedule must read a step that advances once per global batch '
          '(not per replica, not per epoch), and have the legacy shape (its '
          'warmup, decay steps and end rate)')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  theirs, ours = replicas.memo.once(
      'trajectory', lambda: passes.trajectory(run, replicas))
  return judge(
      f'learning_rate ({replicas.label})',
      [t.get('learning_rate', np.nan) for t in theirs],
      [o['learning_rate'] for o in ours],
      replicas.describe()['rate_source'])


CHECK = Check(
    'learning_rate', 'the rate each side applied, every step', EACH,
    drive, needs=('legacy.step', 'legacy.describe_run', 'port.step'),
    bar=BAR)
