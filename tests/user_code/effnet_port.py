"""The team's port of effnet_legacy: a functional Keras model whose batch
norm moves its statistics as TF 1's did on Keras 3 too (tf1_keras.layers), TF 1's
RMSProp in Keras (its mean square starting at 1), the moving average kept by
the trainer with TF 1's schedule and evaluated and exported in place of the
weights; and nine deliberate bugs, one line away each."""
import contextlib
import dataclasses
import io
import os
import tempfile

import tensorflow as tf

import effnet_legacy as legacy
import team_trainer
from kit_core import keras_compat
from migration_tools.pair import port as port_lib
from migration_tools.tf1_keras import layers as tf1_layers
from migration_tools.tf1_keras import optimizers as tf1_optimizers

layers = tf.keras.layers

# tf.compat.v1.layers named the layers by creation order; the port names
# them by role.
_BLOCKS = [('conv2d', 'stem_conv'), ('batch_normalization', 'stem_bn'),
           ('conv2d_1', 'expand_conv'), ('batch_normalization_1', 'expand_bn'),
           ('depthwise', 'depthwise'), ('batch_normalization_2', 'depthwise_bn'),
           ('conv2d_2', 'se_reduce'), ('conv2d_3', 'se_expand'),
           ('conv2d_4', 'project_conv'), ('batch_normalization_3', 'project_bn'),
           ('conv2d_5', 'head_conv'), ('batch_normalization_4', 'head_bn'),
           ('dense', 'logits')]
_VARIABLES = {'conv2d': ('kernel',), 'conv2d_2': ('kernel', 'bias'),
              'conv2d_3': ('kernel', 'bias'), 'dense': ('kernel', 'bias'),
              'depthwise': ('depthwise_kernel',)}
_BN = ('gamma', 'beta', 'moving_mean', 'moving_variance')
VARIABLE_MAP = {
    f'{theirs}/{name}': f'{ours}/{name}' for theirs, ours in _BLOCKS
    for name in (_BN if theirs.startswith('batch') else
                 _VARIABLES.get(theirs, ('kernel',)))}
if keras_compat.is_keras3():
  # Keras 3 names a DepthwiseConv2D's kernel 'kernel', Keras 2
  # 'depthwise_kernel'.
  VARIABLE_MAP['depthwise/depthwise_kernel'] = 'depthwise/kernel'


class DropConnect(layers.Layer):
  """Drop connect as tensorflow/tpu's TF 2 Keras EfficientNet writes it: an
  example's whole branch kept by the floor of keep + a uniform draw, scaled
  by 1 / keep; not a Keras Dropout."""

  def __init__(self, rate, **kwargs):
    super().__init__(**kwargs)
    self.rate = rate

  def call(self, inputs, training=None):
    if not training:
      return inputs
    keep = 1.0 - self.rate
    batch = tf.shape(inputs)[0]
    binary = tf.floor(keep + tf.random.uniform([batch, 1, 1, 1],
                                               dtype=inputs.dtype))
    return inputs / keep * binary

  def get_config(self):
    return {**super().get_config(), 'rate': self.rate}


class _DropConnectByWhere(DropConnect):
  """A bug: drop connect drawn through tf.where, a form the kit does not
  read as a mask (it cannot put it at its expectation)."""

  def call(self, inputs, training=None):
    if not training:
      return inputs
    keep = 1.0 - self.rate
    draw = tf.random.uniform([tf.shape(inputs)[0], 1, 1, 1],
                             dtype=inputs.dtype)
    return tf.where(draw < keep, inputs / keep, tf.zeros_like(inputs))


