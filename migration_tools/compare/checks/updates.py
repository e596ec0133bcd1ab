"""updates: what each optimizer step did to each variable and slot,
judged relative to the step's own size, with a hint that names the term
that differs.

The weights alone hide small bugs: a weight decay of 0.01 at a rate of 5e-5
moves a weight of 0.02 by 1e-8, far below any bar on the weights, yet it is
60 parts in a million of the step that weight took. So at every step of the
legacy trajectory, both sides starting from the same state, each variable's
update (after minus before) is compared with the legacy one, relative to its
size. Storing a weight rounds it to its last bit, so a difference within
``tolerances.UPDATE_ULPS`` units in the last place of the weight is rounding
and is not counted; what remains, over the size of the legacy update, is
held to ``tolerances.UPDATE_RTOL``. The optimizer's slots are held so too:
the gradients an optimizer receives (clipped or not, scaled or not) show
there first.

The hint reads the shape of the difference: proportional to the weights (a
weight-decay term), one common factor on every update (e.g. Adam's bias
correction), one common factor on every slot while the updates agree (the
gradients the optimizer receives: clipping, a loss scale), or a step where
one side moved and the other did not (a rate of 0, e.g. warmup).
"""
from typing import Any

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.step_record import Part
from migration_tools.compare.step_record import Step
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import near_tie_text
from migration_tools.compare.verdict import near_ties
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import PASSED

# The bar: each update and slot relative to the legacy one's size, or the
# port's own noise where larger; a value within ULPS units in the last place
# of itself is rounding.
BAR = Bar(rtol=tolerances.UPDATE_RTOL, ulps=tolerances.UPDATE_ULPS,
          noise='or')


def judge(name: str, steps: list[Step], parting: str = '',
          bar: Bar = BAR) -> CheckResult:
  """Every variable's update and every slot, relative, at every step.

  Args:
    name: the check's name.
    steps: the resynced steps.
    parting: where the layers' outputs part (layers.parting_text), for the
      hint; '' if they do not.
  """
  judged = [s for s in steps if s.moved()]
  worst = [s.worst() for s in steps]
  figures: dict[str, Any] = {
      'steps': len(steps), 'judged_steps': len(judged),
      'per_step_worst_relative': [w[1] for w in worst],
      'per_step_worst': [w[0] for w in worst],
      'ulps_ignored': bar.ulps}
  stood_still = [s for s in steps if s.port_moved_alone()]
  if stood_still:
    first = stood_still[0]
    return CheckResult(name, FAILED, _still_hint(first), float('inf'),
                       tolerances.UPDATE_RTOL, figures)
  over = [s for s in steps if s.worst()[1] > tolerances.UPDATE_RTOL]
  value = max(s.worst()[1] for s in steps)
  ties = near_ties([w[1] for w in worst], tolerances.UPDATE_RTOL,
                   tolerances.FLIP_RTOL)
  if ties and judged:
    figures['near_ties'] = ties
    rest = [w[1] for i, w in enumerate(worst) if i + 1 not in ties]
    said = near_tie_text(ties, [w[1] for w in worst], 'the updates',
                         'FLIP_RTOL')
    return CheckResult(name, PASSED, said, max(rest, default=0.0),
                       tolerances.UPDATE_RTOL, figures)
  if not over and not judged:
    # The slots agreed; no variable moved on either side.
    return CheckResult(name, NOT_RUN, 'the legacy steps moved no variable '
                       '(a learning rate of 0 at every step, e.g. all in '
                       'warmup): no update can be judged; compare more steps '
                       '(--steps)', figures=figures)
  noise = sorted(set().union(*(s.noise for s in judged)))
  figures['noise_gradient'] = noise
  if not over:
    figures['first_judged_step'] = judged[0].number
    return CheckResult(name, PASSED, _passed_text(judged[0].number, noise),
                       value, tolerances.UPDATE_RTOL, figures)
  first = over[0]
  figures['first_step_over_tolerance'] = first.number
  figures['worst_at_first'] = _worst_parts(first)
  said = hint(first)
  if parting:
    said += f'; inside the model, {parting} (see inference)'
  return CheckResult(name, FAILED, said, value, tolerances.UPDATE_RTOL,
                     figures)


