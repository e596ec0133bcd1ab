"""clipping: the legacy step's gradient clipping compared where it engages.

A clip that never engages computes nothing: at a fresh initialisation
(BERT's and ALBERT's standard deviation of 0.02) the gradients' global norm
can stay below 1.0 at every recorded step, and there a port with no
clipping, or one that measures another norm, takes the same steps as the
legacy model. So this check finds a step where each clip the model_fn made
(pair/legacy_clipping.py) engaged, its norm above its threshold: a step of
the pass at identical state (updates and stepwise judged it), or else a
state made for it. That state is the start state with its kernels and
embeddings scaled up (as beyond_init scales them) to a gain of 2, 4, ... 64,
one step at each, both sides at identical state, until the legacy clip
engages; the steps there are judged as updates judges them. A clip that
engages at no such state is said, in the line and in the report's coverage:
no port's clipping was compared.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from migration_tools.compare import passes
from migration_tools.compare.checks import beyond_init
from migration_tools.compare.checks import updates
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import PASSED
from migration_tools.compare.verdict import SKIPPED
from migration_tools.pair import legacy_clipping

# The bar: updates', at the steps where the clip engaged.
BAR = updates.BAR

# The gains of the states made for a clip that the recorded steps never
# engaged, tried in order (beyond_init.scaled_start).
GAINS = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)

# Why a port clips otherwise, where the updates differ only once a clip
# engages.
CAUSES = ('no clipping in the port, clipping by another norm (e.g. an '
          'embedding\'s gradient made dense, whose rows sum their lookups '
          'where TF\'s norm counts each lookup), another threshold, or '
          'clipping after the replicas\' gradients are combined where each '
          'TPU core clipped its own')


def engaged_step(clipping: list) -> int | None:
  """The first step (from 1) at which a clip engaged; None if at no step.
  clipping: each step's [norm, threshold] per clip, or None."""
  for number, norms in enumerate(clipping, 1):
    if norms and any(legacy_clipping.engaged(norms)):
      return number
  return None


def _engaged_text(clips: list[dict], norms: list) -> str:
  """'global norm 3.2 above its threshold 1 (bert_legacy.py:244)', each."""
  return ', '.join(f'{clip["kind"]} {norm:.3g} above its threshold '
                   f'{threshold:g} ({clip["where"]})'
                   for clip, (norm, threshold) in zip(clips, norms))


def _figures(clips: list[dict], clipping: list, step: int | None,
             made: str, gain: float | None = None) -> dict:
  return {'clips': clips, 'norms_per_step': clipping, 'engaged_step': step,
          'state': made, 'gain': gain}


def judge_made(name: str, clips: list[dict], made: passes.Resynced,
               gain: float, parting: str = '') -> CheckResult:
  """The steps at the made states: those before the clip engaged must agree
  (else the difference is not the clipping), and those from where it
  engaged are judged as updates judges steps."""
  first = engaged_step(made.clipping)
  figures = _figures(clips, made.clipping, first, 'made', gain)
  if first > 1:
    before = updates.judge(name, made.steps[:first - 1], parting)
    if before.failed:
      return CheckResult(
          name, FAILED, 'at the scaled states where the legacy clip does not '
          f'engage yet, the updates already differ ({before.message}): that '
          'difference is not the clipping (see beyond_init and updates)',
          before.max_abs_diff, before.tolerance, {**figures,
                                                  **before.figures})
  result = updates.judge(name, made.steps[first - 1:], parting)
  said = (f'at a state made for it (the start state\'s kernels and '
          f'embeddings scaled up to a gain of {gain:g}), the legacy clip '
          f'engaged: {_engaged_text(clips, made.clipping[-1])}')
  figures = {**result.figures, **figures}
  if result.status == NOT_RUN:
    return dataclasses.replace(
        result, figures=figures, message=f'{said}, but no step there moved a '
        'variable (a learning rate of 0 at every step: compare more steps, '
        '--steps): the updates it clips are not judged')
  if result.failed:
    return dataclasses.replace(
        result, figures=figures, message=f'{said}, and the updates differ '
        f'there though they agree where it does not engage: the port clips '
        f'otherwise ({CAUSES}); {result.message}')
  return dataclasses.replace(result, figures=figures,
                             message=f'{said}; the updates and slots agree '
                             'there')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """Where the legacy clips engaged in the pass at identical state, says so
  (updates judged those steps); else makes a state where they engage and
  judges a step there."""
  name = f'clipping ({replicas.label})'
  clips = replicas.describe().get('clipping')
  if clips is None:
    return CheckResult(name, NOT_RUN, 'the bundle was recorded before the kit '
                       'read gradient clipping: record it again to compare it')
  if not clips:
    return CheckResult(name, SKIPPED, 'the legacy step clips no gradient '
                       '(no clip_by_global_norm or clip_by_norm call; '
                       f'{legacy_clipping.LIMITS})')
  resynced = passes.resynced(run, replicas)
  step = engaged_step(resynced.clipping)
  if step is not None:
    return CheckResult(
        name, PASSED, f'engaged at step {step} of the pass at identical '
        f'state: {_engaged_text(clips, resynced.clipping[step - 1])}; '
        'updates and stepwise judged that step',
        figures=_figures(clips, resynced.clipping, step, 'recorded'))
  return _at_a_made_state(run, replicas, name, clips)