def build_model(params, bn_momentum=legacy.BN_MOMENTUM,
                drop_connect=DropConnect,
                drop_connect_rate=legacy.DROP_CONNECT):
  del params
  images = tf.keras.Input((legacy.SIZE, legacy.SIZE, legacy.CHANNELS))

  def conv_bn(net, filters, conv, bn, kernel=1, swish=True):
    net = layers.Conv2D(filters, kernel, padding='same', use_bias=False,
                        name=conv)(net)
    net = tf1_layers.BatchNormalization(momentum=bn_momentum,
                                        epsilon=legacy.BN_EPSILON,
                                        name=bn)(net)
    return layers.Activation(tf.nn.swish)(net) if swish else net

  net = conv_bn(images, legacy.STEM, 'stem_conv', 'stem_bn', 3)
  shortcut = net
  net = conv_bn(net, legacy.EXPANDED, 'expand_conv', 'expand_bn')
  net = layers.DepthwiseConv2D(3, padding='same', use_bias=False,
                               name='depthwise')(net)
  net = layers.Activation(tf.nn.swish)(tf1_layers.BatchNormalization(
      momentum=bn_momentum, epsilon=legacy.BN_EPSILON,
      name='depthwise_bn')(net))
  squeezed = layers.GlobalAveragePooling2D(keepdims=True)(net)
  squeezed = layers.Activation(tf.nn.swish)(layers.Conv2D(
      legacy.SQUEEZED, 1, name='se_reduce')(squeezed))
  squeezed = layers.Activation('sigmoid')(layers.Conv2D(
      legacy.EXPANDED, 1, name='se_expand')(squeezed))
  net = layers.Multiply()([net, squeezed])
  net = conv_bn(net, legacy.STEM, 'project_conv', 'project_bn', swish=False)
  # Drop connect: an example's whole branch, drawn as the legacy draws it.
  net = drop_connect(drop_connect_rate, name='drop_connect')(net)
  net = layers.Add()([net, shortcut])
  net = conv_bn(net, legacy.HEAD, 'head_conv', 'head_bn')
  net = layers.GlobalAveragePooling2D()(net)
  net = layers.Dropout(legacy.DROPOUT)(net)
  logits = layers.Dense(legacy.CLASSES, name='logits')(net)
  return tf.keras.Model(images, logits)


class WarmupExponentialDecay(
    tf.keras.optimizers.schedules.LearningRateSchedule):
  """The legacy learning_rate(): a linear warmup from 0, then a staircase
  exponential decay."""

  def __init__(self, peak, warmup_steps, decay_steps):
    self.peak, self.warmup_steps = peak, warmup_steps
    self.decay_steps = decay_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warmup = float(self.warmup_steps)
    decayed = self.peak * tf.pow(
        0.97, tf.floor((step - warmup) / self.decay_steps))
    return tf.where(step < warmup, self.peak * step / warmup, decayed)

  def get_config(self):
    return {'peak': self.peak, 'warmup_steps': self.warmup_steps,
            'decay_steps': self.decay_steps}


def _schedule(params):
  return WarmupExponentialDecay(params['learning_rate'],
                                params['warmup_steps'], params['decay_steps'])


def make_optimizer(params):
  return tf1_optimizers.RMSpropFromOnes(
      _schedule(params), rho=legacy.RMS_DECAY, momentum=legacy.RMS_MOMENTUM,
      epsilon=legacy.RMS_EPSILON)


def _is_batch_norm(variable) -> bool:
  return '_bn/' in variable.path if hasattr(variable, 'path') else (
      '_bn/' in variable.name)


