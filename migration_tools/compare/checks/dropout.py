"""dropout: every step with dropout on, at identical state, the random
numbers aligned.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import passes
from migration_tools.compare.checks import stepwise as stepwise_check
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import AFTER
from migration_tools.compare.registry import Check
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import SKIPPED
from migration_tools.pair import recorded

# The bar: each step with dropout on within an absolute bar (stepwise's
# judge, with no noise measured: the masks differ on a reordered batch).
BAR = Bar(atol=tolerances.ONE_STEP_ATOL)


def judge(name: str, per_step: np.ndarray, losses: list[float],
          draws: list[str] | None = None) -> CheckResult:
  """Every step with dropout on, at identical state, the random numbers
  aligned: stepwise's figures, and a hint that names dropout. draws: the
  legacy step's random ops (the report's coverage)."""
  result = stepwise_check.judge(name, per_step, bar=BAR)
  figures = {**result.figures, 'legacy_losses': losses,
             'legacy_draws': list(draws or [])}
  if result.passed:
    return dataclasses.replace(result, figures=figures)
  return dataclasses.replace(
      result, figures=figures, message=(
          f'with dropout on (random numbers aligned) step '
          f'{figures["first_step_over_tolerance"]} differs by '
          f'{result.max_abs_diff:.3g} at identical state; if stepwise and '
          'one_step pass, dropout is the difference: compare the dropout '
          'rate and where the dropout layer sits. (Masks align only when '
          'both draw them with stateful random ops, as tf.compat.v1.layers '
          'and Keras 2.15 layers do by default.)'))


def drive(run: Run, replicas: Replicas | None) -> CheckResult:
  """Every step with dropout on, at identical state, random numbers aligned.

  Both sides are built inside the port's framework's aligned_draws() scope
  (on Keras 2, a DeterministicRandomTestTool in 'constant' mode): the
  legacy graph's dropout op and the port's then draw the same mask at the
  same step (one draw per step on each side; giving the port the legacy
  state between steps moves no random state).
  """
  del replicas  # On one replica.
  name = 'dropout (1 replica)'
  unaligned = run.framework.dropout_unaligned()
  if unaligned:
    # What the legacy step draws, for the coverage: its run is read, not
    # stepped (from a bundle, the recording's answer).
    draws = _draws(run.legacy(name, draws=True, gradients=False))
    if draws == []:
      unaligned = ('the legacy step draws no random number (no dropout); '
                   f'the port\'s own draws are not compared: {unaligned}')
    return CheckResult(name, SKIPPED, unaligned,
                       figures={'legacy_draws': draws or []})
  one = run.framework.placements([1], run.progress, {})
  with run.framework.aligned_draws():
    legacy = run.legacy(name, draws=True, gradients=False)
    # Asked first: a run replayed on a framework that skips the steps asks
    # it so too.
    draws = _draws(legacy)
    runner = run.port_runner(next(iter(one.values())))
    resynced = passes.resynced_steps(run, legacy, runner, name, dropout=True)
  return judge(name, resynced.per_step, resynced.losses, draws)


def _draws(legacy) -> list[str] | None:
  """The legacy step's random ops; None from a bundle recorded before the
  kit read them."""
  try:
    return legacy.describe_run().get('draws')
  except recorded.NoAnswer:
    return None


CHECK = Check(
    'dropout (1 replica)', 'every step with dropout **on**, at identical '
    'state, the random numbers aligned', AFTER, drive,
    needs=('legacy.step', 'legacy.state', 'port.set_state',
           'port.step_as_trained'),
    bar=BAR)
