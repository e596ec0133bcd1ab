"""estimator_mnist's CNN written in plain JAX with optax: no Keras, no
TensorFlow. An ArrayPort of the kit's model that shares no code with
migrate_jax, to show the contract is about arrays, not Keras: its
parameters are a dict of jnp arrays named as the model_fn names its
variables, its optimizer optax's SGD on optax's exponential decay.

  migration-compare --port=mnist_optax_port:make_port    # the kit's own bundle
"""
import functools

import numpy as np

from migration_tools.pair import array_port
from migration_tools.pair import optimizers

# (name, shape) in the model_fn's order: conv 5x5x32, conv 5x5x64, dense 128,
# logits 10, on 28x28x1 images pooled twice to 7x7.
SHAPES = (('conv1/kernel', (5, 5, 1, 32)), ('conv1/bias', (32,)),
          ('conv2/kernel', (5, 5, 32, 64)), ('conv2/bias', (64,)),
          ('dense/kernel', (7 * 7 * 64, 128)), ('dense/bias', (128,)),
          ('logits/kernel', (128, 10)), ('logits/bias', (10,)))
DECAY_STEPS, DECAY_RATE = 100000, 0.96
DROPOUT_RATE = 0.4  # Before the logits, in training, as the model_fn's.


def _dropout(x, rate: float, key):
  """Dropout written by hand, as plain-JAX code writes it: a bernoulli
  draw of the kept units, the kept scaled by 1 / keep."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not rate or key is None:
    return x
  keep = 1.0 - rate
  mask = jax.random.bernoulli(key, keep, x.shape)
  return jnp.where(mask, x / keep, 0.0)


def _forward(params: dict, images, offset: float = 0.0, rate: float = 0.0,
             key=None, dropout=_dropout):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def linear(x, name):
    return jax.lax.conv_general_dilated(
        x, params[f'{name}/kernel'], (1, 1), 'SAME',
        dimension_numbers=('NHWC', 'HWIO', 'NHWC'))

  def conv(x, name):
    if offset and name == 'conv1':  # offset_input's port, below.
      y = linear(x + offset, name) - linear(jnp.full_like(x, offset), name)
    else:
      y = linear(x, name)
    return jax.nn.relu(y + params[f'{name}/bias'])

  def pool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                                 (1, 2, 2, 1), 'SAME')

  y = pool(conv(pool(conv(images, 'conv1')), 'conv2'))
  y = y.reshape(y.shape[0], -1)
  y = jax.nn.relu(y @ params['dense/kernel'] + params['dense/bias'])
  y = dropout(y, rate, key)
  return y @ params['logits/kernel'] + params['logits/bias']


def _loss(params: dict, images, labels, rate: float = 0.0, key=None,
          dropout=_dropout):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  logits = _forward(params, images, rate=rate, key=key, dropout=dropout)
  log_probabilities = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(
      log_probabilities, labels.astype(jnp.int32)[:, None], axis=1))


class OptaxModel:
  """The model's parameters, optax's SGD state and the step on `replicas`
  devices: the batch laid out over them, the parameters replicated."""

  # How its dropout draws (a bug below draws otherwise).
  dropout_fn = staticmethod(_dropout)

  def __init__(self, params: dict, replicas: int, dropout: bool):
    import jax  # pylint: disable=g-import-not-at-top
    # The harness asks for dropout off but in its dropout check.
    self.rate = DROPOUT_RATE if dropout else 0.0
    import optax  # pylint: disable=g-import-not-at-top
    self.replicas = replicas
    mesh = jax.sharding.Mesh(np.array(array_port.replica_devices(replicas)), ('batch',))
    self._batch = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec('batch'))
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())
    self.schedule = optax.exponential_decay(
        params['learning_rate'], DECAY_STEPS, DECAY_RATE)
    self._optax = optax
    self._optimizer = optax.sgd(self.schedule)
    keys = jax.random.split(jax.random.PRNGKey(0), len(SHAPES))
    self.params = {name: jax.device_put(
        0.05 * jax.random.normal(key, shape), self._replicated)
                   for key, (name, shape) in zip(keys, SHAPES)}
    self.state = self._optimizer.init(self.params)
    self._jax = jax
    self._rate = 0.0

  def variables(self) -> dict[str, np.ndarray]:
    return {name: np.asarray(self.params[name]) for name, _ in SHAPES}

  def trainable(self) -> list[str]:
    return [name for name, _ in SHAPES]

  def set_variables(self, values: dict[str, np.ndarray]) -> None:
    self.params = {**self.params, **{
        name: self._jax.device_put(np.asarray(value, np.float32),
                                   self._replicated)
        for name, value in values.items()}}

  def slots(self) -> dict:
    return {}  # Plain SGD keeps none.

  def set_slots(self, values: dict) -> None:
    del values

  def step_count(self) -> int:
    return int(self._optax.tree_utils.tree_get(self.state, 'count'))

  def set_step_count(self, step: int) -> None:
    self.state = self._optax.tree_utils.tree_set(
        self.state, count=np.asarray(step, np.int32))

  def describe_optimizer(self) -> optimizers.Description:
    return optimizers.Description(optimizers.SGD, {})

  def learning_rate(self) -> float:
    return self._rate

  def learning_rate_at(self, step: int) -> float:
    return float(self.schedule(step))

  @functools.cached_property
  def _step(self):
    jax = self._jax

    def step(params, state, images, labels, key):
      loss, gradients = jax.value_and_grad(_loss)(params, images, labels,
                                                  self.rate, key,
                                                  self.dropout_fn)
      updates, state = self._optimizer.update(gradients, state, params)
      return loss, gradients, self._optax.apply_updates(params, updates), state

    return jax.jit(step)

  def _key(self):
    """This step's dropout key: the step count folded into a seed."""
    return self._jax.random.fold_in(self._jax.random.PRNGKey(1),
                                    self.step_count())

  @functools.cached_property
  def _logits(self):
    return self._jax.jit(_forward)

  def _on_devices(self, array):
    return self._jax.device_put(np.asarray(array), self._batch)

  def train_step(self, features, labels) -> dict:
    self._rate = float(self.schedule(self.step_count()))
    loss, gradients, self.params, self.state = self._step(
        self.params, self.state, self._on_devices(features),
        self._on_devices(labels), self._key())
    return {'loss': float(loss), 'examples': len(labels),
            'gradients': {k: np.asarray(v) for k, v in gradients.items()}}

  def _predicted_logits(self, features) -> np.ndarray:
    return np.asarray(self._logits(self.params, self._on_devices(features)))

  def predict(self, features) -> dict[str, np.ndarray]:
    logits = self._predicted_logits(features)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return {'class_ids': logits.argmax(axis=1),
            'probabilities': shifted / shifted.sum(axis=1, keepdims=True)}

  def evaluate(self, batches: list) -> dict[str, float]:
    losses, correct, count = [], 0, 0
    for features, labels in batches:
      losses.append(float(_loss(self.params, self._on_devices(features),
                                self._on_devices(labels))))
      logits = self._predicted_logits(features)
      correct += int((logits.argmax(axis=1) == labels).sum())
      count += len(labels)
    return {'loss': float(np.mean(losses)), 'accuracy': correct / count}

  def programs(self, features, labels) -> dict:
    batch = (np.asarray(features), np.asarray(labels))
    return {'the training step': (self._step, (self.params, self.state,
                                               *batch, self._key())),
            'predict': (self._logits, (self.params, batch[0]))}