def _passed_text(first_judged: int, noise: list[str]) -> str:
  """What a pass says: from which step the variables are judged (after a
  warmup from 0), and which gradients are rounding noise."""
  said = []
  if first_judged > 1:
    # A warmup from 0: say which steps could judge the update formula.
    said.append(f'the variables are judged from step {first_judged}, the '
                'first whose learning rate is above 0 (the steps before it '
                'moved no variable on either side; their slots are judged)')
  if noise:
    said.append(f'the gradients of {len(noise)} variables are rounding noise '
                f'({_names(noise)}: e.g. an attention key\'s bias, which '
                'softmax ignores), which their optimizer turns into a step of '
                'about a rate per element: those updates are held to '
                f'{tolerances.NOISE_STEP_RATES:g} rates per element')
  return '; '.join(said)


def _worst_parts(s: Step, count: int = 5) -> dict[str, dict]:
  """The parts that differ most: relative difference, the port's step
  over the legacy one, the difference as a weight-decay rate, and each
  side's update norm over the rate times the variable's (1: a trust
  ratio's)."""
  parts = s.judged()
  names = sorted(parts, key=lambda k: -parts[k].relative)[:count]
  return {k: {'relative': parts[k].relative, 'scale': parts[k].scale,
              'decay_rate': parts[k].decay,
              'legacy_norm_over_rate_norm': parts[k].legacy_norm,
              'port_norm_over_rate_norm': parts[k].port_norm} for k in names}


def _still_hint(s: Step) -> str:
  name = s.port_moved_alone()
  return (f'at step {s.number} the legacy step moved no variable (its '
          f'learning rate was {s.rate if s.rate is not None else "unread"}, '
          f'e.g. the first step of a warmup) and the port moved {name}: '
          'compare the learning-rate schedule at that step (its warmup)')


def _names(names: list[str]) -> str:
  shown = ', '.join(names[:3])
  return shown + (f' and {len(names) - 3} more' if len(names) > 3 else '')


def hint(s: Step) -> str:
  """What the first failing step's differences look like, most telling
  first."""
  bar = tolerances.UPDATE_RTOL
  broken = [(k, p) for k, p in {**s.variables, **s.slots,
                                 **s.averages}.items() if p.non_finite]
  if broken:
    name, p = broken[0]
    return (f'at step {s.number} {name} holds {p.non_finite}' + (
        f' (and {len(broken) - 1} more)' if len(broken) > 1 else '') +
            ': a NaN or an infinity is never equal (look for a division by '
            'zero, a log of 0 or an overflow on that side)')
  failing = {k: p for k, p in s.variables.items()
             if p.relative > bar and s.moved()}
  failing_slots = {k: p for k, p in s.slots.items() if p.relative > bar}
  failing_averages = {k: p for k, p in s.averages.items()
                      if p.relative > bar}
  at = f'at step {s.number}'
  if failing_averages and not failing:
    return _average_hint(at, failing_averages)
  # Before the weight-decay reading: a decay added outside a trust ratio
  # differs from the legacy update by a multiple of the weights too.
  trust = _trust_ratio_hint(at, s.variables) if failing else ''
  if trust:
    return trust
  if failing:
    return _variables_hint(at, s, failing, failing_slots)
  if failing_slots:
    return _slots_hint(at, failing_slots)
  return f'{at} the updates differ by less than each bar alone shows'


