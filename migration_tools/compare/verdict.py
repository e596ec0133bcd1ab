"""A check's verdict: its status, its figures against its bar, and what
the judges share to reach it.

Every check returns a ``CheckResult``: whether it passed, its headline
figure against its bar (``tolerances``), every figure measured, and on
failure a message that first says what the numbers show and only then names
likely causes, as examples.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from kit_core.errors import printable
from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare import noise as noise_lib


PASSED, FAILED, ERROR, NOT_RUN = 'passed', 'failed', 'error', 'not run'


# A check of an optional piece the port does not give (e.g. no
# input_pipeline): not a failure, and said.
SKIPPED = 'skipped'


# A finding to look at that fails nothing: e.g. a port slower than its
# model_fn (speed), which is not a difference in what it computes.
REVIEW = 'review'


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """One check's outcome, never edited once made (a check's judge says all
  of it).

  status: PASSED or FAILED (judged on the figures), ERROR (the check raised:
  message is the cause), NOT_RUN (a check it needs failed first, or the kit
  cannot judge it: message says why), SKIPPED (the port does not give
  what it compares, or another check judges it) or REVIEW (a finding to
  look at, not a failure: message says what).
  """
  name: str
  status: str
  message: str = ''
  max_abs_diff: float | None = None
  tolerance: float | None = None
  figures: dict[str, Any] = dataclasses.field(default_factory=dict)
  # The check's bar (bars.Bar.to_json), as the harness ran it; None for a
  # result made outside a comparison.
  bar: dict | None = None

  @property
  def passed(self) -> bool:
    return self.status == PASSED

  @property
  def failed(self) -> bool:
    """Whether it makes the comparison fail: FAILED or ERROR. A check NOT
    RUN because an earlier one failed follows that failure; one the kit
    cannot judge says why, and fails nothing."""
    return self.status in (FAILED, ERROR)

  @property
  def ratio_to_bar(self) -> float | None:
    """The figure as a multiple of its bar (a pass is at most 1), so a PASS
    says how close it came; None where the check has no such pair."""
    if self.max_abs_diff is None or self.tolerance is None:
      return None
    if self.tolerance == 0:  # An exact bar.
      return 0.0 if self.max_abs_diff == 0 else math.inf
    return float(self.max_abs_diff / self.tolerance)

  def to_json(self) -> dict[str, Any]:
    """The report's form: the figures beside the named fields."""
    return {'name': self.name, 'passed': self.passed, 'status': self.status,
            'max_abs_diff': self.max_abs_diff, 'tolerance': self.tolerance,
            'ratio_to_bar': self.ratio_to_bar, **self.figures,
            **({} if self.bar is None else {'bar': self.bar}),
            'message': self.message}

  def _allowance_text(self) -> str:
    """How the bar grew with the port's own noise, where it did: the line
    says the bar applied, not only its floor."""
    allowance = self.figures.get('noise_allowance') or {}
    if not allowance.get('largest'):
      return ''
    return (f' beyond the port\'s own noise, which allowed up to '
            f'{allowance["largest"]:.3g} more on {allowance["on"]}')

  def summary(self) -> str:
    """One line: PASS/FAIL/ERROR/NOT RUN name: figure; message."""
    figure = ''
    if self.max_abs_diff is not None and self.tolerance is not None:
      figure = (f' max diff {self.max_abs_diff:.3g} (tolerance '
                f'{self.tolerance:.3g}{self._allowance_text()}, '
                f'{self.ratio_to_bar:.2g}x it)')
    elif self.max_abs_diff is not None and self.passed:
      # A free run's parting is not judged (tolerances.TRAJECTORY_ATOL's
      # comment): said first, lest a large figure read as a defect.
      steps = self.figures.get('steps')
      figure = (f' a free run{f" of {steps} steps" if steps else ""} '
                'completed with finite losses; it parted from the legacy '
                f'run by up to {self.max_abs_diff:.3g}, not judged (rounding '
                'grows step by step in a free run; stepwise holds each step)')
    elif self.max_abs_diff is not None:
      figure = f' max diff {self.max_abs_diff:.3g} (a free run)'
    label = {PASSED: 'PASS', FAILED: 'FAIL', ERROR: 'ERROR',
             NOT_RUN: 'NOT RUN', SKIPPED: 'SKIP',
             REVIEW: 'REVIEW'}[self.status]
    message = ''
    if self.message:
      message = ('; ' if figure else ' ') + self.message
    # The message may name the user's variables, outputs and files.
    return printable(f'{label} {self.name}' + (
        f':{figure}{message}' if figure or message else ''))


def judged(name: str, value: float, tolerance: float, figures: dict,
           hint: str) -> CheckResult:
  """A check passed when value <= tolerance; on failure the message is hint."""
  passed = bool(value <= tolerance)
  return CheckResult(name, PASSED if passed else FAILED,
                     '' if passed else hint, float(value), tolerance, figures)


def near_ties(per_step, bar: float, flip_bar: float) -> list[int]:
  """The steps (1-based) over bar that tolerances.FLIP_RTOL's comment takes
  for near-ties decided otherwise: each alone between steps within bar,
  below flip_bar, at most FLIP_SHARE of the steps; [] when any step over bar
  is not such a step."""
  values = [float(v) for v in per_step]
  over = [i for i, v in enumerate(values) if not v <= bar]
  alone = [i for i in over if values[i] <= flip_bar and all(
      values[j] <= bar for j in (i - 1, i + 1) if 0 <= j < len(values))]
  if not over or alone != over or len(over) > int(
      tolerances.FLIP_SHARE * len(values)):
    return []
  return [i + 1 for i in over]