def make_port() -> array_port.ArrayPort:
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  return array_port.ArrayPort(
      make=OptaxModel,
      framework=f'JAX {jax.__version__}, optax {optax.__version__}',
      programs=lambda model, features, labels: model.programs(features,
                                                              labels))


# A deliberate bug, for the tests: the loss summed over the batch where the
# model_fn averaged it (a port that forgot to divide by the global batch).
def _summed_loss(params: dict, images, labels):
  return _loss(params, images, labels) * len(labels)


class _SummedLoss(OptaxModel):

  @functools.cached_property
  def _step(self):
    jax = self._jax

    def step(params, state, images, labels, key):
      del key  # Its dropout is off: the bug is elsewhere.
      loss, gradients = jax.value_and_grad(_summed_loss)(params, images,
                                                         labels)
      updates, state = self._optimizer.update(gradients, state, params)
      return (loss / len(labels), gradients,
              self._optax.apply_updates(params, updates), state)

    return jax.jit(step)


def summed_loss() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_SummedLoss)


# A port right in its math and wrong on a device: its first convolution
# takes the pixels (in [0, 1]) offset by 16, and the offset's own
# convolution back off after. In float32 that is the convolution of the
# pixels to rounding; with the operands rounded to TF32 or bfloat16 their
# error is 16's, not the pixel's (a difference of large terms).
OFFSET = 16.0


class _OffsetInput(OptaxModel):

  @functools.cached_property
  def _logits(self):
    return self._jax.jit(functools.partial(_forward, offset=OFFSET))


