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

A value that is finite in one of the two runs and not in the other (a NaN
or an infinity in one) is no rounding noise: rounding cannot make a NaN.
It widens no bar; it is kept apart (``unsteady``) and the checks fail on it,
naming the port's own output as not deterministic.

Nor may a port widen its own bars by computing something else each time
(weights jittered at every other step, a predict on jittered weights): the
same computation is run once more in the same order from the same state,
and a tensor that moves by more than tolerances.REPEAT_RTOL of its largest
value between those two runs is no rounding either (``unrepeatable``): it
widens no bar, and the checks fail naming it.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from kit_core import timing
from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.pair import precision

MEASURED_BY = ('the port\'s step again from the same state on the same '
               'batch, its examples in another order within each replica\'s '
               'share')
# What the two runs of the step differ by, for unsteady_text.
STEP_AGAIN = 'the order of the examples within each replica\'s share'
# What the two calls of the forward noise differ by, for unsteady_text.
FORWARD_AGAIN = ('every kernel and embedding moved one float32 unit in the '
                 'last place')
# What two runs of the same computation share, for unrepeatable_text.
STEP_REPEATED = ('the port\'s step, taken twice from the same state on the '
                 'same batch in the same order')
FORWARD_REPEATED = 'the port\'s outputs, asked twice at the same weights'


def _apart(a: dict, b: dict, unsteady: dict | None = None) -> dict:
  """{key: (largest |a - b|, norm of a - b)} over the keys of both; a key
  finite in one and not the other somewhere goes to unsteady instead,
  {key: what the other holds there}."""
  found = {}
  for key in a:
    if key not in b or np.shape(a[key]) != np.shape(b[key]):
      continue
    if not outputs.numeric(np.asarray(a[key])):
      continue
    finite = np.isfinite(np.asarray(a[key], np.float64))
    if (finite != np.isfinite(np.asarray(b[key], np.float64))).any():
      if unsteady is not None:
        unsteady[key] = _not_finite(a[key], b[key])
      continue
    # Non-finite in both runs, at the same places: no movement (the legacy
    # comparison names what it holds).
    difference = np.where(finite, outputs.elementwise_diff(a[key], b[key]),
                          0.0)
    found[key] = (float(difference.max(initial=0.0)),
                  float(np.sqrt(np.sum(np.square(difference)))))
  return found


def _key_text(key) -> str:
  """A tensor's name: 'dense/kernel', or a slot's 'dense/kernel/m'."""
  return '/'.join(key) if isinstance(key, tuple) else str(key)


def _flat_text(key) -> str:
  """'the gradients of dense/kernel', 'the loss' (a step's flat key,
  _as_run's), or an output's name."""
  if not isinstance(key, tuple):
    return str(key)
  return 'the loss' if key[0] == 'loss' else (
      f'the {key[0]} of {"/".join(key[1:])}')


