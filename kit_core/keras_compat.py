"""The few places where Keras 2 (TF 2.15) and Keras 3 (TF 2.16 and later) differ
for the kit, in one module, so the rest of the code reads the same on both.

``tf.keras`` is Keras 2.15 on TF 2.15 and Keras 3 on TF 2.16+ (unless
``TF_USE_LEGACY_KERAS=1`` swaps in tf-keras, which is Keras 2 again).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import importlib
from typing import Iterator

from kit_core import lazy
from kit_core.lazy import tensorflow as tf



@functools.cache
def keras_major() -> int:
  """2 or 3: the major version of the Keras behind ``tf.keras``, or of
  Keras itself where there is no TensorFlow (the jax profile)."""
  version = (getattr(tf.keras, '__version__', None)
             if lazy.installed('tensorflow') else None)
  if version is None:  # Keras 2.15's tf.keras namespace carries no version.
    import keras  # pylint: disable=g-import-not-at-top
    version = keras.__version__
  return int(version.split('.')[0])


def is_keras3() -> bool:
  return keras_major() >= 3


def _name_counters() -> dict | None:
  """The counters Keras numbers auto-named layers by ('conv2d_3'), as it
  holds them (mutable); None where this Keras keeps them elsewhere."""
  root = tf.keras.layers.Layer.__module__.split('.')[0]  # keras, tf_keras
  try:
    if is_keras3():
      state = importlib.import_module(f'{root}.src.backend.common.global_state')
      return state.get_global_attribute(
          'object_name_uids', default=collections.defaultdict(int),
          set_to_default=True)
    # Keras 2 keys them by TensorFlow's default graph.
    return importlib.import_module(
        f'{root}.src.backend').get_default_graph_uid_map()
  except (ImportError, AttributeError):
    return None


# The counters as the first build under names_as_first_built found them.
_FIRST_COUNTERS: dict[str, dict] = {}


@contextlib.contextmanager
def names_as_first_built(key: str) -> Iterator[None]:
  """Inside, Keras numbers auto-named layers as it did inside the first
  time for key: a model built again (the kit builds a port once per
  replica count) gets the names its first build got ('resnet/conv2d', not
  'resnet/conv2d_6'), which its variables are paired by."""
  counters = _name_counters()
  if counters is not None:
    first = _FIRST_COUNTERS.setdefault(key, dict(counters))
    counters.clear()
    counters.update(first)
  yield


def compute_dtype(model) -> str:
  """The dtype a Keras model computes in ('float32', 'bfloat16' under
  mixed_bfloat16), on Keras 2 and 3."""
  return str(getattr(model, 'compute_dtype', None) or 'float32')


def backing_variable(variable):
  """The tf.Variable that holds a Keras 3 variable's value (Keras 3 wraps
  one); None for a tf.Variable (Keras 2's are tf.Variables)."""
  inner = getattr(variable, '_value', None)
  return inner if isinstance(inner, tf.Variable) else None


def variable_path(variable) -> str:
  """'conv1/kernel' on both Keras versions.

  Keras 2 names a variable 'conv1/kernel:0'; Keras 3 names it 'kernel' and
  keeps the layer in ``path`` ('conv1/kernel').
  """
  path = getattr(variable, 'path', None)
  if isinstance(path, str) and path:
    return path
  return variable.name.split(':')[0]


# Keras 3 keeps the state of its random ops (dropout's seed) in a variable of
# the model; it is no weight, and no legacy model has it.
_RNG_STATE = 'seed_generator_state'


def dropout_kwargs(checkpointed_random: bool) -> dict:
  """Keyword arguments of tf.keras.layers.Dropout for its random state.

  checkpointed_random: draw from a tf.random.Generator whose state
  ``random_state`` can save, so that a resumed run draws what the
  uninterrupted one would have. Keras 3 always draws so (from its seed
  generator). Keras 2's default, TF 1's stateful random ops, matches a legacy
  model's draws but keeps its state inside the op, where no checkpoint
  reaches.
  """
  if checkpointed_random and not is_keras3():
    return {'rng_type': 'stateful'}
  return {}


def random_state(model: tf.keras.Model,
                 strategy: tf.distribute.Strategy) -> list:
  """The variables that hold the state of the model's random ops (dropout),
  for a checkpoint: neither Keras saves them with the model.

  Keras 2 creates a layer's generator at its first call in training, so this
  makes one call on zeros first. Empty for Keras 2 layers built without
  ``dropout_kwargs(True)``.
  """
  if not is_keras3():
    zeros = tf.zeros([1, *model.input_shape[1:]], model.inputs[0].dtype)
    strategy.run(lambda: model(zeros, training=True))
  state = []
  for layer in model.layers:
    if is_keras3():
      generator = getattr(layer, 'seed_generator', None)
    else:
      generator = getattr(getattr(layer, '_random_generator', None),
                          '_generator', None)
    if generator is not None:
      state.append(generator.state)
  return state


def state_list(model: tf.keras.Model) -> list:
  """The model's variables (weights and e.g. moving statistics) in creation
  order, without Keras 3's random-op state."""
  return [v for v in model.variables
          if not variable_path(v).endswith(_RNG_STATE)]


def model_state(model: tf.keras.Model) -> dict:
  """state_list by ``variable_path`` (two of one path: the last)."""
  return {variable_path(v): v for v in state_list(model)}


def optimizer_averages(optimizer, variables) -> list[tuple]:
  """[(variable, its moving average)] of a Keras optimizer built with
  use_ema=True on variables (in that order); [] without EMA.

  Keras 2 starts an average at its variable's value and moves it by
  ema_momentum from the first step; Keras 3 starts it at 0 and sets it to
  the variable at the first step (iterations 0), then moves it likewise.
  """
  averages = getattr(optimizer, '_model_variables_moving_average', None)
  if not getattr(optimizer, 'use_ema', False) or not averages:
    return []
  return list(zip(variables, averages))


# The token a Keras optimizer names its moving averages by (use_ema).
AVERAGE_TOKEN = 'average'


def slot_name(path: str, token: str) -> str:
  """The name a Keras optimizer gives the slot `token` of the variable at
  `path`: 'm/conv1/kernel' on Keras 2, 'conv1_kernel_momentum' on Keras 3."""
  if is_keras3():
    return f'{path.replace("/", "_")}_{token}'
  return f'{token}/{path}'


def applied_learning_rate(optimizer) -> float:
  """The learning rate the optimizer's last update applied.

  Keras 2 keeps a schedule's rate as evaluated at the last update; Keras 3
  evaluates the schedule at the current step, which the update has already
  advanced, so the applied rate is the schedule at the step before.
  """
  if is_keras3():
    schedule = getattr(optimizer, '_learning_rate', None)
    if isinstance(schedule, tf.keras.optimizers.schedules.LearningRateSchedule):
      rate = schedule(optimizer.iterations - 1)
    else:
      rate = optimizer.learning_rate
  else:
    rate = optimizer.learning_rate
    if callable(rate):
      rate = rate(optimizer.iterations)
  return float(tf.convert_to_tensor(rate).numpy())


def rate_at(optimizer, step: int) -> float | None:
  """The learning rate the optimizer's update applies at this step (its
  schedule called at the step, a constant rate as it is), or None where it
  is neither a number nor a LearningRateSchedule."""
  schedule = getattr(optimizer, '_learning_rate', None)
  if isinstance(schedule,
                tf.keras.optimizers.schedules.LearningRateSchedule):
    return float(tf.convert_to_tensor(schedule(step)).numpy())
  rate = optimizer.learning_rate
  if callable(rate) and not isinstance(rate, tf.Variable):
    return None
  return float(tf.convert_to_tensor(rate).numpy())


def add_to_loss_tracker(model: tf.keras.Model, loss: tf.Tensor,
                        batch_size: tf.Tensor) -> None:
  """Feeds a custom train_step's loss to Keras 3's 'loss' metric.

  Keras 2's ``compute_loss`` updates the compiled loss metric itself; Keras 3's
  does not (its own train_step does it), so a custom step must, or fit logs a
  loss of 0. ``loss`` is the replica's share (scaled by 1/replicas), as
  ``compute_loss`` returns it under a strategy; the metric takes the mean.
  """
  if not is_keras3():
    return
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  for metric in model.metrics:
    if metric.name == 'loss':
      metric.update_state(loss * replicas, sample_weight=batch_size)
      return
  raise ValueError('the model has no "loss" metric: compile it with a loss')


def fit_needs_own_steps(model: tf.keras.Model) -> bool:
  """Whether Keras 3's multi-step fit would fail on this model's strategy.

  Keras 3 runs several steps per execution in a ``tf.while_loop`` around a
  ``tf.cond``; with several replicas under MirroredStrategy that graph fails
  ("You must feed a value for placeholder tensor", keras-team/keras#19246,
  open). One step per execution, or one replica, works.
  """
  return (is_keras3() and model.steps_per_execution > 1 and
          model.distribute_strategy.num_replicas_in_sync > 1)


def multi_step_train_function(model: tf.keras.Model):
  """A fit() train function that runs ``model.steps_per_execution`` steps in
  a ``tf.range`` loop of ``strategy.run`` calls, as the custom loop does.

  For Keras 3 under keras-team/keras#19246 (see ``fit_needs_own_steps``). It
  calls the model's own ``train_step`` and returns its metrics reduced over
  the replicas (the mean, as Keras 3 does). The data must not run out within
  an execution: fit's training datasets repeat.
  """
  strategy = model.distribute_strategy
  steps = model.steps_per_execution

  @tf.function
  def train_function(iterator):
    for _ in tf.range(steps):
      strategy.run(model.train_step, args=(next(iterator),))
    results = strategy.run(model.get_metrics_result)
    return {name: strategy.reduce(tf.distribute.ReduceOp.MEAN, value,
                                  axis=None)
            for name, value in results.items()}

  return train_function


def fit_unsupported_reason(strategy: tf.distribute.Strategy) -> str | None:
  """Why Keras's fit cannot train under `strategy`, or None if it can.

  Keras 3's fit reduces the first batch eagerly across the workers of a
  MultiWorkerMirroredStrategy before training, and that fails ("Attempt to
  convert a value (PerReplica...)", keras-team/keras#20585, open), at any
  steps_per_execution. It happens inside fit, before any step: no public
  hook avoids it.
  """
  if is_keras3() and isinstance(strategy,
                                tf.distribute.MultiWorkerMirroredStrategy):
    return ('Keras 3\'s fit fails under MultiWorkerMirroredStrategy '
            '(keras-team/keras#20585)')
  return None


def written_by_keras2(checkpoint_keys) -> bool:
  """Whether an object-based checkpoint was written by Keras 2, whose layout
  Keras 3 does not restore: a functional model's
  ``model/layer_with_weights-0/...``, or a subclassed model's attributes
  beside a Keras 2 optimizer (Keras 3's also tracks the variables it trains,
  ``optimizer/_trainable_variables/N``; Keras 2's does not)."""
  keys = list(checkpoint_keys)
  if any('optimizer/_trainable_variables/' in key for key in keys):
    return False
  return any(key.startswith(('model/layer', 'optimizer/')) for key in keys)