def offset_input() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_OffsetInput)


# A softmax of the logits x 1.01 (fails inference alone) behind a predict
# that gives NaN on every other call: the NaN of the forward noise's second
# call must widen no bar, and is named.
class _NanEveryOtherPredict(OptaxModel):

  calls = 0

  def predict(self, features) -> dict[str, np.ndarray]:
    self.calls += 1
    logits = self._predicted_logits(features) * 1.01
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    if self.calls % 2 == 0:
      probabilities = np.full_like(probabilities, np.nan)
    return {'class_ids': logits.argmax(axis=1), 'probabilities': probabilities}


def nan_every_other_predict() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_NanEveryOtherPredict)


# Dropout bugs, each hidden from every check but dropout (which builds the
# port with its dropout on and hands its draws the legacy step's masks).
class _DropoutAtInference(OptaxModel):
  """Predict with the training dropout: a forward that draws at inference
  (a train flag forgotten)."""

  @functools.cached_property
  def _logits(self):
    return self._jax.jit(lambda params, images: _forward(
        params, images, rate=self.rate, key=self._jax.random.PRNGKey(2)))


def dropout_at_inference() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_DropoutAtInference)


class _DropoutLeftOut(OptaxModel):
  """The dropout before the logits left out."""

  def __init__(self, params: dict, replicas: int, dropout: bool):
    super().__init__(params, replicas, dropout)
    self.rate = 0.0


def dropout_left_out() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_DropoutLeftOut)


# Draws the kit hands no mask, each named where it is.
def _dropout_by_uniform(x, rate: float, key):
  """Dropout written as uniform < keep: right in law, but no bernoulli draw
  the kit can hand a mask to."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not rate or key is None:
    return x
  keep = 1.0 - rate
  return jnp.where(jax.random.uniform(key, x.shape) < keep, x / keep, 0.0)


class _DropoutByUniform(OptaxModel):
  dropout_fn = staticmethod(_dropout_by_uniform)


def dropout_by_uniform() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_DropoutByUniform)


class _NoiseAlwaysOn(OptaxModel):
  """Gaussian noise on the images in every training step, whatever the
  dropout flag asks: a step that draws anew."""

  @functools.cached_property
  def _step(self):
    jax = self._jax

    def step(params, state, images, labels, key):
      noisy = images + 0.01 * jax.random.normal(key, images.shape)
      loss, gradients = jax.value_and_grad(_loss)(params, noisy, labels,
                                                  self.rate, key)
      updates, state = self._optimizer.update(gradients, state, params)
      return loss, gradients, self._optax.apply_updates(params, updates), state

    return jax.jit(step)


def noise_always_on() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_NoiseAlwaysOn)


# A port may not widen its own bars: each bug below hides behind a port that
# computes something else at some calls, and the kit names that.
def _jittered(params: dict, size: float, seed: int) -> dict:
  """params each moved by size times a normal draw of numpy's."""
  rng = np.random.default_rng(seed)
  return {k: v + size * rng.standard_normal(v.shape).astype(v.dtype)
          for k, v in params.items()}


class _WeightDecayBehindAJitter(OptaxModel):
  """SGD with a weight decay of 1e-3 (fails one_step and updates alone),
  its weights moved by 1e-4 at every other step."""

  calls = 0

  def __init__(self, params: dict, replicas: int, dropout: bool):
    super().__init__(params, replicas, dropout)
    self._optimizer = self._optax.chain(
        self._optax.add_decayed_weights(1e-3), self._optax.sgd(self.schedule))
    self.state = self._optimizer.init(self.params)

  def train_step(self, features, labels) -> dict:
    taken = super().train_step(features, labels)
    self.calls += 1
    if self.calls % 2:
      self.params = {k: self._jax.device_put(v, self._replicated) for k, v in
                     _jittered(self.params, 1e-4, self.calls).items()}
    return taken


def weight_decay_behind_a_jitter() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_WeightDecayBehindAJitter)


class _LogitsScaledBehindAJitter(OptaxModel):
  """A softmax of the logits x 1.01 (fails inference alone), predicted on
  weights jittered by 3e-3 at each call."""

  calls = 0

  def _predicted_logits(self, features) -> np.ndarray:
    self.calls += 1
    return 1.01 * np.asarray(self._logits(
        _jittered(self.params, 3e-3, self.calls), self._on_devices(features)))


def logits_scaled_behind_a_jitter() -> array_port.ArrayPort:
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(make_port(), make=_LogitsScaledBehindAJitter)
