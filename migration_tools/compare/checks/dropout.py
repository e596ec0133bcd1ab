"""dropout: every step with dropout on, at identical state, the random
numbers aligned.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.checks import stepwise as stepwise_check
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import AFTER
from migration_tools.compare.registry import Check
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import SKIPPED
from migration_tools.pair import masks as masks_lib
from migration_tools.pair import recorded

# The bar: each step with dropout on within an absolute bar (stepwise's
# judge) beyond the port's own noise, as stepwise's: measured by one_step
# on one replica with dropout off (a reordered batch would move the masks)
# and held for every step.
BAR = Bar(atol=tolerances.ONE_STEP_ATOL, noise='beyond')
# Why no noise scales the bar, where none does.
_NO_NOISE = 'one_step measured none on one replica; the fixed bar holds'


def judge(name: str, per_step: np.ndarray, losses: list[float],
          draws: list[str] | None = None, handed: bool = False,
          noise: noise_lib.Noise | None = None) -> CheckResult:
  """Every step with dropout on, at identical state, the random numbers
  aligned (or the legacy masks handed): stepwise's figures, and a hint that
  names dropout. draws: the legacy step's random ops (the report's
  coverage); noise: the port's own noise without dropout (one_step's),
  which per_step's differences are already beyond."""
  result = stepwise_check.judge(name, per_step, bar=BAR)
  figures = {**result.figures, 'legacy_losses': losses,
             'legacy_draws': list(draws or []),
             'noise': noise_lib.figures(noise, _NO_NOISE)}
  if noise is not None and noise.widest()[0]:
    # The bar as applied: the fixed one, beyond each tensor's own noise.
    figures['noise_allowance'] = noise.applied()
  if result.passed:
    return dataclasses.replace(result, figures=figures)
  how = ('the legacy step\'s masks handed to the port\'s dropout calls'
         if handed else 'random numbers aligned')
  return dataclasses.replace(
      result, figures=figures, message=(
          f'with dropout on ({how}) step '
          f'{figures["first_step_over_tolerance"]} differs by '
          f'{result.max_abs_diff:.3g} at identical state; if stepwise and '
          'one_step pass, dropout is the difference: compare the dropout '
          'rate and where the dropout layer sits.' + ('' if handed else (
              ' (Masks align only when both draw them with stateful random '
              'ops, as tf.compat.v1.layers and Keras 2.15 layers do by '
              'default.)'))))


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
  if run.framework.takes_masks:
    return _with_the_legacy_masks(run, name)
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
    resynced = passes.resynced_steps(run, legacy, runner, name, dropout=True,
                                     held_noise=_held(run, one))
    drawing = _drawing_at_inference(run, runner, name, {
        'legacy_draws': draws or []})
  return drawing or judge(name, resynced.per_step, resynced.losses, draws,
                          noise=resynced.allowed)


# How the masks were drawn, in the report (figures 'masks').
_HANDED = 'the legacy step\'s, handed to the port\'s dropout calls'


def _with_the_legacy_masks(run: Run, name: str) -> CheckResult:
  """Every step with dropout on, the port's dropout calls given the
  legacy step's masks in order (Framework.masks_given); then the port's
  predictions with its dropout built on, which must draw nothing."""
  one = run.framework.placements([1], run.progress, {})
  legacy = run.legacy(name, draws=True, gradients=False)
  described = _described(legacy)
  draws = described.get('draws')
  if draws is None or 'mask_ops' not in described:
    return CheckResult(name, NOT_RUN, 'the bundle was recorded before the kit '
                       'recorded the legacy step\'s dropout masks: record it '
                       'again to compare dropout on this framework')
  runner = run.port_runner(next(iter(one.values())), dropout=True)
  mask_ops = described['mask_ops']
  try:
    resynced = passes.resynced_steps(
        run, legacy, runner, name, dropout=True,
        given=lambda theirs: run.framework.masks_given(
            theirs.get('masks', []), mask_ops), held_noise=_held(run, one))
  except masks_lib.DropoutMismatch as e:
    return CheckResult(name, FAILED, str(e),
                       figures={'legacy_draws': draws, 'mask_ops': mask_ops,
                                'masks': _HANDED})
  drawing = _drawing_at_inference(run, runner, name, {
      'legacy_draws': draws, 'mask_ops': mask_ops, 'masks': _HANDED})
  if drawing:
    return drawing
  result = judge(name, resynced.per_step, resynced.losses, draws, handed=True,
                 noise=resynced.allowed)
  return dataclasses.replace(result, figures={**result.figures,
                                              'mask_ops': mask_ops,
                                              'masks': _HANDED})


def _held(run: Run, one: dict):
  """The port's own noise one_step measured on one replica (its first
  step, dropout off): the dropout steps' bars scale with it, as stepwise's
  do (a tensor of raw pixels' batch-norm statistics rounds by far more than
  1e-6); None where it was not measured."""
  return run.step_noise.get(next(iter(one)))


def _drawing_at_inference(run: Run, runner, name: str,
                          figures: dict) -> CheckResult | None:
  """FAILED where the port, built with its dropout on, draws dropout while
  it predicts (Framework.dropout_at_inference); None where it draws none."""
  with run.framework.dropout_at_inference() as drawing:
    runner.predict(run.batches[0][0])
  if not drawing:
    return None
  return CheckResult(
      name, FAILED, f'the port\'s predict draws dropout (at '
      f'{", ".join(sorted(set(drawing)))}): dropout is on at inference, '
      'where the model_fn\'s PREDICT graph has none: make each dropout '
      'follow the model\'s training mode',
      figures={**figures, 'drawing_at_inference': drawing})


def _described(legacy) -> dict:
  try:
    return legacy.describe_run()
  except recorded.NoAnswer:
    return {}


def _draws(legacy) -> list[str] | None:
  """The legacy step's random ops; None from a bundle recorded before the
  kit read them."""
  return _described(legacy).get('draws')


CHECK = Check(
    'dropout (1 replica)', 'every step with dropout **on**, at identical '
    'state: the random numbers aligned (Keras 2), or the legacy step\'s '
    'masks handed to the port\'s dropout calls in order (Keras 3, JAX, '
    'PyTorch); then its predict must draw none', AFTER, drive,
    needs=('legacy.step', 'legacy.state', 'port.set_state',
           'port.step_as_trained'),
    bar=BAR)
