"""The port's side of a comparison: its own pieces, run under a strategy.

``PortRunner`` executes what a ``port.Port`` names (model, optimizer,
trainer, predict, export) as the port's training would; ``legacy.LegacyRunner``
executes the legacy model_fn as TPUEstimator does off a TPU. Both are fed the
same batches, those of the legacy input_fn (the port's own input pipeline is
compared with it separately, by the ``inputs`` check), so step k of one sees
the examples step k of the other sees, and the checks compare what they
compute.
"""
import contextlib
import functools
from typing import Any, Iterator

import numpy as np
import tensorflow as tf

from kit_core import keras_compat
from kit_core import process
from kit_core import timing
from migration_tools import outputs as outputs_lib
from migration_tools.pair import optimizers
from migration_tools.pair.frameworks.keras_tf import own_draws as own_draws_lib
from migration_tools.pair.frameworks.keras_tf import port as port_lib
from migration_tools.pair import precision
from migration_tools.pair import serving
from migration_tools.pair import side


@contextlib.contextmanager
def dropout_disabled():
  """While graphs are built inside the block, every Keras and
  tf.compat.v1.layers Dropout, and tf.nn.dropout, pass their input through."""
  layer = tf.keras.layers.Dropout
  saved = (layer.call, tf.nn.dropout, tf.compat.v1.nn.dropout)
  layer.call = lambda self, inputs, training=None: tf.identity(inputs)
  tf.nn.dropout = lambda x, *args, **kwargs: tf.identity(x)
  tf.compat.v1.nn.dropout = tf.nn.dropout
  try:
    yield
  finally:
    layer.call, tf.nn.dropout, tf.compat.v1.nn.dropout = saved


def _concatenate(structures: list):
  return tf.nest.map_structure(lambda *xs: np.concatenate(xs), *structures)


def distribute_batches(strategy: tf.distribute.Strategy, batches: list,
                       global_batch: int, repeat: bool = False):
  """The legacy batches as a distributed dataset of (features, labels), or
  (features,) without labels: each replica gets global_batch // replicas
  consecutive examples of each batch, in order; again from the first, for
  ever, if repeat."""
  features = _concatenate([f for f, _ in batches])
  element = (features,)
  if batches[0][1] is not None:
    element = (features, _concatenate([l for _, l in batches]))
  dataset = tf.data.Dataset.from_tensor_slices(element).batch(
      global_batch, drop_remainder=True)
  if repeat:
    dataset = dataset.repeat()
  return strategy.experimental_distribute_dataset(dataset)


def local_concat(strategy: tf.distribute.Strategy, value):
  """A per-replica structure as one batch, replicas in order."""
  return tf.nest.map_structure(
      lambda *parts: np.concatenate([p.numpy() for p in parts]),
      *strategy.experimental_local_results(value))


def _values(variables: list) -> dict[int, tuple]:
  """{id: (variable, its value now, or None where it is all zeros: an
  optimizer's slots before its first step, at BERT-base Adam's two slots
  0.9 GB)}, each variable once."""
  return {id(v): (v, v.numpy() if tf.math.count_nonzero(v) else None)
          for v in variables}


def _set_back(values: dict[int, tuple]) -> None:
  """Each variable of _values(...) to the value it held then."""
  for variable, value in values.values():
    variable.assign(tf.zeros_like(variable) if value is None else value)


def _watched(method):
  """A method that calls the port's trainer: a variable made in it (by a
  first trace) was not made with the runner, and rewind() could not set it
  back."""
  @functools.wraps(method)
  def call(self, *args, **kwargs):
    def made(next_creator, **kw):
      self._made_later = True
      return next_creator(**kw)
    with tf.variable_creator_scope(made):
      return method(self, *args, **kwargs)
  return call