def _variables_hint(at: str, s: Step, failing: dict[str, Part],
                    failing_slots: dict[str, Part]) -> str:
  """Updates that differ: a weight-decay term, a common factor, or which
  slots agree and what that leaves."""
  if all(p.decay_fit < 0.2 for p in failing.values()):
    rates = np.array([p.decay for p in failing.values()])
    if np.all(rates > 0):
      return (f'{at} the legacy update holds a weight-decay term (rate '
              f'{np.median(rates):.2g}) that the port\'s lacks, in '
              f'{len(failing)} variables ({_names(sorted(failing))}): compare '
              'the decoupled weight decay (its rate, and that it is applied)')
    if np.all(rates < 0):
      return (f'{at} the port\'s update holds a weight-decay term (rate '
              f'{-np.median(rates):.2g}) that the legacy update lacks, in '
              f'{len(failing)} variables ({_names(sorted(failing))}): compare '
              'which variables the weight decay skips (e.g. LayerNorm and '
              'bias)')
  common = _common_scale([p.scale for p in failing.values()])
  if common is not None:
    return (f'{at} the updates of {len(failing)} variables are about '
            f'{common:.3g}x the legacy ones at the same learning rate: the '
            'optimizer scales its step otherwise (e.g. Adam\'s bias '
            'correction, which TF 1 AdamOptimizer applies and BERT\'s '
            'AdamWeightDecayOptimizer does not, or another epsilon)')
  worst = max(failing, key=lambda k: failing[k].relative)
  shown = (f'the update of {worst} differs by '
           f'{failing[worst].relative:.3g} of its size (and '
           f'{len(failing) - 1} more variables)')
  agreeing = sorted({k.rsplit('/', 1)[-1] for k in s.slots} -
                    {k.rsplit('/', 1)[-1] for k in failing_slots})
  if failing_slots and agreeing:
    slots = sorted({k.rsplit('/', 1)[-1] for k in failing_slots})
    return (f'{at} {shown}, and the slots {", ".join(slots)}'
            f' differ while every {", ".join(agreeing)} slot agrees: the '
            'optimizer turns the same accumulated gradients into another '
            'step: its update formula (e.g. epsilon inside or outside the '
            'square root: TF 1\'s RMSProp divides by sqrt(ms + epsilon), '
            'its Adam by sqrt(v) + epsilon) or a hyper-parameter')
  if s.slots and not failing_slots:
    return (f'{at} {shown} while every slot agrees: the optimizer holds the '
            'same state and received the same gradients, so the step it '
            'makes from them differs: its update formula (e.g. Adam\'s '
            'bias correction, which TF 1 AdamOptimizer and Keras Adam apply '
            'and BERT\'s AdamWeightDecayOptimizer does not; epsilon inside '
            'or outside the square root) or a hyper-parameter (epsilon, '
            'the betas)')
  return (f'{at} {shown}: the optimizer\'s step differs (its formula or '
          'hyper-parameters), or the gradients it applies')


def _slots_hint(at: str, failing_slots: dict[str, Part]) -> str:
  """Slots that differ while the updates agree: a common factor (the
  gradients the optimizer receives), or the worst."""
  worst = max(failing_slots, key=lambda k: failing_slots[k].relative)
  groups = {}
  for name, p in failing_slots.items():
    groups.setdefault(name.rsplit('/', 1)[-1], []).append(p.scale)
  common = {group: _common_scale(scales) for group, scales in groups.items()}
  if all(c is not None for c in common.values()):
    shown = ', '.join(f'{group} about {c:.3g}x' for group, c in
                      common.items())
    return (f'{at} the slots of {len(failing_slots)} variables differ by a '
            f'common factor ({shown} the legacy ones) while the updates '
            'agree: the optimizer receives gradients scaled otherwise (e.g. '
            'clipping by global norm missing, or at another norm; a loss '
            'scale; gradients summed rather than averaged over replicas)')
  return (f'{at} the slot {worst} differs by '
          f'{failing_slots[worst].relative:.3g} of its size (and '
          f'{len(failing_slots) - 1} more) while the updates agree: the '
          'optimizer receives other gradients in some variables, so the '
          'model computes a little otherwise (e.g. a layer-norm epsilon) or '
          'its gradients are transformed otherwise')


def _adapted(ratio: float) -> bool:
  """Whether an update norm of ratio times the rate times the variable's
  norm is a trust ratio's (within tolerances.TRUST_RATIO_RTOL of 1)."""
  return abs(ratio - 1) <= tolerances.TRUST_RATIO_RTOL


def _not_adapted(ratio: float) -> bool:
  """Whether it is clearly not: ten times that away (between the two, the
  rounding of a small step may hide a ratio; NaN: not read)."""
  return abs(ratio - 1) > 10 * tolerances.TRUST_RATIO_RTOL


