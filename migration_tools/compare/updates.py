"""The updates check: what each optimizer step did to each variable and slot,
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
import dataclasses
from typing import Any

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare import checks
from migration_tools.compare import noise as noise_lib
from migration_tools.compare.checks import CheckResult
from migration_tools.compare.checks import FAILED
from migration_tools.compare.checks import NOT_RUN
from migration_tools.compare.checks import PASSED


@dataclasses.dataclass(frozen=True)
class Part:
  """One variable's (or slot's) step on both sides.

  size: the norm of the legacy update (of the legacy slot, for a slot).
  excess: the norm of the port's difference beyond rounding.
  decay: the difference as a multiple of the weights, over the rate: the
    weight-decay rate the port lacks (> 0) or adds (< 0).
  decay_fit: how much of the difference that multiple leaves unexplained
    (0: all of it is proportional to the weights).
  scale: the port's update over the legacy one (least squares).
  count: its number of elements.
  relative: excess over the larger of size and the step's floor (Step).
  non_finite: what is NaN or infinite on one side only
    (outputs.non_finite), or '': then excess and relative are inf.
  legacy_norm, port_norm: each side's update norm over the rate times the
    variable's norm before the step: exactly 1 where an optimizer scales
    the update to the variable by a trust ratio (LAMB's layer adaptation);
    NaN for a slot, or without a rate or a norm.
  """
  size: float
  excess: float
  decay: float
  decay_fit: float
  scale: float
  count: int
  relative: float = 0.0
  non_finite: str = ''
  legacy_norm: float = float('nan')
  port_norm: float = float('nan')


def _ulps(values: np.ndarray) -> np.ndarray:
  return np.spacing(np.abs(values).astype(np.float32)).astype(np.float64)


def part(before, theirs, ours, rate: float | None) -> Part:
  """A variable's step: before, then the legacy and the port's values after
  (for a slot, before is None: its values are compared as they are)."""
  said = outputs.non_finite(theirs, ours)
  if said:
    # Nothing below is a number then: the part fails whatever its size.
    return Part(float('inf'), float('inf'), 0.0, 1.0, float('nan'),
                int(np.size(theirs)), float('inf'), said)
  theirs = np.asarray(theirs, np.float64)
  ours = np.asarray(ours, np.float64)
  start = 0.0 if before is None else np.asarray(before, np.float64)
  legacy, port = theirs - start, ours - start
  difference = port - legacy
  rounding = tolerances.UPDATE_ULPS * np.maximum(_ulps(theirs), _ulps(ours))
  excess = np.where(np.abs(difference) > rounding, difference, 0.0)
  decay, fit = 0.0, 1.0
  if before is not None and rate and np.any(start):
    # difference = c * weights: c / rate is a weight-decay rate.
    weights = np.asarray(before, np.float64)
    c = float(np.vdot(difference, weights) / np.vdot(weights, weights))
    decay = c / rate
    spread = float(np.linalg.norm(difference))
    fit = (float(np.linalg.norm(difference - c * weights)) / spread
           if spread else 0.0)
  size = float(np.linalg.norm(legacy))
  scale = float(np.vdot(port, legacy) / np.vdot(legacy, legacy)) if size else (
      0.0)
  norms = [float('nan')] * 2
  if before is not None and rate and np.any(start):
    # Over the rate times the variable's norm: 1 under a trust ratio. Not
    # for a step that moves every element by one amount (a bias-corrected
    # Adam's first, rate * sign(g)): on a layer norm's gamma of ones that
    # has the same norm.
    unit = rate * float(np.linalg.norm(start))
    norms = [float(np.linalg.norm(u)) / unit if np.ptp(np.abs(u)) > 1e-3 * (
        np.abs(u).max()) else float('nan') for u in (legacy, port)]
  return Part(size, float(np.linalg.norm(excess)), decay, fit, scale,
              int(theirs.size), legacy_norm=norms[0], port_norm=norms[1])


def noise_gradients(legacy_slots: dict[tuple, Any]) -> set[str]:
  """The variables whose every slot (Adam's m and v, LAMB's, a momentum)
  is under tolerances.NOISE_GRADIENT_SHARE of its kind's typical size (root
  mean square over all variables): their gradient is rounding noise. An
  optimizer that divides by the gradient's own scale (Adam, LAMB) turns
  such noise into a step of a learning rate or more per element, which no
  two roundings share. A slot that starts away from 0 (TF 1's RMSProp's rms,
  at 1) never reads so: that optimizer's step stays as small as its
  gradient."""
  by_kind: dict[str, list] = {}
  for (variable, slot), value in legacy_slots.items():
    by_kind.setdefault(slot, []).append(
        (variable, float(np.sqrt(np.mean(np.square(
            np.asarray(value, np.float64)))))))
  shares: dict[str, list] = {}
  for entries in by_kind.values():
    typical = float(np.sqrt(np.mean([r ** 2 for _, r in entries])))
    for variable, rms in entries:
      shares.setdefault(variable, []).append(rms / typical if typical else
                                             1.0)
  return {v for v, found in shares.items()
          if max(found) < tolerances.NOISE_GRADIENT_SHARE}


def with_floors(parts: dict[str, Part], group, noise: set[str] = frozenset(),
                rate: float | None = None,
                measured: dict | None = None) -> dict[str, Part]:
  """parts with their relative difference set: over the part's own size,
  or over tolerances.UPDATE_FLOOR of its group's typical size if that is
  larger. A variable whose gradient is zero up to rounding (an attention
  key's bias: softmax ignores it) has an update, and slots, of pure
  rounding noise; judged against its own size it would always differ.
  The variables in noise (noise_gradients) are held to
  tolerances.NOISE_STEP_RATES learning rates per element instead. With
  measured {name: norm} (noise.Noise.norms: the port's own rounding noise
  on that part, times its multiple), a part's difference may reach that
  norm too."""
  totals = {}
  for name, p in parts.items():
    if p.non_finite:
      continue  # Its own relative is inf; it sets no floor for the others.
    size, count = totals.get(group(name), (0.0, 0))
    totals[group(name)] = (size + p.size ** 2, count + p.count)
  result = {}
  for name, p in parts.items():
    if p.non_finite:
      result[name] = p
      continue
    squares, count = totals[group(name)]
    floor = tolerances.UPDATE_FLOOR * np.sqrt(squares / max(count, 1) *
                                              p.count)
    if name in noise and rate:
      # relative <= UPDATE_RTOL exactly when the difference is within
      # NOISE_STEP_RATES rates per element (its root mean square).
      floor = (tolerances.NOISE_STEP_RATES * rate * np.sqrt(p.count) /
               tolerances.UPDATE_RTOL)
    if measured and name in measured:
      floor = max(floor, measured[name] / tolerances.UPDATE_RTOL)
    bound = max(p.size, floor)
    relative = p.excess / bound if bound else (
        float('inf') if p.excess else 0.0)
    result[name] = dataclasses.replace(p, relative=float(relative))
  return result


@dataclasses.dataclass(frozen=True)
class Step:
  """One resynced step: every variable's, slot's and moving average's Part
  (an average's change over the step, as a variable's), and the legacy rate
  (None if it is not read)."""
  number: int
  rate: float | None
  variables: dict[str, Part]
  slots: dict[str, Part]
  averages: dict[str, Part] = dataclasses.field(default_factory=dict)
  # The variables whose gradient is rounding noise (noise_gradients).
  noise: frozenset = frozenset()

  def moved(self) -> bool:
    """Whether the legacy step moved any variable."""
    return any(p.size for p in self.variables.values())

  def port_moved_alone(self) -> str | None:
    """A variable the port moved where the legacy step moved none."""
    if self.moved():
      return None
    return next((k for k, p in self.variables.items() if p.excess), None)

  def judged(self) -> dict[str, 'Part']:
    """The parts judged: the slots and averages, and the variables if
    either side moved one (a step of rate 0 on both sides tells nothing of
    them)."""
    averages = {f'{k} (average)': p for k, p in self.averages.items()}
    if self.moved() or self.port_moved_alone():
      return {**self.variables, **self.slots, **averages}
    return {**self.slots, **averages}

  def worst(self) -> tuple[str, float]:
    parts = self.judged()
    if not parts:
      return '', 0.0
    name = max(parts, key=lambda k: parts[k].relative)
    return name, parts[name].relative


def step(number: int, before: dict, theirs: dict, ours: dict,
         legacy_slots: dict, port_slots: dict, rate: float | None,
         averages: tuple[dict, dict, dict] | None = None,
         measured: noise_lib.Noise | None = None) -> Step:
  """A Step from the states (by legacy name) and slots around one step;
  averages: the moving averages before it and after it on each side;
  measured: the port's own noise on a step (compare/noise.py), or None."""
  variables = {name: part(before[name], theirs[name], ours[name], rate)
               for name in theirs if name in ours}
  slots = {'/'.join(key): part(None, value, port_slots[key], rate)
           for key, value in legacy_slots.items() if key in port_slots}
  averaged = {}
  if averages:
    start, legacy_after, port_after = averages
    # No weight-decay fit: an average's change is no optimizer step.
    averaged = {name: part(start[name], value, port_after[name], None)
                for name, value in legacy_after.items() if name in port_after}
  noise = noise_gradients(legacy_slots) if rate else set()
  norms = {} if measured is None else measured.norms('state')
  slot_norms = {} if measured is None else {
      '/'.join(k): v for k, v in measured.norms('slots').items()}
  # Slots grouped by kind ('m', 'adam_v'): their scales differ by orders.
  return Step(number, rate, with_floors(variables, lambda name: '', noise,
                                        rate, norms),
              with_floors(slots, lambda name: name.rsplit('/', 1)[-1],
                          measured=slot_norms),
              with_floors(averaged, lambda name: '',
                          measured={} if measured is None else
                          measured.norms('averages')), frozenset(noise))


def check(name: str, steps: list[Step], parting: str = '') -> CheckResult:
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
      'ulps_ignored': tolerances.UPDATE_ULPS}
  stood_still = [s for s in steps if s.port_moved_alone()]
  if stood_still:
    first = stood_still[0]
    return CheckResult(name, FAILED, _still_hint(first), float('inf'),
                       tolerances.UPDATE_RTOL, figures)
  over = [s for s in steps if s.worst()[1] > tolerances.UPDATE_RTOL]
  value = max(s.worst()[1] for s in steps)
  ties = checks.near_ties([w[1] for w in worst], tolerances.UPDATE_RTOL,
                          tolerances.FLIP_RTOL)
  if ties and judged:
    figures['near_ties'] = ties
    rest = [w[1] for i, w in enumerate(worst) if i + 1 not in ties]
    return CheckResult(name, PASSED, checks.near_tie_text(
        ties, [w[1] for w in worst], 'the updates', 'FLIP_RTOL'),
                       max(rest, default=0.0),
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
    said = ''
    if judged[0].number > 1:
      # A warmup from 0: say which steps could judge the update formula.
      said = (f'the variables are judged from step {judged[0].number}, the '
              'first whose learning rate is above 0 (the steps before it '
              'moved no variable on either side; their slots are judged)')
    if noise:
      said = '; '.join(filter(None, [said, (
          f'the gradients of {len(noise)} variables are rounding noise '
          f'({_names(noise)}: e.g. an attention key\'s bias, which softmax '
          'ignores), which their optimizer turns into a step of about a '
          'rate per element: those updates are held to '
          f'{tolerances.NOISE_STEP_RATES:g} rates per element')]))
    return CheckResult(name, PASSED, said, value, tolerances.UPDATE_RTOL,
                       figures)
  first = over[0]
  figures['first_step_over_tolerance'] = first.number
  figures['worst_at_first'] = _worst_parts(first)
  said = hint(first)
  if parting:
    said += f'; inside the model, {parting} (see inference)'
  return CheckResult(name, FAILED, said, value, tolerances.UPDATE_RTOL,
                     figures)


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
  if failing and all(p.decay_fit < 0.2 for p in failing.values()):
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
  if failing:
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
      return (f'{at} {shown}, and the slots '
              f'{", ".join(sorted({k.rsplit("/", 1)[-1] for k in failing_slots}))}'
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
  if failing_slots:
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
  return f'{at} the updates differ by less than each bar alone shows'


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