class PortRunner(side.PortSide):
  """The port's model, optimizer and trainer under one strategy, fed the
  legacy batches; state is read and written under the legacy names."""

  def __init__(self, port: port_lib.Port, strategy: tf.distribute.Strategy,
               params: dict, batches: list,
               dots: precision.Dots | None = None):
    """Builds the port's model, optimizer and trainer in strategy.scope().

    Args:
      port: the port's pieces (checked with port.check_port).
      strategy: where the port runs.
      params: the legacy model_fn's params (legacy.model_params).
      batches: the legacy (features, labels) batches the steps take in turn.
      dots: the precision its dots compute in at_deployed_precision()
        (the rounding emulated); None: float32 throughout.
    """
    self.port, self.strategy, self.params = port, strategy, params
    self._dots = dots or precision.Dots()
    self._batches = batches
    self._next = 0  # The batch the next step takes.
    self._endless = None  # train_window's iterator, made when first timed.
    self._made_later = False  # Whether its trainer made a variable since.
    self.global_batch = len(tf.nest.flatten(batches[0][0])[0])
    # Every variable made with it, in order: for rewind() and the inferred
    # map.
    with port_lib.creations() as made, \
        keras_compat.names_as_first_built('port'):
      with strategy.scope():
        self.model = port.build_model(dict(params))
        self.optimizer = port_lib.check_optimizer(
            port.make_optimizer(dict(params)))
        # Slots exist before the first step, so they can be set and read.
        self.optimizer.build(self.model.trainable_variables)
      self.trainer = port.trainer_class(self.model, self.optimizer, strategy,
                                        self.global_batch)
    self._variables = port_lib.in_creation_order(
        port_lib.state_variables(self.model), made, strategy)
    self.pairs: dict[str, str] = {}
    self._legacy_name: dict[str, str] = {}
    # {legacy slot suffix: port token} when the legacy optimizer is read by
    # what it does (legacy_optimizer), else None: the tables' slots.
    self.slot_map: dict[str, str] | None = None
    self._dataset = distribute_batches(strategy, batches, self.global_batch)
    self._iterators()
    # A variable made in strategy.scope() reaches the recorder as each of
    # its replicas' copies, and a Keras 3 one as the tf.Variable inside it:
    # one the runner reads stands for those.
    known = self._all_variables()
    held = [keras_compat.backing_variable(v) for v in known]
    copies = {id(c) for v in known + [h for h in held if h is not None]
              for c in (v, *strategy.experimental_local_results(v))}
    self._as_made = _values(known + [v for v in made if id(v) not in copies])

  def _iterators(self) -> None:
    """The steps' and the probe's iterators, from the first batch."""
    # Kept: dropping a distributed iterator can block for a minute on TF 2.15
    # (kit_core/process.py), and a comparison makes many.
    self._iterator = process.keep_alive(iter(self._dataset))
    self._probe = process.keep_alive(iter(self._dataset))
    self._next = 0

  def rewind(self) -> bool:
    # Every variable made with the runner (the model's, the optimizer's, the
    # trainer's: metrics, logged values, averages) back to its value then;
    # its traced step functions are kept, which is what a fresh runner would
    # spend seconds on. One made since (by a first trace) could not be set
    # back: a fresh runner is needed.
    if self._made_later or (
        {id(v) for v in self._all_variables()} - set(self._as_made)):
      return False
    _set_back(self._as_made)
    self._iterators()
    self._endless = None
    return True

  @property
  def replicas(self) -> int:
    return self.strategy.num_replicas_in_sync

  def describe_run(self) -> dict[str, Any]:
    return {'reference': f'on {self.replicas} replica'
                         f'{"s" if self.replicas > 1 else ""}',
            'warm_start': {}, 'optimizer': type(self.optimizer).__name__,
            'rate_source': 'the optimizer\'s learning rate'}

  def shapes(self) -> dict[str, tuple]:
    """{name: shape} of the model's variables, in creation order."""
    return {n: tuple(v.shape) for n, v in self._variables.items()}

  def use_map(self, pairs: dict[str, str]) -> None:
    """{legacy name: port name}: how state is named from now on."""
    self.pairs = dict(pairs)
    self._legacy_name = {ours: theirs for theirs, ours in pairs.items()}

  def state(self) -> dict[str, np.ndarray]:
    """The model's variables under their legacy names (through the map); a
    variable the map does not name keeps the port's name."""
    return {self._legacy_name.get(name, name): v.numpy()
            for name, v in self._variables.items()}

  def set_state(self, values: dict[str, np.ndarray]) -> None:
    for theirs, ours in self.pairs.items():
      self._variables[ours].assign(values[theirs])

  def describe_optimizer(self) -> optimizers.Description:
    return optimizers.describe_port(self.optimizer)

  def slot_tokens(self) -> list[str]:
    """The tokens of the optimizer's slots (e.g. 'adam_m'), in its order;
    not its moving averages (use_ema), which are compared as averages."""
    return [t for t in optimizers.slot_tokens(optimizers.port_slot_variables(
        self.optimizer, self._legacy_name)) if t != self._average_token()]

  def _average_token(self) -> str | None:
    return (keras_compat.AVERAGE_TOKEN if keras_compat.optimizer_averages(
        self.optimizer, self.model.trainable_variables) else None)

  def use_slot_map(self, slot_map: dict[str, str]) -> None:
    """Pairs slots by {legacy suffix: port token} from now on."""
    self.slot_map = dict(slot_map)

  def _slot_variables(self) -> dict[tuple, Any]:
    """{(legacy variable name, legacy slot name): slot variable}."""
    if self.slot_map is None:
      return optimizers.port_slots(self.optimizer, self._legacy_name)
    token = self._average_token()
    return optimizers.map_slots(
        {k: v for k, v in optimizers.port_slot_variables(
            self.optimizer, self._legacy_name).items() if k[1] != token},
        self.slot_map)

  def _kind(self) -> str | None:
    """The table kind whose slot conventions apply; None: taken as is."""
    return None if self.slot_map is not None else (
        self.describe_optimizer().kind)

  def slots(self, rate: float) -> dict[tuple, np.ndarray]:
    """{(legacy variable name, legacy slot): value}, in the TF 1
    convention (optimizers.to_legacy at the rate just applied)."""
    kind = self._kind()
    return {key: optimizers.to_legacy(kind, key[1], v.numpy(), rate)
            for key, v in self._slot_variables().items()}

  def set_slots(self, values: dict[tuple, np.ndarray], rate: float) -> None:
    kind = self._kind()
    for key, variable in self._slot_variables().items():
      if key in values:
        variable.assign(optimizers.to_port(kind, key[1], values[key], rate))

  def _averages(self) -> dict[str, Any]:
    """{legacy name: average variable} of the port's moving averages."""
    if self.port.averages is not None:
      pairs = self.port.averages(self.trainer)
    else:
      pairs = keras_compat.optimizer_averages(
          self.optimizer, self.model.trainable_variables)
    found = {}
    for variable, average in pairs:
      path = keras_compat.variable_path(variable)
      found[self._legacy_name.get(path, path)] = average
    return found

  def averages(self) -> dict[str, np.ndarray]:
    return {name: v.numpy() for name, v in self._averages().items()}

  def set_averages(self, values: dict[str, np.ndarray]) -> None:
    for name, variable in self._averages().items():
      if name in values:
        variable.assign(values[name])

  def global_step(self) -> int:
    return int(self.optimizer.iterations.numpy())

  def set_global_step(self, step: int) -> None:
    self.optimizer.iterations.assign(step)

  @contextlib.contextmanager
  def at_deployed_precision(self) -> Iterator[precision.Dots]:
    # Its predict runs eagerly, so that a rounding emulated reaches it.
    with self._dots.deployed():
      yield self._dots

  def predict(self, features) -> dict[str, np.ndarray]:
    """The port's counterpart of the PREDICT outputs, by name."""
    features = tf.nest.map_structure(tf.constant, features)
    if self.port.predict is not None:
      outputs = self.port.predict(self.model, features)
    else:
      outputs = self.model(features, training=False)
    return {k: np.asarray(v) for k, v in outputs_lib.as_dict(outputs).items()}

  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    return port_lib.layer_outputs(self.model, features)

  @tf.function
  def _probe_step(self, iterator):
    """The replicas' loss_and_gradients on iterator's next batch; in a
    function, as in the port's step (its gradients may be graph-only)."""
    variables = self.model.trainable_variables

    def dense(*args):
      per_example, outputs, gradients = self.trainer.loss_and_gradients(*args)
      # Dense, also for embeddings (IndexedSlices), to be compared; a
      # variable the loss never reaches (tape.gradient's None) as zeros.
      return per_example, outputs, [
          tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
          for v, g in zip(variables, gradients)]
    return self.strategy.run(dense, args=next(iterator))

  def _take(self, features, labels) -> None:
    """The batch the next step takes must be this one: the runner feeds
    the legacy batches in order through a distributed dataset made once."""
    side.check_in_order(self._batches, self._next, features, labels)
    self._next += 1

  def step(self, features, labels) -> dict:
    """The loss, gradients and learning rate of the step on this batch (the
    next one); then takes it.

    Gradients are what the port's replicas compute, summed over replicas as
    the strategy's all-reduce sums them before the update.
    """
    with timing.spent('port steps'):
      return self._step(features, labels)

  def _step(self, features, labels) -> dict:
    self._take(features, labels)
    return self._answer(self._probe, self._iterator)

  @_watched
  def _answer(self, probe, steps) -> dict:
    """The step on the next batch of probe and of steps (the same batch):
    its loss, gradients and rate, once taken."""
    # A layer may update state when called in training (Keras batch norm
    # moves its statistics): the probe's updates are undone, the step's kept.
    kept = [(v, v.numpy()) for v in self.model.non_trainable_variables]
    per_example, _, gradients = self._probe_step(probe)
    for variable, value in kept:
      variable.assign(value)
    summed = [self.strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None)
              for g in gradients]
    # Averaged as the legacy loss is (each replica's mean, as each TPU core's
    # model_fn took it, then their mean), so equal losses compare equal to
    # the bit.
    parts = self.strategy.experimental_local_results(per_example)
    loss = float(np.mean(np.array([(tf.reduce_sum(p) / p.shape[0]).numpy()
                                   for p in parts], np.float32)))
    examples = sum(int(p.shape[0]) for p in parts)
    self.trainer.train_steps(steps, tf.constant(1))
    # What the port's summaries log of this step, before its metrics reset.
    logged = None if self.port.host_call is None else {
        k: np.asarray(v) for k, v in self.port.host_call(self.trainer).items()}
    self.trainer.reset()
    names = [self._legacy_name.get(keras_compat.variable_path(v))
             for v in self.model.trainable_variables]
    values = {'loss': loss, 'examples': examples,
              'gradients': {n: g.numpy() for n, g in zip(names, summed)},
              'learning_rate': self.learning_rate()}
    if logged is not None:
      values['host_call'] = logged
    return values

  def reordered_step(self, features, labels, reorder: bool = True) -> dict:
    # The same batch, its examples in another order within each replica's
    # share (or in their own), through a dataset of its own; then every
    # variable of the model, the optimizer and the averages as it was.
    examples = side.batch_size(features)
    index = (side.example_order(examples, self.replicas) if reorder else
             np.arange(examples))
    dataset = distribute_batches(
        self.strategy, [(side.reordered(features, index),
                         side.reordered(labels, index))], self.global_batch)
    probe, steps = (process.keep_alive(iter(dataset)) for _ in range(2))
    saved = _values(self._all_variables())
    try:
      with timing.spent('port noise steps'):
        answer = self._answer(probe, steps)
      return {'loss': answer['loss'], 'gradients': answer['gradients'],
              'state': self.state(),
              'slots': self.slots(answer['learning_rate']),
              'averages': self.averages()}
    finally:
      _set_back(saved)

  def _all_variables(self) -> list:
    """The model's, the optimizer's (its step, slots, averages) and the
    port's averages' variables, each once."""
    held = self.optimizer.variables
    found = [*self.model.variables, *(held() if callable(held) else held),
             *self._averages().values()]
    return list({id(v): v for v in found}.values())

  def own_draws(self) -> dict | None:
    # Read while the deterministic checks trace the port's steps (the
    # adapter's seeded()); the dropout check's steps draw.
    current = own_draws_lib.CURRENT
    return None if current is None else current.to_json()

  def learning_rate(self) -> float:
    """The rate of the optimizer's last step."""
    return keras_compat.applied_learning_rate(self.optimizer)

  def rates_at(self, steps: list[int]) -> list[float] | None:
    """Its optimizer's schedule at each step (keras_compat.rate_at)."""
    rates = [keras_compat.rate_at(self.optimizer, step) for step in steps]
    return None if None in rates else rates

  @_watched
  def step_as_trained(self, features, labels) -> float:
    """Takes the step on this batch (the next one), all of it inside the
    port's step function, and returns the loss that step's metric recorded
    (the same forward pass, so the same dropout mask, as the update)."""
    self._take(features, labels)
    self.trainer.train_steps(self._iterator, tf.constant(1))
    return self.trainer.reset()['loss']

  @_watched
  def evaluate(self, batches: list) -> dict[str, float]:
    """The port's evaluation over the legacy batches."""
    dataset = distribute_batches(self.strategy, batches, self.global_batch)
    self.trainer.reset()
    self.trainer.eval_steps(process.keep_alive(iter(dataset)),
                            tf.constant(len(batches)))
    return self.trainer.reset()

  def first_pipeline_batch(self):
    """The first global batch of the port's own input pipeline, replicas
    concatenated: (features, labels or None); None if the port gives none."""
    if self.port.input_pipeline is None:
      return None
    dataset = self.port.input_pipeline(self.strategy, dict(self.params))
    element = next(process.keep_alive(iter(dataset)))
    features, labels = side.split_element(element)
    return (local_concat(self.strategy, features),
            None if labels is None else local_concat(self.strategy, labels))

  @_watched
  def train_window(self, steps: int) -> None:
    """steps training steps in one call of the port's train_steps (as
    steps_per_execution runs them), on the legacy batches again and again;
    returns once they ran (for timing)."""
    if self._endless is None:
      self._endless = process.keep_alive(iter(distribute_batches(
          self.strategy, self._batches, self.global_batch, repeat=True)))
    self.trainer.train_steps(self._endless, tf.constant(steps)).numpy()

  def export(self, base_dir: str) -> str:
    with timing.spent('exports'):
      return self.port.export(self.model, base_dir, self.strategy)

  def serve(self, base_dir: str, inputs: dict) -> dict[str, np.ndarray]:
    """The port's own export of the current state, loaded back, on inputs."""
    return serving.serve(self.export(base_dir), inputs)
