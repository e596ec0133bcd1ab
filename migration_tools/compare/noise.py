"""The rounding noise of the port's own step, measured in the run.

A float32 sum depends on its order, and each device orders its sums its
own way: on an NVIDIA H200 at JAX's highest precision, the kit's port's
gradient of conv2/kernel (a sum over 64 examples of 7x7x32 windows) lands
1.7e-5 from TF's on the CPU, 17x the fixed bar of one_step, where the
CPU's own reorderings move it by 3e-9. The port's step is taken again from
the same state on the same batch, its examples in another order within
each replica's share (side.example_order): the same math, its sums in another
order, on the port's own device. What that moves each tensor by is the
noise of that very computation there; a difference from the legacy step is
a finding only beyond tolerances.NOISE_MULTIPLE times it (``allowance``).
On a CPU the noise is under the fixed bars (1e-9 to 1e-8 on JAX, about
1e-7 in PyTorch's gradients), which then mostly decide.

A step whose loss moves by more than tolerances.ORDER_RTOL with the order
of its examples computes something else in another order (a loss over
pairs of neighbouring examples): no noise is taken from it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances

MEASURED_BY = ('the port\'s step again from the same state on the same '
               'batch, its examples in another order within each replica\'s '
               'share')


def _apart(a: dict, b: dict) -> dict:
  """{key: (largest |a - b|, norm of a - b)} over the keys of both."""
  found = {}
  for key in a:
    if key not in b or np.shape(a[key]) != np.shape(b[key]):
      continue
    if not outputs.numeric(np.asarray(a[key])):
      continue
    difference = outputs.elementwise_diff(a[key], b[key])
    found[key] = (float(difference.max(initial=0.0)),
                  float(np.sqrt(np.sum(np.square(difference)))))
  return found


@dataclasses.dataclass(frozen=True)
class Noise:
  """What reordering the examples moved, on the port's side, by group:
  'loss', 'gradients', 'state' (by variable), 'slots' (by (variable,
  slot)), 'averages': {key: (largest elementwise, norm)}.

  order_dependent: the loss moved beyond tolerances.ORDER_RTOL: the step
  is not one computation in two orders, and no allowance is made.
  """
  groups: dict[str, dict]
  order_dependent: bool = False

  def allowance(self, group: str) -> dict:
    """{key: tolerances.NOISE_MULTIPLE times its largest elementwise
    noise}: what a difference in that group may reach beyond the bar."""
    if self.order_dependent:
      return {}
    return {k: tolerances.NOISE_MULTIPLE * largest
            for k, (largest, _) in self.groups.get(group, {}).items()}

  def norms(self, group: str) -> dict:
    """{key: tolerances.NOISE_MULTIPLE times its noise's norm}: what an
    update's difference (updates) may reach beyond its bar."""
    if self.order_dependent:
      return {}
    return {k: tolerances.NOISE_MULTIPLE * norm
            for k, (_, norm) in self.groups.get(group, {}).items()}

  def figures(self) -> dict:
    """The report's: how it was measured, the multiple and each group's
    largest noise."""
    largest = {group: max((v[0] for v in found.values()), default=0.0)
               for group, found in self.groups.items()}
    return {'measured_by': MEASURED_BY,
            'multiple': tolerances.NOISE_MULTIPLE,
            'order_dependent': self.order_dependent, 'largest': largest}


def measure(again: dict | None, answer: dict, state: dict,
            slots: dict | None = None, averages: dict | None = None
            ) -> Noise | None:
  """The Noise of a step from the reordered step's answer (again:
  PortSide.reordered_step's, None where the side cannot take one) and the
  step's own answer and state, slots and averages after it."""
  if again is None:
    return None
  loss = abs(float(again['loss']) - float(answer['loss']))
  if not loss <= tolerances.ORDER_RTOL * max(abs(float(answer['loss'])),
                                             1e-30):
    return Noise({'loss': {'loss': (loss, loss)}}, order_dependent=True)
  groups = {'loss': {'loss': (loss, loss)},
            'gradients': _apart(again.get('gradients', {}),
                                answer.get('gradients', {})),
            'state': _apart(again['state'], state),
            'slots': _apart(again.get('slots') or {}, slots or {}),
            'averages': _apart(again.get('averages') or {}, averages or {})}
  return Noise(groups)


def allowance(noise: Noise | None, group: str) -> dict:
  """noise.allowance(group), or none where no noise was measured."""
  return {} if noise is None else noise.allowance(group)


def figures(noise: Noise | None, why_not: str = '') -> dict:
  """The report's 'noise' for a check: noise.figures(), or why none was
  measured."""
  if noise is None:
    return {'measured_by': None, 'why_not': why_not or (
        'the port\'s side takes no step out of the legacy order; the fixed '
        'bars hold')}
  return noise.figures()


# The forward checks' noise -------------------------------------------------
#
# A forward pass in float32 computes the exact outputs of inputs and weights
# each moved by about a rounding: what moves an output when every kernel and
# embedding moves by one unit in the last place is the noise float32 makes
# on that very computation, with those weights (larger weights, larger
# noise). A difference from the legacy outputs counts only beyond
# tolerances.NOISE_MULTIPLE times it; the fixed bars stay the floor.

FORWARD_MEASURED_BY = ('the port\'s outputs again with every element of its '
                       'kernels and embeddings moved one float32 unit in '
                       'the last place, up or down at random')
# The time ledger's phase for it (kit_core/timing.py): what the forward
# checks' measured bars cost, beside the 'port noise steps'.
FORWARD_PHASE = 'port noise predictions'


@dataclasses.dataclass(frozen=True)
class Forward:
  """Each output's largest movement (elementwise), by name, with the
  kernels and embeddings one unit in the last place apart; seconds: what
  measuring it took."""
  by_output: dict[str, float]
  seconds: float = 0.0

  def bar(self, name: str, floor: float, scale: float = 1.0) -> float:
    """The bar of an output judged at floor (relative to scale): floor, or
    NOISE_MULTIPLE times its noise (relative to scale) where that is
    larger."""
    return max(floor, tolerances.NOISE_MULTIPLE *
               self.by_output.get(name, 0.0) / scale)

  def figures(self) -> dict:
    return {'measured_by': FORWARD_MEASURED_BY,
            'multiple': tolerances.NOISE_MULTIPLE,
            'by_output': dict(self.by_output), 'seconds': self.seconds}


def forward(ours: dict, moved: dict, seconds: float = 0.0) -> Forward:
  """The Forward noise of outputs (ours) from the same outputs with the
  weights one unit in the last place apart (moved); float outputs only: an
  integer one (a class id) is held exact."""
  floats = {k: v for k, v in ours.items() if np.asarray(v).dtype.kind == 'f'}
  return Forward({k: largest for k, (largest, _) in _apart(floats, moved)
                  .items()}, seconds)


def forward_figures(found: Forward | None) -> dict:
  """The report's 'noise' for a forward check."""
  if found is None:
    return {'measured_by': None, 'why_not': 'not measured for this '
            'comparison; the fixed bar holds'}
  return found.figures()