def _not_finite(a, b) -> str:
  """'NaN (3 of 512 values)': what one run holds that the other does not."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  odd = np.isfinite(a) != np.isfinite(b)
  held = np.where(np.isfinite(a), b, a)[odd]
  kinds = [k for k, found in (('NaN', np.isnan(held).any()),
                              ('an infinity', np.isinf(held).any())) if found]
  return f'{" and ".join(kinds)} ({int(odd.sum())} of {a.size} values)'


def unsteady_text(unsteady: dict, again: str) -> str:
  """The finding of a port whose output is not finite in one of two runs
  that differ only by again: 'the port is not deterministic: ...'."""
  key, said = next(iter(unsteady.items()))
  more = f' (and {len(unsteady) - 1} more)' if len(unsteady) > 1 else ''
  return (f'the port is not deterministic: {key} holds {said} in one of two '
          f'runs that differ only by {again}, and not in the other{more}; '
          'rounding never makes a NaN or an infinity: look for a random or '
          'stateful op in its step or predict (a counter, a cache, a '
          'random draw at inference)')


def unrepeatable(first: dict, again: dict) -> dict:
  """{key: 'differs by 0.000123 (0.0025 of its largest value)'} of the
  tensors of two runs of the same computation (first, again) that differ
  by more than tolerances.REPEAT_RTOL of their largest value."""
  found = {}
  for key, (largest, _) in _apart(first, again).items():
    scale = float(np.max(np.abs(np.nan_to_num(
        np.asarray(first[key], np.float64))), initial=0.0))
    if largest > tolerances.REPEAT_RTOL * max(scale, 1e-20):
      found[key] = (f'differs by {largest:.3g} ('
                    f'{largest / max(scale, 1e-20):.2g} of its largest value)')
  return found


def unrepeatable_text(found: dict, what: str) -> str:
  """The finding of a port whose two runs of one computation differ:
  'the port is not deterministic: ...'."""
  key, said = next(iter(found.items()))
  more = f' (and {len(found) - 1} more)' if len(found) > 1 else ''
  return (f'the port is not deterministic: in {what}, {_flat_text(key)} '
          f'{said}{more}, more than rounding gives (tolerances.REPEAT_RTOL '
          f'{tolerances.REPEAT_RTOL:g}); its noise widens no bar: look for a '
          'random or stateful op in its step or predict (weights moved at '
          'some calls, a counter, a cache, a random draw)')


@dataclasses.dataclass(frozen=True)
class Noise:
  """What reordering the examples moved, on the port's side, by group:
  'loss', 'gradients', 'state' (by variable), 'slots' (by (variable,
  slot)), 'averages': {key: (largest elementwise, norm)}.

  order_dependent: the loss moved beyond tolerances.ORDER_RTOL: the step
  is not one computation in two orders, and no allowance is made.
  unsteady: {key: what is not finite} of the tensors finite in one run and
    not in the other: no noise (and no allowance); one_step fails on them.
  unrepeatable: {key: by how much} of the tensors that moved beyond
    rounding between two runs of the same step in the same order: no
    allowance at all; one_step fails on them.
  """
  groups: dict[str, dict]
  order_dependent: bool = False
  unsteady: dict = dataclasses.field(default_factory=dict)
  unrepeatable: dict = dataclasses.field(default_factory=dict)

  def allowance(self, group: str) -> dict:
    """{key: tolerances.NOISE_MULTIPLE times its largest elementwise
    noise}: what a difference in that group may reach beyond the bar."""
    if self.order_dependent or self.unrepeatable:
      return {}
    return {k: tolerances.NOISE_MULTIPLE * largest
            for k, (largest, _) in self.groups.get(group, {}).items()}

  def norms(self, group: str) -> dict:
    """{key: tolerances.NOISE_MULTIPLE times its noise's norm}: what an
    update's difference (updates) may reach beyond its bar."""
    if self.order_dependent or self.unrepeatable:
      return {}
    return {k: tolerances.NOISE_MULTIPLE * norm
            for k, (_, norm) in self.groups.get(group, {}).items()}

  def widest(self) -> tuple[float, str]:
    """The largest allowance of any tensor, and the tensor ('the loss', 'the
    gradients of dense/kernel'): how far past the fixed bar a difference may
    go (0.0, '' where none)."""
    found = [(amount, 'the loss' if group == 'loss' else
              f'the {group} of {_key_text(key)}') for group in self.groups
             for key, amount in self.allowance(group).items()]
    return max(found, default=(0.0, ''))

  def applied(self) -> dict:
    """The report's 'noise_allowance' of a check whose bar it widened
    (the line prints it): {'largest': amount, 'on': the tensor}."""
    return dict(zip(('largest', 'on'), self.widest()))

  def figures(self) -> dict:
    """The report's: how it was measured, the multiple and each group's
    largest noise."""
    largest = {group: max((v[0] for v in found.values()), default=0.0)
               for group, found in self.groups.items()}
    return {'measured_by': MEASURED_BY,
            'multiple': tolerances.NOISE_MULTIPLE,
            'order_dependent': self.order_dependent, 'largest': largest,
            'unsteady': dict(self.unsteady),
            'unrepeatable': {_flat_text(k): v
                             for k, v in self.unrepeatable.items()}}


def _as_run(answer: dict, state: dict, slots: dict | None,
            averages: dict | None) -> dict:
  """A step's tensors by group and key, flat: {('loss',): loss, ('state',
  key): ...}."""
  flat = {('loss',): answer['loss']}
  for group, values in (('gradients', answer.get('gradients') or {}),
                        ('state', state), ('slots', slots or {}),
                        ('averages', averages or {})):
    flat.update({(group, *(k if isinstance(k, tuple) else (k,))): v
                 for k, v in values.items()})
  return flat


def repeated(again: dict | None, answer: dict, state: dict,
             slots: dict | None = None, averages: dict | None = None
             ) -> dict:
  """unrepeatable() of the step's answer and what it left (answer, state,
  slots, averages) against the same step taken again in the same order
  (again: PortSide.reordered_step(..., reorder=False)'s; None: not taken,
  nothing found)."""
  if again is None:
    return {}
  return unrepeatable(
      _as_run(answer, state, slots, averages),
      _as_run(again, again['state'], again.get('slots'),
              again.get('averages')))


def measure(again: dict | None, answer: dict, state: dict,
            slots: dict | None = None, averages: dict | None = None,
            same_order: dict | None = None) -> Noise | None:
  """The Noise of a step from the reordered step's answer (again:
  PortSide.reordered_step's, None where the side cannot take one) and the
  step's own answer and state, slots and averages after it; same_order: the
  step taken again in the same order, whose differences beyond rounding
  make the Noise unrepeatable."""
  if again is None:
    return None
  unrepeated = repeated(same_order, answer, state, slots, averages)
  if unrepeated:
    return Noise({'loss': {}}, unrepeatable=unrepeated)
  unsteady = {}
  losses = {'loss': _apart({'loss': again['loss']}, {'loss': answer['loss']},
                           unsteady)}
  if unsteady:  # No order of the same sums makes a NaN of a finite loss.
    return Noise({'loss': {}}, unsteady=unsteady)
  loss = losses['loss']['loss'][0]
  if not loss <= tolerances.ORDER_RTOL * max(abs(float(answer['loss'])),
                                             1e-30):
    return Noise({'loss': {'loss': (loss, loss)}}, order_dependent=True)
  groups = {'loss': {'loss': (loss, loss)},
            'gradients': _apart(again.get('gradients', {}),
                                answer.get('gradients', {}), unsteady),
            'state': _apart(again['state'], state, unsteady),
            'slots': _apart(again.get('slots') or {}, slots or {}, unsteady),
            'averages': _apart(again.get('averages') or {}, averages or {},
                               unsteady)}
  return Noise(groups, unsteady=unsteady)


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
  measuring it took; unsteady: {output: what is not finite} of the outputs
  finite in one of the two calls and not in the other (no noise, no bar:
  the forward checks fail on them)."""
  by_output: dict[str, float]
  seconds: float = 0.0
  unsteady: dict = dataclasses.field(default_factory=dict)
  # {output: by how much} of the outputs that moved beyond rounding between
  # two calls at the same weights: no bar is taken from them.
  unrepeatable: dict = dataclasses.field(default_factory=dict)
  # Each layer's output's largest movement, by the port's layer
  # (PortSide.layer_outputs), where they were measured too; a layer whose
  # output is not finite in one call, or moved between two calls at the
  # same weights, is left out: no bar is taken from it.
  by_layer: dict = dataclasses.field(default_factory=dict)

  def bar(self, name: str, floor: float, scale: float = 1.0) -> float:
    """The bar of an output judged at floor (relative to scale): floor, or
    NOISE_MULTIPLE times its noise (relative to scale) where that is
    larger."""
    return max(floor, tolerances.NOISE_MULTIPLE *
               self.by_output.get(name, 0.0) / scale)

  def layer_bar(self, layer: str, scale: float) -> float:
    """The bar of a port layer's output relative to its scale:
    tolerances.LAYER_RTOL, or NOISE_MULTIPLE times its noise where that is
    larger."""
    return max(tolerances.LAYER_RTOL, tolerances.NOISE_MULTIPLE *
               self.by_layer.get(layer, 0.0) / max(scale, 1e-30))

  def figures(self) -> dict:
    return {'measured_by': FORWARD_MEASURED_BY,
            'multiple': tolerances.NOISE_MULTIPLE,
            'by_output': dict(self.by_output), 'seconds': self.seconds,
            'unsteady': dict(self.unsteady),
            'unrepeatable': dict(self.unrepeatable),
            'by_layer': dict(self.by_layer)}


def forward(ours: dict, moved: dict, seconds: float = 0.0,
            again: dict | None = None) -> Forward:
  """The Forward noise of outputs (ours) from the same outputs with the
  weights one unit in the last place apart (moved); float outputs only: an
  integer one (a class id) is held exact. again: the outputs asked again at
  ours' weights, whose differences beyond rounding make them unrepeatable
  (their noise then sets no bar)."""
  floats = {k: v for k, v in ours.items() if np.asarray(v).dtype.kind == 'f'}
  unsteady = {}
  apart = _apart(floats, moved, unsteady)
  found = unrepeatable(floats, again) if again is not None else {}
  return Forward({k: largest for k, (largest, _) in apart.items()
                  if k not in found}, seconds, unsteady, found)


def _layer_noise(layers: dict, moved: dict, again: dict) -> dict:
  """{layer: largest movement} of the float layer outputs (layers) with
  the weights apart (moved), less those not finite in one call or moved
  beyond rounding between two calls at the same weights (again)."""
  found = forward(layers, moved, again=again)
  return dict(found.by_output)


def measure_forward(ours: dict, state: dict, kernels: list[str],
                    set_state: Callable[[dict], None],
                    outputs_of: Callable[[], dict], seed: int = 0,
                    layers: dict | None = None,
                    layers_of: Callable[[], dict] | None = None) -> Forward:
  """The Forward noise of outputs (ours, at state): outputs_of() again
  with every element of kernels one unit in the last place apart, then
  again at state itself (a port that computes something else at each
  call takes no bar from it); set_state puts a state, and puts state back
  at the end. layers, layers_of: each layer's output at state, and a
  function that gives them again: their noise too (Forward.by_layer)."""
  # Copies of what is moved: state may hold views of the model's own
  # buffers (PyTorch's .numpy()), which setting the moved state writes over.
  state = {**state, **{n: np.array(state[n]) for n in kernels}}
  both = lambda: (outputs_of(), layers_of() if layers_of else {})
  began = time.monotonic()
  with timing.spent(FORWARD_PHASE):
    try:
      set_state(precision.one_ulp_apart(state, kernels, seed))
      moved, moved_layers = both()
    finally:
      set_state(state)
    again, again_layers = both()
  found = forward(ours, moved, time.monotonic() - began, again)
  if layers_of is None:
    return found
  return dataclasses.replace(found, by_layer=_layer_noise(
      layers or {}, moved_layers, again_layers))


def forward_figures(found: Forward | None) -> dict:
  """The report's 'noise' for a forward check."""
  if found is None:
    return {'measured_by': None, 'why_not': 'not measured for this '
            'comparison; the fixed bar holds'}
  return found.figures()