def near_tie_text(steps: list[int], values, what: str, bar: str) -> str:
  """The report's line for the steps near_ties found; bar: the tolerance's
  name in tolerances.py."""
  shown = ', '.join(f'step {s} ({values[s - 1]:.2g})' for s in steps)
  return (f'{shown} alone differ{"s" if len(steps) == 1 else ""} in {what}, '
          'the steps around within the bar: taken for a near-tie (a max-pool '
          'window or a ReLU at rounding distance) that the port\'s rounding '
          f'decided otherwise, not failed (tolerances.{bar})')


def max_diff(a: dict, b: dict, ulps: int = 0,
             allowance: dict | None = None) -> tuple[float, str]:
  """The largest |a[k] - b[k]| over the keys of a, and its key; inf where
  a value is not finite on one side (outputs.output_diff). With ulps, each
  element's difference less ulps units in the last place (float32) of the
  larger of its two values: what storing them rounds. With allowance
  {k: amount} (noise.Noise.allowance), each key's difference less its
  amount: the port's own rounding noise measured on that tensor."""
  allowance = allowance or {}
  diffs = {k: max(0.0, beyond_rounding(a[k], b[k], ulps) -
                  allowance.get(k, 0.0)) for k in a}
  worst = max(diffs, key=diffs.get)
  return diffs[worst], worst


def beyond_rounding(a, b, ulps: int) -> float:
  """output_diff, less ulps units in the last place of the values."""
  a, b = np.asarray(a), np.asarray(b)
  if not ulps or a.shape != b.shape or not (
      outputs.numeric(a) and outputs.numeric(b)):
    return outputs.output_diff(a, b)
  diffs = outputs.elementwise_diff(a, b)
  with np.errstate(invalid='ignore', over='ignore'):
    larger = np.maximum(np.abs(a), np.abs(b)).astype(np.float32)
    rounding = ulps * np.spacing(larger).astype(np.float64)
  return float(np.maximum(diffs - np.nan_to_num(rounding), 0.0).max(
      initial=0.0))


def non_finite_in(a: dict, b: dict) -> str:
  """What the first pair of a and b (by key) that is not finite holds, as
  'name holds NaN on the port's side (...)', or ''."""
  for k in a:
    said = outputs.non_finite(a[k], b[k]) if k in b else ''
    if said:
      return f'{"/".join(k) if isinstance(k, tuple) else k} holds {said}'
  return ''


def compare_outputs(name: str, theirs: dict, ours: dict,
                    output_map: dict[str, str], tolerance: float,
                    hint: str, extra: dict | None = None,
                    noise: noise_lib.Forward | None = None) -> CheckResult:
  """Every legacy output against the port's of the same (mapped) name, each
  within the larger of tolerance and its measured noise's bar (noise, by
  the port's names); extra: more figures for the report."""
  pairs, missing = outputs.paired_outputs(theirs, ours, output_map)
  if missing or not pairs:
    return CheckResult(name, FAILED, f'the port has no output for '
                       f'{", ".join(missing) or "any legacy output"} (legacy:'
                       f' {sorted(theirs)}, port: {sorted(ours)}): name the '
                       'port\'s outputs as the legacy ones, or map them '
                       '(Port.output_map)', figures=dict(extra or {}))
  unsteady = {} if noise is None else {
      k: noise.unsteady[output_map.get(k, k)] for k in pairs
      if output_map.get(k, k) in noise.unsteady}
  if unsteady:  # No bar is taken from it: the port's own finding.
    return CheckResult(name, FAILED, noise_lib.unsteady_text(
        unsteady, noise_lib.FORWARD_AGAIN), figures={
            'noise': noise_lib.forward_figures(noise), **(extra or {})})
  unrepeated = {} if noise is None else {
      k: noise.unrepeatable[output_map.get(k, k)] for k in pairs
      if output_map.get(k, k) in noise.unrepeatable}
  if unrepeated:  # Nor from outputs that differ between two calls.
    return CheckResult(name, FAILED, noise_lib.unrepeatable_text(
        unrepeated, noise_lib.FORWARD_REPEATED), figures={
            'noise': noise_lib.forward_figures(noise), **(extra or {})})
  diffs = {k: outputs.output_diff(*pair) for k, pair in pairs.items()}
  bars = {k: noise.bar(output_map.get(k, k), tolerance) if noise else
          tolerance for k in pairs}
  # Over its bar first, a float output (which says by how much) before an
  # integer one, then the closest to its bar.
  worst = max(diffs, key=lambda k: (diffs[k] > bars[k],
                                    pairs[k][0].dtype.kind == 'f',
                                    diffs[k] / bars[k] if bars[k] else
                                    diffs[k]))
  figures = {'outputs': {k: list(p[0].shape) for k, p in pairs.items()},
             'max_diff_by_output': diffs, 'bar_by_output': bars,
             'worst_output': worst, 'noise': noise_lib.forward_figures(noise),
             **(extra or {})}
  return judged(name, diffs[worst], bars[worst], figures,
                outputs.difference_text(worst, *pairs[worst], diffs[worst]) +
                ' ' + hint)