class Trainer(team_trainer.Trainer):
  """Label smoothing, L2 on every weight but batch norm's, and the moving
  average of the weights and batch-norm statistics, with TF 1's schedule
  (its decay min(decay, (1 + step) / (10 + step))), updated after each step
  and evaluated in place of the weights."""

  decay = legacy.EMA_DECAY
  num_updates = True  # The decay lowered early on, as TF 1's num_updates.
  smoothing = legacy.LABEL_SMOOTHING
  evaluate_averages = True

  def __init__(self, model, optimizer, strategy, global_batch):
    super().__init__(model, optimizer, strategy, global_batch)
    self.averaged = list(model.trainable_variables) + [
        v for v in model.non_trainable_variables
        if 'moving_' in getattr(v, 'path', v.name)]
    with strategy.scope():
      self.moving_averages = [
          tf.Variable(tf.convert_to_tensor(v), trainable=False)
          for v in self.averaged]
      # What the summaries log of the last step (the legacy host_call's).
      self.logged = {'loss': tf.Variable(0.0, trainable=False),
                     'learning_rate': tf.Variable(0.0, trainable=False)}

  def make_metrics(self):
    return {'top_1_accuracy': tf.keras.metrics.SparseCategoricalAccuracy()}

  def weight_decay(self):
    return legacy.WEIGHT_DECAY * tf.add_n([
        tf.nn.l2_loss(v) for v in self.model.trainable_variables
        if not _is_batch_norm(v)])

  def per_example_loss(self, labels, outputs):
    onehot = tf.one_hot(labels, legacy.CLASSES)
    return tf.keras.losses.categorical_crossentropy(
        onehot, outputs, from_logits=True,
        label_smoothing=self.smoothing) + self.weight_decay()

  def update_averages(self):
    """TF 1's assign_moving_average: average -= (average - value) * (1 -
    decay), after the step (its step count is the decay's num_updates)."""
    decay = tf.constant(self.decay, tf.float32)
    if self.num_updates:
      step = tf.cast(self.optimizer.iterations, tf.float32)
      decay = tf.minimum(decay, (1.0 + step) / (10.0 + step))
    for variable, average in zip(self.averaged, self.moving_averages):
      average.assign_sub((average - tf.convert_to_tensor(variable)) *
                         (1.0 - decay))

  def train_step(self, features, labels):
    per_example, _, gradients = self.loss_and_gradients(features, labels)
    self.optimizer.apply_gradients(
        zip(gradients, self.model.trainable_variables))
    self.loss.update_state(per_example)
    return tf.reduce_sum(per_example)

  def log(self, loss_sum):
    """The step's mean loss and the rate it applied (the schedule at the
    step before the optimizer's count moved)."""
    self.logged['loss'].assign(loss_sum / self.global_batch)
    self.logged['learning_rate'].assign(self.logged_rate())

  def logged_rate(self):
    return _schedule_of(self.optimizer)(self.optimizer.iterations - 1)

  @tf.function
  def train_steps(self, iterator, steps):
    for _ in tf.range(steps):
      total = self.strategy.run(self.train_step, args=next(iterator))
      self.update_averages()
      self.log(self.strategy.reduce(tf.distribute.ReduceOp.SUM, total,
                                    axis=None))
    return tf.identity(self.optimizer.iterations)

  @contextlib.contextmanager
  def averages_in_place(self):
    """The moving averages in the model's variables, the weights back
    after."""
    if not self.evaluate_averages:
      yield
      return
    kept = [tf.convert_to_tensor(v) for v in self.averaged]
    for variable, average in zip(self.averaged, self.moving_averages):
      variable.assign(tf.convert_to_tensor(average))
    try:
      yield
    finally:
      for variable, value in zip(self.averaged, kept):
        variable.assign(value)

  def eval_steps(self, iterator, steps):
    with self.averages_in_place():
      super().eval_steps(iterator, steps)


def _schedule_of(optimizer):
  """The optimizer's schedule: Keras 2 and 3 keep it as _learning_rate (Keras
  3's learning_rate is the schedule evaluated at the current step)."""
  return optimizer._learning_rate  # pylint: disable=protected-access


def averages(trainer):
  return list(zip(trainer.averaged, trainer.moving_averages))


def host_call(trainer):
  return {k: v.numpy() for k, v in trainer.logged.items()}


def input_pipeline(strategy, params):
  return team_trainer.distribute_records(
      strategy, params['batch_size'],
      os.path.join(params['data_dir'], legacy.RECORDS), legacy.parser(params))


