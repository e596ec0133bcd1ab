"""stepwise: every step of the legacy trajectory as a one-step check, the
port given the legacy state before each step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import near_tie_text
from migration_tools.compare.verdict import near_ties
from migration_tools.compare.verdict import PASSED

# The bar: each step's loss and updated weights within an absolute bar,
# beyond the port's own noise (measured in the same run).
BAR = Bar(atol=tolerances.ONE_STEP_ATOL, noise='beyond')


def judge(name: str, per_step: np.ndarray,
          parting: str = '', bar: Bar = BAR) -> CheckResult:
  """Each step of the legacy trajectory as a one-step check (the port took
  the legacy weights before it): loss and updated weights per step; parting
  (inference) is said on a failure."""
  per_step = np.where(np.isnan(per_step), np.inf, per_step)
  figures = {'steps': len(per_step), 'per_step_max_diff': per_step.tolist()}
  ties = near_ties(per_step, bar.atol, tolerances.FLIP_ATOL)
  if ties:
    rest = np.delete(per_step, [t - 1 for t in ties])
    said = near_tie_text(ties, per_step, 'the loss or the updated weights',
                         'FLIP_ATOL')
    return CheckResult(name, PASSED, said, float(rest.max()),
                       bar.atol,
                       {**figures, 'near_ties': ties})
  over = np.flatnonzero(per_step > bar.atol)
  first = int(over[0]) + 1 if over.size else None
  shown = ('holds a NaN or an infinity on one side' if over.size and
           np.isinf(per_step[first - 1]) else
           f'differs by {per_step[(first or 1) - 1]:.3g}')
  hint = (f'step {first} of the legacy trajectory {shown} at identical '
          'weights: what that step computes differs (e.g. the per-replica '
          'batch, the loss scaling, the learning rate at that step)')
  if parting:
    hint += f'; inside the model, {parting} (see inference)'
  return judged(name, float(per_step.max()), bar.atol,
                {**figures, 'first_step_over_tolerance': first}, hint)

def drive(run: Run, replicas: Replicas) -> CheckResult:
  resynced = passes.resynced(run, replicas)
  result = passes.with_noise(judge(f'stepwise ({replicas.label})',
                                   resynced.per_step, run.parting), resynced)
  if resynced.allowed is None or not resynced.allowed.widest()[0]:
    return result
  # The bar as applied: the fixed one, beyond each tensor's own noise.
  return dataclasses.replace(result, figures={
      **result.figures, 'noise_allowance': resynced.allowed.applied()})


CHECK = Check(
    'stepwise', 'every step of the legacy trajectory as a one-step check, '
    'the port given the legacy state (weights, slots, step) before each '
    'step', EACH, drive,
    needs=('legacy.step', 'legacy.state', 'legacy.slots', 'port.step',
           'port.state', 'port.slots', 'legacy.averages', 'port.averages',
           'port.reordered_step'),
    bar=BAR)
