"""The port's side of a comparison for an ``array_port.ArrayPort``: its
ArrayModel fed the legacy batches, its arrays named by the legacy names.

What ``keras_tf/runner.PortRunner`` is for a Keras port under a strategy, for a
port on any framework: the same questions (side.PortSide), answered from the
arrays the model hands over.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from kit_core import timing
from migration_tools.pair.frameworks.arrays import port as array_port
from migration_tools.pair import optimizers
from migration_tools.pair import port_draws
from migration_tools.pair import precision
from migration_tools.pair import side


class ArrayRunner(side.PortSide):
  """An ArrayModel on some replicas, fed the legacy batches in order."""

  def __init__(self, port: array_port.ArrayPort, replicas: int, params: dict,
               batches: list, where: str = 'the port',
               dots: precision.Dots | None = None, dropout: bool = False):
    """Builds the model on `replicas` devices, its dropout off unless
    dropout (the dropout check's run); where names the port in a message.
    Its model computes at the highest precision dots gives, but in
    at_deployed_precision()."""
    self.port, self.params = port, params
    self._dots = dots or precision.Dots()
    self._deployed = False
    self.model = array_port.check_model(
        port.make(dict(params), replicas, dropout), where)
    self.strategy = None  # No tf.distribute strategy: the model places itself.
    self._batches = batches
    self._next = 0
    self.pairs: dict[str, str] = {}
    self._legacy_name: dict[str, str] = {}
    self.slot_map: dict[str, str] | None = None
    self._rate = 0.0
    # Whether a step ran: the first compiles the model's programs.
    self._stepped = False
    self._as_made = self._held()

  def _held(self) -> tuple:
    """Copies of what a step moves and reordered_step sets back: the
    variables, slots, step and averages. Copies: a model may hand out views
    of its own buffers (PyTorch's .numpy()), which its step writes over."""
    return (_copied(self.model.variables()), _copied(self.model.slots()),
            self.model.step_count(),
            None if self.port.averages is None else
            _copied(self.port.averages(self.model)))

  def _set_back(self, held: tuple) -> None:
    variables, slots, steps, averages = held
    self.model.set_variables(variables)
    self.model.set_slots(slots)
    self.model.set_step_count(steps)
    if averages is not None:
      self.port.set_averages(self.model, averages)

  def rewind(self) -> bool:
    # Its state as made, as reordered_step sets it back after each noise
    # step (a model whose other state moves with a step fails one_step
    # there), the next step the first batch; its compiled programs kept.
    self._set_back(self._as_made)
    self._next, self._rate = 0, 0.0
    return True

  @property
  def replicas(self) -> int:
    return self.model.replicas

  def describe_run(self) -> dict[str, Any]:
    return {'reference': f'on {self.replicas} replica'
                         f'{"s" if self.replicas > 1 else ""} '
                         f'({self.port.framework})',
            'warm_start': {}, 'optimizer': self._optimizer_kind(),
            'rate_source': 'the rate the port\'s last step applied'}

  def _optimizer_kind(self) -> str:
    description = self.model.describe_optimizer()
    return description.kind if description else 'not described'

  # Names ---------------------------------------------------------------

  def shapes(self) -> dict[str, tuple]:
    return {n: tuple(np.shape(v)) for n, v in self.model.variables().items()}

  def use_map(self, pairs: dict[str, str]) -> None:
    self.pairs = dict(pairs)
    self._legacy_name = {ours: theirs for theirs, ours in pairs.items()}

  def _theirs(self, name: str) -> str:
    return self._legacy_name.get(name, name)

  # State ---------------------------------------------------------------

  def state(self) -> dict[str, np.ndarray]:
    return {self._theirs(n): np.asarray(v)
            for n, v in self.model.variables().items()}

  def set_state(self, values) -> None:
    # One at a time: values may read each from a file (the converter's),
    # and no second copy of the model is made.
    for theirs, ours in self.pairs.items():
      self.model.set_variables({ours: values[theirs]})

  def describe_optimizer(self) -> optimizers.Description | None:
    return self.model.describe_optimizer()

  def slot_tokens(self) -> list[str]:
    return optimizers.slot_tokens(self.model.slots())

  def use_slot_map(self, slot_map: dict[str, str]) -> None:
    self.slot_map = dict(slot_map)

  def _slot_keys(self) -> dict[tuple, tuple]:
    """{(port variable, token): (legacy variable, legacy slot)}: through the
    slot map, or by Keras 3's tokens for an optimizer the tables hold."""
    keys = {}
    description = self.model.describe_optimizer()
    if self.slot_map is not None:
      slot_of = {token: theirs for theirs, token in self.slot_map.items()}
    elif description is not None:
      slot_of = {token: slot for (kind, token), slot in
                 optimizers.PORT_SLOTS[3].items() if kind == description.kind}
    else:
      slot_of = {}
    for name, token in self.model.slots():
      if token in slot_of:
        keys[(name, token)] = (self._theirs(name), slot_of[token])
    return keys

  def _kind(self) -> str | None:
    description = self.model.describe_optimizer()
    return None if self.slot_map is not None or description is None else (
        description.kind)

  def slots(self, rate: float) -> dict[tuple, np.ndarray]:
    kind, values = self._kind(), self.model.slots()
    return {legacy: optimizers.to_legacy(kind, legacy[1], np.asarray(
        values[key]), rate) for key, legacy in self._slot_keys().items()}

  def set_slots(self, values, rate: float) -> None:
    kind = self._kind()
    for key, legacy in self._slot_keys().items():  # One at a time.
      if legacy in values:
        self.model.set_slots({key: optimizers.to_port(
            kind, legacy[1], values[legacy], rate)})

  def averages(self) -> dict[str, np.ndarray]:
    if self.port.averages is None:
      return {}
    return {self._theirs(n): np.asarray(v)
            for n, v in self.port.averages(self.model).items()}

  def set_averages(self, values: dict[str, np.ndarray]) -> None:
    if self.port.set_averages is not None:
      self.port.set_averages(self.model, {
          ours: values[theirs] for theirs, ours in self.pairs.items()
          if theirs in values})

  def global_step(self) -> int:
    return int(self.model.step_count())

  def set_global_step(self, step: int) -> None:
    self.model.set_step_count(step)

  # Precision -----------------------------------------------------------

  def _precision(self) -> contextlib.AbstractContextManager:
    return self._dots.deployed() if self._deployed else self._dots.highest()

  @contextlib.contextmanager
  def at_deployed_precision(self) -> Iterator[precision.Dots]:
    self._deployed = True
    try:
      yield self._dots
    finally:
      self._deployed = False

  # Steps ---------------------------------------------------------------

  def _take(self, features, labels) -> None:
    side.check_in_order(self._batches, self._next, features, labels)
    self._next += 1

  def step(self, features, labels) -> dict:
    with timing.spent('port steps'):
      return self._step(features, labels)

  def _step(self, features, labels) -> dict:
    self._take(features, labels)
    self._stepped = True
    with self._precision(), port_draws.stepping():
      taken = self.model.train_step(features, labels)
    self._rate = float(self.model.learning_rate())
    values = {'loss': float(taken['loss']),
              'examples': int(taken.get('examples',
                                        side.batch_size(features))),
              'gradients': {self._theirs(n): np.asarray(g)
                            for n, g in taken['gradients'].items()},
              'learning_rate': self._rate}
    if 'host_call' in taken:
      values['host_call'] = {k: np.asarray(v)
                             for k, v in taken['host_call'].items()}
    return values

  def learning_rate(self) -> float:
    return self._rate

  def rates_at(self, steps: list[int]) -> list[float] | None:
    """The model's learning_rate_at(step) at each step, where it has one
    (an optional member of ArrayModel)."""
    rate_at = getattr(self.model, 'learning_rate_at', None)
    if rate_at is None:
      return None
    with self._precision():
      rates = [rate_at(step) for step in steps]
    return None if None in rates else [float(r) for r in rates]

  def reordered_step(self, features, labels, reorder: bool = True) -> dict:
    # What the step on the same batch, its examples in another order within
    # each replica's share (or in their own), leaves; then the state it
    # held, as it was.
    examples = side.batch_size(features)
    index = (side.example_order(examples, self.replicas) if reorder else
             np.arange(examples))
    saved, held_rate = self._held(), self._rate
    # What the noise adds: a runner's first step compiles its programs,
    # whichever step it is, and is the port's own (its next would have).
    phase = 'port noise steps' if self._stepped else 'port steps'
    self._stepped = True
    try:
      with timing.spent(phase), self._precision(), port_draws.stepping():
        taken = self.model.train_step(side.reordered(features, index),
                                      side.reordered(labels, index))
      rate = float(self.model.learning_rate())
      # Copies too, before the state is set back over any views of it.
      return {'loss': float(taken['loss']),
              'gradients': _copied({self._theirs(n): g for n, g in
                                    taken['gradients'].items()}),
              'state': _copied(self.state()),
              'slots': _copied(self.slots(rate)),
              'averages': _copied(self.averages())}
    finally:
      self._set_back(saved)
      self._rate = held_rate

  def own_draws(self) -> dict | None:
    # Recorded while the deterministic checks take its steps (its
    # framework's seeded(): pair/port_draws.py).
    return port_draws.current()

  def step_as_trained(self, features, labels) -> float:
    self._take(features, labels)
    self._stepped = True
    with self._precision(), port_draws.stepping():
      return float(self.model.train_step(features, labels)['loss'])

  def predict(self, features) -> dict[str, np.ndarray]:
    with self._precision():
      return {k: np.asarray(v)
              for k, v in self.model.predict(features).items()}

  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    if self.port.layer_outputs is None:
      return {}
    with self._precision():
      return {k: np.asarray(v).ravel() for k, v in
              self.port.layer_outputs(self.model, features).items()}

  def evaluate(self, batches: list) -> dict[str, float]:
    with self._precision():
      return {k: float(v) for k, v in self.model.evaluate(batches).items()}

  def first_pipeline_batch(self):
    if self.port.input_batch is None:
      return None
    features, labels = self.port.input_batch(dict(self.params))
    return features, labels

  def train_window(self, steps: int) -> None:
    for _ in range(steps):
      features, labels = self._batches[self._next % len(self._batches)]
      self._next += 1
      # Timed (--speed) at the device's own precision, as it trains.
      self.model.train_step(features, labels)

  def serve(self, base_dir: str, inputs: dict) -> dict[str, np.ndarray]:
    with timing.spent('exports'), self._precision():
      path = self.port.export(self.model, base_dir)
    with timing.spent('loading exports back'), self._precision():
      return {k: np.asarray(v) for k, v in
              self.port.serve(path, inputs).items()}


def _copied(arrays: dict) -> dict:
  return {k: np.array(v, copy=True) for k, v in arrays.items()}
