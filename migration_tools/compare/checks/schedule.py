"""schedule: the learning rate each side applies at global steps over the
whole schedule (side.SCHEDULE_STEPS, 0 to about 10 million), its schedule
read with nothing trained.

learning_rate compares the rates of the steps a comparison takes: a few,
often all inside a warmup of thousands. A decay of another length or end
(a decay over num_train_steps - warmup, as HF's
get_linear_schedule_with_warmup, where TF's polynomial_decay counts every
step from 0) parts from the legacy one only there. Both sides answer the
rate at a global step without training: the legacy rate tensor with the
global step set (LegacySide.schedule, recorded in a bundle), the port's
optimizer's schedule called at the step (PortSide.rates_at).
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare.bars import bar_text
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import SKIPPED
from migration_tools.pair import recorded

# The bar: learning_rate's at every step read, its relative part grown by
# SCHEDULE_LOG_RTOL per unit of |ln(rate / the largest rate)|: float32's pow
# far into a decay (tolerances.SCHEDULE_LOG_RTOL).
BAR = Bar(atol=tolerances.LEARNING_RATE_ATOL,
          rtol=tolerances.LEARNING_RATE_RTOL, scale='the legacy rate',
          words=f'the relative part plus '
          f'{bar_text(tolerances.SCHEDULE_LOG_RTOL)} per unit of '
          '|ln(rate / the largest rate)|')


def bars(rates) -> np.ndarray:
  """Each step's bar (BAR) on the legacy rates."""
  rates = np.abs(np.asarray(rates, np.float64))
  largest = rates.max() if rates.size and rates.max() > 0 else 1.0
  with np.errstate(divide='ignore'):
    logs = np.minimum(np.abs(np.log(rates / largest)),
                      tolerances.SCHEDULE_LOG_CAP)
  return BAR.atol + (BAR.rtol + tolerances.SCHEDULE_LOG_RTOL * logs) * rates


def shape(steps: list[int], rates: list[float]) -> str:
  """The schedule in words, by where it rises, falls and holds: 'rises to
  0.001 at step 2, falls to 0 at step 20, holds 0 from step 20'."""
  ways = np.sign(np.diff(np.asarray(rates, np.float64)))
  parts, start = [], 0
  while start < len(ways):
    end = start + 1  # The segment start..end moves one way throughout.
    while end < len(ways) and ways[end] == ways[start]:
      end += 1
    if ways[start] > 0:
      parts.append(f'rises to {rates[end]:.6g} at step {steps[end]:,}')
    elif ways[start] < 0:
      parts.append(f'falls to {rates[end]:.6g} at step {steps[end]:,}')
    else:
      parts.append(f'holds {rates[start]:.6g} from step {steps[start]:,}')
    start = end
  if len(parts) > _PIECES_SAID:  # A staircase: its ends, and the count.
    parts = parts[:3] + [f'{len(parts) - 5} more pieces'] + parts[-2:]
  return ', '.join(parts) or f'holds {rates[0]:.6g}'


# The pieces a shape says in full; past them, the first 3 and the last 2.
_PIECES_SAID = 6


_WARMUP = ('compare the warmup\'s length, where it starts and that the port '
           'has one')
_DECAY = ('compare the decay\'s length, power and end rate (TF\'s '
          'polynomial_decay counts num_train_steps from step 0, through the '
          'warmup; a decay over num_train_steps - warmup, as HF\'s '
          'get_linear_schedule_with_warmup, parts from it)')


def _cause(rates: list[float], index: int) -> str:
  """Where in the schedule the rates part, and what to compare there."""
  rate = rates[index]
  rose = index > 0 and rate > rates[index - 1]
  falls = index + 1 < len(rates) and rates[index + 1] < rate
  if rose and falls:
    return f'where the warmup ends and the decay begins: {_WARMUP}; {_DECAY}'
  if rose or (index == 0 and index + 1 < len(rates) and
              rates[index + 1] > rate):
    return f'in its warmup: {_WARMUP}'
  if index > 0 and rate < rates[index - 1]:
    return f'in its decay: {_DECAY}'
  return ('where the legacy rate holds: compare the rate before or after the '
          'schedule (TF\'s polynomial_decay holds end_learning_rate past '
          'decay_steps; a port\'s schedule may go on, or restart)')


def judge(theirs: dict, ours: list[float] | None,
          port_cannot: str = '') -> CheckResult:
  """theirs: LegacySide.schedule()'s answer ({} where the legacy rate
  cannot be read); ours: the port's rates at theirs' steps, or None where
  they cannot be read (port_cannot says why)."""
  name = 'schedule'
  if not theirs:
    return CheckResult(name, SKIPPED, 'the legacy learning rate cannot be '
                       'read at a given global step (see learning_rate)')
  steps, rates = theirs['steps'], theirs['rates']
  figures = {'steps_compared': len(steps), 'last_step': steps[-1],
             'legacy_shape': shape(steps, rates),
             'constant': len(set(rates)) == 1}
  if ours is None:
    return CheckResult(name, SKIPPED, f'the port\'s rate cannot be read at a '
                       f'given step: {port_cannot}', figures=figures)
  diffs = outputs.elementwise_diff(rates, ours)
  allowed = bars(rates)
  over = np.flatnonzero(diffs > allowed)
  at = int(over[0]) if over.size else int(np.argmax(diffs - allowed))
  if over.size:
    figures.update(first_step_over_tolerance=steps[at], legacy=rates[at],
                   port=ours[at])
  return judged(name, float(diffs[at]), float(allowed[at]), figures,
                f'the schedules part at global step {steps[at]:,} '
                f'({rates[at]:.6g} vs {ours[at]:.6g}), '
                f'{_cause(rates, at)}; the legacy schedule '
                f'{figures["legacy_shape"]}')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  try:
    theirs = run.legacy('schedule', gradients=False).schedule()
  except (recorded.NoRun, recorded.NoAnswer):
    return CheckResult('schedule', SKIPPED, 'the bundle was recorded before '
                       'the kit read the legacy schedule: record it again to '
                       'compare the schedule over its whole range')
  port = replicas.port or run.port_runner(replicas.placement)
  ours = port.rates_at(theirs['steps']) if theirs else None
  return judge(theirs, ours, run.framework.rates_unread)


CHECK = Check(
    'schedule', 'the learning rate each side applies at 114 global steps '
    'from 0 to about 10 million (every step to 20, then 15% apart), each '
    'schedule read with nothing trained: its warmup, decay and end, beyond '
    'the steps compared', ONCE, drive,
    needs=('legacy.schedule', 'port.rates_at'), bar=BAR)