def predict(model, images):
  logits = model(images, training=False)
  return {'classes': tf.argmax(logits, 1, output_type=tf.int32),
          'probabilities': tf.nn.softmax(logits)}


def export(model, base_dir, strategy):
  """A SavedModel of the moving averages whose serving_default takes JPEG
  bytes as the legacy receiver's image_bytes."""
  del strategy
  trainer = _EXPORTING.get(id(model))
  with (trainer.averages_in_place() if trainer else contextlib.nullcontext()):
    archive = tf.keras.export.ExportArchive()
    archive.track(model)

    def serve(image_bytes):
      images = tf.map_fn(legacy.preprocess, image_bytes,
                         fn_output_signature=tf.float32)
      return predict(model, images)

    archive.add_endpoint('serving_default', serve, [
        tf.TensorSpec([None], tf.string, name='image_bytes')])
    os.makedirs(base_dir, exist_ok=True)
    path = tempfile.mkdtemp(dir=base_dir)
    with contextlib.redirect_stdout(io.StringIO()):  # It lists the endpoint.
      archive.write_out(path)
  return path


# The trainer of each model, for its export (its averages): the export
# takes the model alone.
_EXPORTING = {}


class _Registered(Trainer):

  def __init__(self, model, *args):
    super().__init__(model, *args)
    _EXPORTING[id(model)] = self


def make_port() -> port_lib.Port:
  return port_lib.Port(
      build_model=build_model, make_optimizer=make_optimizer,
      trainer_class=_Registered, input_pipeline=input_pipeline,
      export=export, predict=predict, variable_map=VARIABLE_MAP,
      averages=averages, host_call=host_call)


# The deliberate bugs, each one line away from the correct port.
def no_ema() -> port_lib.Port:
  """The moving average left out."""
  return dataclasses.replace(make_port(), averages=None)


class _FixedDecay(_Registered):
  num_updates = False


def ema_without_num_updates() -> port_lib.Port:
  """The decay at 0.9999 from the first step: TF 1's num_updates lowered it
  to (1 + step) / (10 + step) early on."""
  return dataclasses.replace(make_port(), trainer_class=_FixedDecay)


class _RawEvaluation(_Registered):
  evaluate_averages = False


def evaluates_raw_weights() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_RawEvaluation)


def keras_rmsprop() -> port_lib.Port:
  """Keras's RMSprop as it is: its mean square starts at 0."""
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      tf.keras.optimizers.RMSprop(
          _schedule(params), rho=legacy.RMS_DECAY,
          momentum=legacy.RMS_MOMENTUM, epsilon=legacy.RMS_EPSILON)))


def _rate_and_index(optimizer, variable, learning_rate):
  """(the rate in the variable's dtype, the variable's index in the
  optimizer's slot lists) in an update_step on Keras 2 (which passes no
  rate) and Keras 3."""
  if learning_rate is None:
    learning_rate = optimizer.learning_rate
  index = (optimizer._get_variable_index(variable) if hasattr(  # pylint: disable=protected-access
      optimizer, '_get_variable_index') else
           optimizer._index_dict[optimizer._var_key(variable)])  # pylint: disable=protected-access
  return tf.cast(learning_rate, variable.dtype), index


class _EpsilonOutside(tf1_optimizers.RMSpropFromOnes):
  """RMSProp with epsilon added outside the square root:
  lr * g / (sqrt(ms) + eps), as some ports of it write it."""

  def update_step(self, gradient, variable, learning_rate=None):
    rate, index = _rate_and_index(self, variable, learning_rate)
    velocity, momentum = self._velocities[index], self._momentums[index]
    gradient = tf.convert_to_tensor(gradient)
    velocity.assign(self.rho * tf.convert_to_tensor(velocity) +
                    (1 - self.rho) * tf.square(gradient))
    increment = rate * gradient / (tf.sqrt(tf.convert_to_tensor(velocity)) +
                                   self.epsilon)
    momentum.assign(self.momentum * tf.convert_to_tensor(momentum) +
                    increment)
    variable.assign_sub(tf.convert_to_tensor(momentum))


