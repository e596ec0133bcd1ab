"""The port contract: what a team hands the harness about its migrated model.

The harness (``migration-compare``) runs a legacy ``model_fn`` and the team's
port side by side. It does not guess how the port is built: the team writes
one function, named on the command line (``--port=my_port.harness:make_port``),
that returns a ``Port``. Each field is a piece of the port's own code, used as
is, so that what is proven is what trains. ``params`` is the dict the legacy
model_fn gets (the user's ``--params``, ``batch_size`` = the global batch,
``use_tpu=False``):

  build_model     (params) -> tf.keras.Model; called in ``strategy.scope()``.
                  It takes the features as the legacy input_fn yields them
                  (a tensor or a dict of tensors).
  make_optimizer  (params) -> a Keras optimizer; in ``strategy.scope()``.
                  Any optimizer: one the kit does not know (e.g. a port of
                  BERT's AdamWeightDecayOptimizer) is compared by its updates
                  and its slots (see slot_map).
  trainer_class   a class following the ``Trainer`` protocol below.
  input_pipeline  optional (strategy, params) -> the port's distributed
                  dataset of (features, labels) over the same examples, in
                  the same order, as the legacy input_fn given those params
                  (the ``inputs`` check compares them).
  export          optional (model, base_dir, strategy) -> a SavedModel path
                  whose serving_default takes the legacy serving receiver's
                  inputs by name.
  predict         optional (model, features) -> {name: tensor}, the port's
                  counterpart of the model_fn's PREDICT outputs; default:
                  ``model(features, training=False)``, named 'output' if it
                  is a single tensor.
  variable_map    optional {legacy variable name: port variable name} over
                  the model's state (weights and, e.g., batch-norm moving
                  statistics); None: inferred (``variable_map.infer``).
  output_map      {legacy prediction/serving output: port output}, for
                  outputs named otherwise; unlisted ones keep their names.
  metric_map      {legacy eval metric: port metric (a key of reset())}.
  averages        optional (trainer) -> [(model variable, its moving
                  average)]: the port's counterpart of the model_fn's
                  tf.train.ExponentialMovingAverage, kept by its trainer;
                  default: its Keras optimizer's (use_ema=True), if any.
                  Compared with the legacy shadows at every step.
  host_call       optional (trainer) -> {name: value}: what the port's
                  summaries log at the step just taken, by the names of the
                  tensors the legacy host_call receives (its dict's keys, or
                  its function's parameters); compared at every step.
  not_compared    {legacy variable name or shell-style pattern: why}: state
                  the legacy training step moves that the port leaves out
                  on purpose (e.g. {'*/ExponentialMovingAverage': 'no EMA
                  in the port yet'}); ``inventory`` fails on any other
                  such variable with no counterpart, and lists these with
                  the reason.
  slot_map        {legacy slot suffix: port slot token}, for an optimizer
                  the kit does not read by its ops (e.g. BERT's
                  AdamWeightDecayOptimizer): the legacy slot
                  '<variable>/adam_m' is the port's slot named 'adam_m' by
                  add_variable_from_reference. Unlisted slots pair by equal
                  names, then in creation order (optimizers.resolve_slot_map).

``check_port`` turns every way a Port can fall short of this into one line
that names the missing piece and says what to do. docs/MIGRATION.md ("Plug
your own pair in") walks through writing one; ``kit_pair.mnist``
is the kit's own, ``tests/user_code/`` holds three more.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import numpy as np

from kit_core import keras_compat
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import variable_map

GUIDE = 'docs/MIGRATION.md, "Plug your own pair in"'


@runtime_checkable
class Trainer(Protocol):
  """The port's training and evaluation steps, as the harness drives them.

  Constructed as ``trainer_class(model, optimizer, strategy, global_batch)``
  with the model and optimizer built in ``strategy.scope()``; ``global_batch``
  is the batch over all replicas, what the legacy ``params['batch_size']``
  was. The harness calls the methods below and nothing else, so a port whose
  real trainer is Keras ``fit`` can wrap the same model, loss and optimizer in
  a small class of this shape (``migrate.custom_loop.Trainer`` is one).
  """

  def loss_and_gradients(self, features: Any, labels: Any = None
                         ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """One replica's forward and backward pass on its share of a batch.

    Called inside ``strategy.run`` in a ``tf.function``, as
    ``loss_and_gradients(features, labels)``, or as
    ``loss_and_gradients(features)`` when the legacy input_fn yields
    features alone (BERT's puts its labels inside them): give labels a
    default. It must not update anything.

    Args:
      features: this replica's share of the features, as the legacy
        input_fn yields them (a tensor or a dict of tensors).
      labels: this replica's labels, likewise; not passed when the input_fn
        yields none.

    Returns:
      (per_example_loss [per-replica batch], outputs, gradients): the
      gradients of the loss this replica contributes (divided by the *global*
      batch), one per ``model.trainable_variables``, in that order.
    """

  def train_steps(self, iterator: Iterator, steps: tf.Tensor) -> tf.Tensor:
    """Takes ``steps`` training steps from the distributed iterator.

    Args:
      iterator: an iterator over a distributed dataset of global batches,
        each replica getting global_batch // replicas consecutive examples
        (the harness feeds the legacy input_fn's batches): each element is
        the tuple (features, labels), or (features,) when the input_fn
        yields no labels, so ``strategy.run(step, args=next(iterator))``
        calls ``step(features, labels)`` or ``step(features)``.
      steps: a scalar int tensor.

    Returns:
      The optimizer's step after them (a tensor).
    """

  def eval_steps(self, iterator: Iterator, steps: tf.Tensor) -> None:
    """Runs ``steps`` evaluation steps, accumulating the metrics; iterator as
    train_steps gets it."""

  def reset(self) -> dict[str, float]:
    """Returns the metrics accumulated since the last reset, and resets them.

    Returns:
      {metric name: value}; 'loss' (the mean per-example loss) is required;
      every metric of the legacy model_fn's EVAL mode is compared with the
      one of the same name (or the name Port.metric_map gives).
    """


TRAINER_METHODS = ('loss_and_gradients', 'train_steps', 'eval_steps', 'reset')


@dataclasses.dataclass(frozen=True)
class Port:
  """The pieces of a migrated model that the harness exercises (see module)."""
  build_model: Callable[[dict], tf.keras.Model]
  make_optimizer: Callable[[dict], Any]
  trainer_class: type
  input_pipeline: Callable[[tf.distribute.Strategy, dict], Any] | None = None
  export: Callable[[tf.keras.Model, str, tf.distribute.Strategy], str] | None = (
      None)
  predict: Callable[[tf.keras.Model, Any], Any] | None = None
  variable_map: dict[str, str] | None = None
  output_map: dict[str, str] = dataclasses.field(default_factory=dict)
  metric_map: dict[str, str] = dataclasses.field(default_factory=dict)
  slot_map: dict[str, str] = dataclasses.field(default_factory=dict)
  not_compared: dict[str, str] = dataclasses.field(default_factory=dict)
  averages: Callable[[Any], list] | None = None
  host_call: Callable[[Any], dict] | None = None


def check_port(port: Any, where: str) -> Port:
  """Returns port if it follows the contract.

  Args:
    port: what the user's --port callable returned.
    where: how the user named it (for the message), e.g. 'my_port:make_port'.

  Raises:
    KitError: one line naming the first thing missing and what to do.
  """
  if not isinstance(port, Port):
    raise KitError(f'--port {where} returned a {type(port).__name__}, not a '
                   'migration_tools.pair.port.Port (or an '
                   'array_port.ArrayPort, for a port on JAX); return '
                   'Port(build_model=..., '
                   f'...) (see {GUIDE})')
  for field in ('build_model', 'make_optimizer', 'input_pipeline', 'export',
                'predict', 'averages', 'host_call'):
    value = getattr(port, field)
    if value is not None and not callable(value):
      raise KitError(f'the port\'s {field} is a '
                     f'{type(getattr(port, field)).__name__}, not a callable '
                     f'(see {GUIDE})')
  if not inspect.isclass(port.trainer_class):
    raise KitError('the port\'s trainer_class must be a class, constructed as '
                   'trainer_class(model, optimizer, strategy, global_batch)')
  missing = [m for m in TRAINER_METHODS
             if not callable(getattr(port.trainer_class, m, None))]
  if missing:
    raise KitError(f'the port\'s trainer_class {port.trainer_class.__name__} '
                   f'lacks {", ".join(missing)}: implement the Trainer '
                   'protocol of migration_tools/pair/port.py (see '
                   f'{GUIDE})')
  variable_map.check_maps(port, 'the port\'s ')
  return port


def check_optimizer(optimizer: Any) -> Any:
  """Returns the port's optimizer if the kit can read it: one of the
  current Keras API (build, then its variables), as make_optimizer made it.

  Raises:
    KitError: one line where it is a legacy Keras optimizer (Keras 2's
      OptimizerV2, tf.keras.optimizers.legacy: slots by get_slot, no
      build), or no optimizer at all.
  """
  kind = type(optimizer).__name__
  if callable(getattr(optimizer, 'build', None)):
    return optimizer
  if callable(getattr(optimizer, 'get_slot_names', None)):
    raise KitError(
        f'the port\'s optimizer ({kind}) is a legacy Keras optimizer '
        '(tf.keras.optimizers.legacy.Optimizer: slots by get_slot, no '
        'build), which the kit does not read: it reads the current Keras '
        'API (build, update_step, its variables); subclass '
        'tf.keras.optimizers.Optimizer instead, its update in update_step '
        f'(see {GUIDE})')
  raise KitError(f'the port\'s make_optimizer returned a {kind}, not a Keras '
                 f'optimizer (tf.keras.optimizers.Optimizer; see {GUIDE})')


def in_creation_order(variables: dict, made: list,
                      strategy: tf.distribute.Strategy | None = None) -> dict:
  """variables ({path: variable}, as Keras tracks them: by the order the
  layers were assigned as attributes) in the order they were created (made,
  as creations() recorded them), which is the legacy model's where the port calls
  its layers as the model_fn did: an inferred map pairs same-shaped
  variables in that order (e.g. a residual block that assigns its shortcut's
  batch norm first and calls it last)."""
  strategy = strategy or tf.distribute.get_strategy()
  position: dict[int, int] = {}
  for i, variable in enumerate(made):
    position.setdefault(id(variable), i)

  def created(item) -> int:
    variable = item[1]
    held = keras_compat.backing_variable(variable)
    copies = [c for v in (variable, held) if v is not None
              for c in (v, *strategy.experimental_local_results(v))]
    return min((position[id(c)] for c in copies if id(c) in position),
               default=len(made))
  return dict(sorted(variables.items(), key=created))


@contextlib.contextmanager
def creations() -> Iterator[list]:
  """A list of every variable created inside, as it is created (for
  in_creation_order)."""
  made = []

  def recorded(next_creator, **kwargs):
    made.append(next_creator(**kwargs))
    return made[-1]
  with tf.variable_creator_scope(recorded):
    yield made


def state_variables(model: tf.keras.Model) -> dict[str, tf.Variable]:
  """The model's variables (weights and e.g. moving statistics) by path
  ('conv1/kernel' on Keras 2 and 3), in creation order.

  Raises:
    KitError: two variables share a path (Keras lets sibling layers share
      a name), which would leave all but one of them out.
  """
  found = keras_compat.model_state(model)
  if len(found) == len(keras_compat.state_list(model)):
    return found
  shared: dict[str, list] = {}
  for variable in keras_compat.state_list(model):
    shared.setdefault(keras_compat.variable_path(variable), []).append(
        variable)
  said = '; '.join(
      f'{path} ({len(held)} variables, shapes '
      f'{", ".join(str(list(v.shape)) for v in held)})'
      for path, held in shared.items() if len(held) > 1)
  raise KitError(f'the port\'s model has variables that share a path: '
                 f'{said}; the kit keys variables by path, and Keras lets '
                 'sibling layers share a name: give each layer a name of its '
                 'own (e.g. Dense(64, name=\'dense_2\'))')


def _owning_layers(model) -> dict[str, Any]:
  """{scope: layer} of every layer (nested ones too) that owns variables
  itself, not through a sub-layer; its scope is its first variable's."""
  found = {}

  def walk(layer):
    children = list(layer._flatten_layers(  # pylint: disable=protected-access
        include_self=False, recursive=False))
    inherited = {id(w) for child in children for w in child.weights}
    own = [w for w in layer.weights if id(w) not in inherited]
    if own:
      found.setdefault(keras_compat.variable_path(own[0]).rpartition('/')[0],
                       layer)
    for child in children:
      walk(child)

  walk(model)
  return found


def layer_outputs(model: tf.keras.Model, features) -> dict[str, np.ndarray]:
  """Each layer that owns variables: its output in inference on the first
  example, flattened, by the scope of its variables (compare/layers); the
  model called on features as a whole."""
  recorded, wrapped = {}, []
  for name, layer in _owning_layers(model).items():
    def call(*args, _call=layer.call, _name=name, **kwargs):
      output = _call(*args, **kwargs)
      # Its last call, as the legacy side's scope entered again (ALBERT's
      # shared layer) gives its last call's (legacy._layer_tensors).
      recorded[_name] = output
      return output
    wrapped.append((layer, 'call' in vars(layer), layer.call))
    layer.call = call
  try:
    model(tf.nest.map_structure(tf.constant, features), training=False)
  finally:
    for layer, own, original in wrapped:
      if own:
        layer.call = original
      else:
        del layer.call
  batch = len(tf.nest.flatten(features)[0])
  result = {}
  for name, output in recorded.items():
    flat = np.asarray(tf.nest.flatten(output)[0]).ravel()
    result[name] = flat[:flat.size // batch]
  return result
