"""trajectory: the losses of every step of the run that one_step began, the
final state and the global step; judged when its steps replay exactly.
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
from migration_tools.compare.verdict import ERROR
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import max_diff
from migration_tools.compare.verdict import PASSED

# The bar on a free run's losses (reported, not judged: see TRAJECTORY_ATOL).
BAR = Bar(atol=tolerances.TRAJECTORY_ATOL)


def judge(name: str, theirs: list[float], ours: list[float],
          legacy_weights: dict, port_weights: dict,
          judge_each_step: bool = True,
          global_steps: tuple[int, int] | None = None,
          bar: Bar = BAR) -> CheckResult:
  """The loss of every step, and the final weights.

  Args:
    judge_each_step: hold every loss and the final weights to
      TRAJECTORY_ATOL (the reference sums as the port does). False (a
      reference that takes the whole batch at once against several
      replicas): rounding differences grow chaotically in a free run (see
      tolerances), so the run must complete with finite losses, and where it
      parts from the legacy one is reported; the stepwise check holds each
      step to the bar.
    global_steps: (the legacy global step, the port optimizer's step) at the
      end; they must be equal.
  """
  losses = outputs.elementwise_diff(theirs, ours)
  weights, worst = max_diff(legacy_weights, port_weights)
  over = np.flatnonzero(losses > bar.atol)
  first = int(over[0]) + 1 if over.size else None  # Steps count from 1.
  figures = {'steps': len(theirs), 'max_loss_diff': float(losses.max()),
             'first_step_over_tolerance': first, 'final_weights_diff': weights,
             'worst_weight': worst, 'judged_each_step': judge_each_step,
             'bit_identical': bool(losses.max() == 0 and weights == 0),
             'legacy_losses': [float(x) for x in theirs],
             'port_losses': [float(x) for x in ours],
             'global_steps': list(global_steps) if global_steps else None}
  if global_steps and global_steps[0] != global_steps[1]:
    return CheckResult(name, FAILED, f'after {len(theirs)} steps the legacy '
                       f'global step is {global_steps[0]} and the port\'s '
                       f'optimizer step {global_steps[1]}: one step must '
                       'advance it once (e.g. apply_gradients called once '
                       'per replica or per micro-batch)', float(losses.max()),
                       None, figures)
  if judge_each_step:
    return judged(name, max(float(losses.max()), weights),
                  bar.atol, figures,
                  _trajectory_hint(first, losses))
  for side, values in (('port\'s', ours), ('legacy', theirs)):
    if not np.all(np.isfinite(values)):
      return CheckResult(
          name, FAILED, f'the {side} loss is not finite at step '
          f'{int(np.flatnonzero(~np.isfinite(values))[0]) + 1}',
          float(losses.max()), None, figures)
  return CheckResult(name, PASSED, '', float(losses.max()), None, figures)


def _trajectory_hint(first: int | None, losses: np.ndarray) -> str:
  if first is None:
    return ('the losses agree but the final weights differ: the update '
            'differs where the loss does not show it (e.g. the optimizer)')
  shown = f'the losses part at step {first} (by {losses[first - 1]:.3g}' + (
      ': a NaN or an infinity on one side)' if np.isinf(losses[first - 1])
      else ')')
  if first <= 2:
    return (shown + ', before noise could grow: the steps differ (e.g. the '
            'replicas do not share the legacy global batch, or the loss is '
            'scaled otherwise)')
  return (shown + ': earlier steps agree, so something builds up step by '
          'step (e.g. optimizer state, the learning rate, the order of the '
          'data)')


def _replays_exactly(result: CheckResult | None) -> bool:
  """The first step left gradients, weights, statistics and slots equal to
  the bit (a loss averaged in another order may still differ by an ulp),
  before any of the port's measured noise is allowed."""
  return result is not None and result.status != ERROR and bool(
      result.figures.get('equal_to_the_bit'))


def drive(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = replicas.memo.once(
      'trajectory', lambda: passes.trajectory(run, replicas))
  return judge(
      f'trajectory ({replicas.label})', [t['loss'] for t in theirs],
      [o['loss'] for o in ours], legacy.state(), runner.state(),
      # Judged step by step when the steps replay exactly: a first step equal
      # to the bit, against a reference that groups its sums as the
      # replicas do. Else rounding grows chaotically (see tolerances) and
      # stepwise judges every step.
      judge_each_step=_replays_exactly(replicas.memo.get('one_step')) and (
          legacy.replicas == replicas.count),
      global_steps=(legacy.global_step(), runner.global_step()))


CHECK = Check(
    'trajectory', 'the loss of every step, the final state, the global '
    'step: judged when its steps replay exactly, else reported (below)',
    EACH, drive,
    needs=('legacy.step', 'legacy.state', 'legacy.global_step', 'port.step',
           'port.state', 'port.global_step'),
    bar=BAR)