class _Climb:
  """The gain of each made state: the next of GAINS while the legacy clip
  does not engage; the same while it engages at a rate of 0 (a warmup from
  0: the weights do not move there), until a step at a rate above 0."""

  def __init__(self, run: Run):
    self.run, self.index, self.states = run, 0, {}
    self.tried = []  # Each step's gain.
    self.weights = [n for n in run.weights
                    if np.ndim(run.start[n]) >= 2 and np.any(run.start[n])]

  @property
  def gain(self) -> float:
    return GAINS[min(self.index, len(GAINS) - 1)]

  def state(self, number: int) -> dict:
    del number  # The gain says it.
    self.tried.append(self.gain)
    if self.gain not in self.states:
      self.states = {self.gain: beyond_init.scaled_start(
          self.run.start, self.weights, self.gain)}
    return self.states[self.gain]

  def done(self, answer: dict) -> bool:
    """Whether the step answered ends the climb."""
    if not any(legacy_clipping.engaged(answer['clipping'])):
      self.index += 1
      return self.index == len(GAINS)
    return answer.get('learning_rate', 1.0) > 0


def _at_a_made_state(run: Run, replicas: Replicas, name: str,
                     clips: list[dict]) -> CheckResult:
  legacy = run.legacy(name, replicas.count, gradients=False)
  runner = replicas.port_again(run)
  climb = _Climb(run)
  # The run's batches in order, as the port's runner takes them: each step
  # of the climb takes the next.
  made = passes.resynced_steps(run, legacy, runner, name,
                               states=climb.state, until=climb.done)
  first = engaged_step(made.clipping)
  gain = climb.tried[(first or len(made.steps)) - 1]
  if first is None:
    return CheckResult(
        name, NOT_RUN, 'the legacy clip never engaged: not at the recorded '
        'steps, nor with the start state\'s kernels and embeddings scaled up '
        f'to a gain of {gain:g} in {len(made.steps)} steps (its norm at most '
        f'{max(n[0][0] for n in made.clipping):.3g}, its threshold '
        f'{made.clipping[-1][0][1]:g}): the port\'s clipping is not compared '
        f'(with --steps={len(GAINS)} or more, gains up to {GAINS[-1]:g} are '
        'tried)',
        figures=_figures(clips, made.clipping, None, 'made', gain))
  return judge_made(name, clips, made, gain, run.parting)


CHECK = Check(
    'clipping', 'each gradient clip of the model_fn (clip_by_global_norm, '
    'clip_by_norm) where it engages: at a step of the pass at identical '
    'state whose norm is above its threshold, or else one step at identical '
    'state with the start state\'s kernels and embeddings scaled up (gain 2, '
    '4, ... 64) until it does; judged as updates', EACH, drive,
    needs=('legacy.step', 'legacy.state', 'legacy.set_state',
           'legacy.slots', 'port.step', 'port.set_state', 'port.state',
           'port.slots'),
    bar=BAR,
    # Left out where the model_fn clips nothing; said NOT RUN from a bundle
    # recorded before the kit read clipping.
    applies=lambda run, replicas: replicas.describe().get('clipping') != [])