def epsilon_outside_the_square_root() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      _EpsilonOutside(_schedule(params), rho=legacy.RMS_DECAY,
                      momentum=legacy.RMS_MOMENTUM,
                      epsilon=legacy.RMS_EPSILON)))


class TF1RMSProp(tf.keras.optimizers.Optimizer):
  """TF 1's RMSPropOptimizer written as a team's own Keras optimizer (no
  Keras RMSprop underneath): ms starts at 1; ms = rho ms + (1 - rho) g^2,
  mom = momentum mom + lr g / sqrt(ms + eps), var -= mom. Correct: the kit
  reads it by what it does."""

  def __init__(self, learning_rate, rho, momentum, epsilon,
               name='TF1RMSProp'):
    if keras_compat.is_keras3():
      super().__init__(learning_rate=learning_rate, name=name)
    else:
      super().__init__(name=name)
      self._learning_rate = self._build_learning_rate(learning_rate)
    self.rho, self.momentum, self.epsilon = rho, momentum, epsilon

  def build(self, var_list):
    if getattr(self, '_rms', None) is not None:
      return
    super().build(var_list)
    self._rms, self._mom = [], []
    for variable in var_list:
      rms = self.add_variable_from_reference(variable, 'rms')
      rms.assign(tf.ones(rms.shape, rms.dtype))
      self._rms.append(rms)
      self._mom.append(self.add_variable_from_reference(variable, 'momentum'))

  def update_step(self, gradient, variable, learning_rate=None):
    rate, index = _rate_and_index(self, variable, learning_rate)
    rms, mom = self._rms[index], self._mom[index]
    gradient = tf.convert_to_tensor(gradient)
    rms.assign(self.rho * tf.convert_to_tensor(rms) +
               (1 - self.rho) * tf.square(gradient))
    mom.assign(self.momentum * tf.convert_to_tensor(mom) + rate * gradient /
               tf.sqrt(tf.convert_to_tensor(rms) + self.epsilon))
    variable.assign_sub(tf.convert_to_tensor(mom))

  def get_config(self):
    return {**super().get_config(), 'rho': self.rho,
            'momentum': self.momentum, 'epsilon': self.epsilon}


def hand_written_rmsprop() -> port_lib.Port:
  """Correct: TF 1's RMSProp as the team's own optimizer class."""
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      TF1RMSProp(_schedule(params), rho=legacy.RMS_DECAY,
                 momentum=legacy.RMS_MOMENTUM, epsilon=legacy.RMS_EPSILON)))


def batch_norm_momentum_0_9() -> port_lib.Port:
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, bn_momentum=0.9)))


class _NoSmoothing(_Registered):
  smoothing = 0.0


def no_label_smoothing() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_NoSmoothing)


class _DecayOnBatchNorm(_Registered):

  def weight_decay(self):
    return legacy.WEIGHT_DECAY * tf.add_n([
        tf.nn.l2_loss(v) for v in self.model.trainable_variables])


def l2_on_batch_norm_too() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_DecayOnBatchNorm)


class _RateAfterTheStep(_Registered):
  """The summary logs the optimizer's rate after the step: the next step's
  (Keras evaluates a schedule at its current count)."""

  def logged_rate(self):
    return _schedule_of(self.optimizer)(self.optimizer.iterations)


def summary_of_the_next_rate() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_RateAfterTheStep)


# Drop connect: put at its expectation in the steps at identical state, so
# only the dropout check, which draws on both sides, sees its rate.
def drop_connect_rate_0_3() -> port_lib.Port:
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, drop_connect_rate=0.3)))


def drop_connect_by_where() -> port_lib.Port:
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, drop_connect=_DropConnectByWhere)))
