"""The step record: what one optimizer step did to each variable and slot
on both sides, from the same state (Step, one Part a tensor), with the
port's own noise on it as floors. The passes at identical state build one a
step (compare/passes.py); updates and stepwise judge them.
"""
import dataclasses
from typing import Any

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare import noise as noise_lib


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