def _trust_ratio_hint(at: str, variables: dict[str, Part]) -> str:
  """Where one side's optimizer scales each update to the rate times the
  variable's norm (a trust ratio: LAMB, LARS) and the other's clearly does
  not, for the same variables: which, and what that reads as; '' where no
  variable reads so."""
  legacy_only = sorted(k for k, p in variables.items()
                       if _adapted(p.legacy_norm) and _not_adapted(p.port_norm))
  port_only = sorted(k for k, p in variables.items()
                     if _adapted(p.port_norm) and _not_adapted(p.legacy_norm))
  if legacy_only:
    ratios = np.array([variables[k].port_norm for k in legacy_only])
    near = bool(np.all(np.abs(ratios - 1) < 0.05))
    cause = ('a term added to the update outside the trust ratio (e.g. the '
             'weight decay applied after it, where LAMB adds it to the '
             'update the ratio scales)' if near else
             'no trust ratio (e.g. AdamW in LAMB\'s place: its step does '
             'not follow the variable\'s norm)')
    return (f'{at} the legacy optimizer moves {len(legacy_only)} variables '
            f'({_names(legacy_only)}) by exactly the learning rate times '
            'their norm (a trust ratio, as LAMB\'s layer adaptation), the '
            f'port\'s by {np.median(ratios):.4g}x that (median): {cause}')
  if port_only:
    return (f'{at} the port\'s optimizer moves {len(port_only)} variables '
            f'({_names(port_only)}) by exactly the learning rate times their '
            'norm (a trust ratio), which the legacy optimizer does not for '
            'them: compare which variables are excluded from layer '
            'adaptation (e.g. LayerNorm and bias, as LAMB\'s '
            'exclude_from_layer_adaptation)')
  return ''


def _average_hint(at: str, failing: dict[str, Part]) -> str:
  """The moving averages moved otherwise while the updates agree."""
  common = _common_scale([p.scale for p in failing.values()])
  worst = max(failing, key=lambda k: failing[k].relative)
  shown = (f'about {common:.3g}x the legacy ones' if common is not None else
           f'{worst}\'s by {failing[worst].relative:.3g} of its size')
  if common is not None and abs(common) < 1e-9:
    return (f'{at} the port\'s moving averages of {len(failing)} variables '
            f'({_names(sorted(failing))}) stood still where the legacy '
            'shadows moved: the port does not update its averages at each '
            'step (e.g. an EMA applied outside the step function)')
  return (f'{at} the moving averages of {len(failing)} variables '
          f'({_names(sorted(failing))}) moved otherwise ({shown}) while the '
          'updates agree: compare the EMA\'s decay (a change k times the '
          'legacy one is a decay of 1 - k (1 - d) for the legacy decay d at '
          'this step), and whether the decay is lowered early on, as TF 1\'s '
          'num_updates lowers it to min(decay, (1 + step) / (10 + step))')


def _common_scale(scales: list[float]) -> float | None:
  """The factor most of scales share (within 2% of their median, for 80%
  of them, and at least 1% from 1), else None."""
  values = np.array([v for v in scales if np.isfinite(v)])
  if not values.size:
    return None
  median = float(np.median(values))
  close = np.abs(values - median) <= 0.02 * abs(median)
  if close.mean() >= 0.8 and abs(median - 1) > 0.01:
    return median
  return None


def drive(run: Run, replicas: Replicas) -> CheckResult:
  resynced = passes.resynced(run, replicas)
  return passes.with_noise(judge(f'updates ({replicas.label})',
                                 resynced.steps, run.parting), resynced)


# Reported before stepwise, which judges the same steps: its hint names the
# variable and the term that differ, where stepwise gives a step's size.
CHECK = Check(
    'updates', 'at every step of the legacy trajectory from identical '
    'state: each trainable variable\'s update (after minus before) and each '
    'optimizer slot, relative to the legacy one\'s size; a part whose size '
    f'is under {tolerances.UPDATE_FLOOR:.0%} of its group\'s typical size is '
    f'held to that {tolerances.UPDATE_FLOOR:.0%}', EACH,
    drive,
    needs=('legacy.state', 'legacy.global_step', 'legacy.slots',
           'legacy.step', 'port.set_state', 'port.set_global_step',
           'port.set_slots', 'port.step', 'port.learning_rate', 'port.state',
           'port.slots', 'legacy.averages',
           'port.averages', 'port.set_averages', 'port.reordered_step'),
    bar=BAR)
