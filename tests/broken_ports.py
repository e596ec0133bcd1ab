"""Deliberately broken ports, one classic migration bug each, for the harness.

Each function returns a port.Port, the kit's own but for one piece;
`migration-compare --port=broken_ports:NAME` loads it (tests/ on PYTHONPATH).
"""
import dataclasses

import tensorflow as tf

from kit_pair import mnist as kit_pair
from migrate import custom_loop
from migrate import data
from migrate import model as model_lib
from migration_tools.pair import port as port_lib
from mnist_common import prepare


def _kit_port_with(**pieces) -> port_lib.Port:
  return dataclasses.replace(kit_pair.make_port(), **pieces)


class _PerReplicaMean(custom_loop.Trainer):

  def scaled_loss(self, per_example):
    return tf.reduce_mean(per_example)  # Not divided by the global batch.


def loss_averaged_per_replica() -> port_lib.Port:
  return _kit_port_with(trainer_class=_PerReplicaMean)


def _pipeline(batch_of, pixels=lambda x: x):
  """The kit's pipeline with the per-replica batch batch_of(global, context)
  and the images passed through pixels."""
  def input_pipeline(strategy, params):
    data_dir = params.get('data_dir') or prepare.prepare(None).data_dir

    def dataset_fn(context):
      return data.make_dataset(
          data_dir, 'test', batch_of(params['batch_size'], context), False, 0,
          context).map(lambda x, y: (pixels(x), y))
    return strategy.distribute_datasets_from_function(dataset_fn)
  return input_pipeline


def global_batch_per_replica() -> port_lib.Port:
  return _kit_port_with(input_pipeline=_pipeline(lambda batch, _: batch))


def pixels_zero_to_one() -> port_lib.Port:
  return _kit_port_with(input_pipeline=_pipeline(
      lambda batch, context: context.get_per_replica_batch_size(batch),
      lambda x: x + 0.5))


def missing_relu() -> port_lib.Port:
  def build_model(params):
    net = model_lib.build_model()
    net.get_layer('dense').activation = tf.keras.activations.linear
    return net
  return _kit_port_with(build_model=build_model)


class _ScheduleOnSteps(tf.keras.optimizers.schedules.LearningRateSchedule):
  """The kit's schedule, read at step_fn(optimizer step)."""

  def __init__(self, learning_rate, step_fn):
    self.inner = model_lib.learning_rate_schedule(learning_rate)
    self.step_fn = step_fn

  def __call__(self, step):
    return self.inner(self.step_fn(step))


def lr_per_replica() -> port_lib.Port:
  def make_optimizer(params):
    learning_rate = params['learning_rate']
    # Built in strategy.scope(): the step advanced once per replica.
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return tf.keras.optimizers.SGD(
        _ScheduleOnSteps(learning_rate, lambda step: step * replicas))
  return _kit_port_with(make_optimizer=make_optimizer)


def lr_per_epoch() -> port_lib.Port:
  steps_per_epoch = 20
  def make_optimizer(params):
    learning_rate = params['learning_rate']
    return tf.keras.optimizers.SGD(_ScheduleOnSteps(
        learning_rate, lambda step: step // steps_per_epoch))
  return _kit_port_with(make_optimizer=make_optimizer)


def wrong_dropout_rate() -> port_lib.Port:
  return _kit_port_with(build_model=lambda params: model_lib.build_model(0.5))


class _DropoutOnTheImages(custom_loop.Trainer):

  def loss_and_gradients(self, images, labels):
    # A dropout where the model_fn has none: on the images.
    return super().loss_and_gradients(tf.nn.dropout(images, rate=0.1),
                                      labels)


def dropout_on_the_images() -> port_lib.Port:
  return _kit_port_with(trainer_class=_DropoutOnTheImages)


def predicts_in_training_mode() -> port_lib.Port:
  # Its dropout draws at inference: predictions differ call to call.
  def predict(net, features):
    logits = net(features, training=True)
    return {'class_ids': tf.argmax(logits, axis=1),
            'probabilities': tf.nn.softmax(logits)}
  return _kit_port_with(predict=predict)


class _SparseLabelsAsOneHot(custom_loop.Trainer):
  """With a GradientTape, as most ports take their gradients: the kit's
  gated tf.gradients would stop this bug at trace time with a shape error
  (it checks the labels' gradient too)."""

  def loss_and_gradients(self, images, labels):
    with tf.GradientTape() as tape:
      logits = self.model(images, training=True)
      per_example = self.per_example_loss(labels, logits)
      loss = self.scaled_loss(per_example)
    return per_example, logits, tape.gradient(
        loss, self.model.trainable_variables)

  def per_example_loss(self, labels, logits):
    # Class ids where one-hot rows belong: the op broadcasts [B, 1] against
    # [B, 10] and returns a loss of the wrong value, with no error.
    labels = tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)
    return tf.nn.softmax_cross_entropy_with_logits(labels=labels,
                                                   logits=logits)


def sparse_labels_as_one_hot() -> port_lib.Port:
  return _kit_port_with(trainer_class=_SparseLabelsAsOneHot)


def relu_on_logits() -> port_lib.Port:
  def build_model(params):
    net = model_lib.build_model()
    net.get_layer('logits').activation = tf.nn.relu
    return net
  return _kit_port_with(build_model=build_model)


def transposed_kernel() -> port_lib.Port:
  def build_model(params):
    net = model_lib.build_model()
    conv1 = net.get_layer('conv1')
    convolve = conv1.convolution_op
    # The checkpoint's [height, width, in, out] kernel read as [width, height,
    # in, out]: a square kernel, so no shape check can see it.
    conv1.convolution_op = lambda inputs, kernel: convolve(
        inputs, tf.transpose(kernel, [1, 0, 2, 3]))
    return net
  return _kit_port_with(build_model=build_model)


def mis_mapped_kernels() -> port_lib.Port:
  port = kit_pair.make_port()
  port.variable_map['dense/kernel'] = 'logits/kernel'
  port.variable_map['logits/kernel'] = 'dense/kernel'
  return port


class _EvalRaises(custom_loop.Trainer):

  def eval_steps(self, iterator, steps):
    raise RuntimeError('eval_steps broke on purpose')


def raises_in_evaluation() -> port_lib.Port:
  """Trains correctly; its evaluation raises."""
  return _kit_port_with(trainer_class=_EvalRaises)


def serving_fn_returning_dict():
  """A legacy serving function that returns a dict, not a receiver."""
  return {'image': tf.compat.v1.placeholder(tf.uint8, [None, 28, 28, 1])}


def auto_named_layers() -> port_lib.Port:
  """The kit's network with Keras's default layer names (conv2d, ...)."""
  def build_model(params):
    layers = tf.keras.layers
    inputs = tf.keras.Input((28, 28, 1))
    y = layers.Conv2D(32, 5, padding='same', activation='relu')(inputs)
    y = layers.MaxPooling2D(2, 2, padding='same')(y)
    y = layers.Conv2D(64, 5, padding='same', activation='relu')(y)
    y = layers.MaxPooling2D(2, 2, padding='same')(y)
    y = layers.Dense(128, activation='relu')(layers.Flatten()(y))
    return tf.keras.Model(inputs, layers.Dense(10)(y))
  return _kit_port_with(build_model=build_model)


def not_a_port() -> dict:
  """What a user might return before reading the contract."""
  return {'build_model': model_lib.build_model}


class _EveryPassFourTimes(custom_loop.Trainer):
  """Computes the same forward and backward pass four times each step and
  uses their mean: the same update, about four times the work."""

  def loss_and_gradients(self, images, labels):
    passes = [super(_EveryPassFourTimes, self).loss_and_gradients(
        images, labels) for _ in range(4)]
    gradients = [tf.add_n(list(g)) / 4.0 for g in zip(*[p[2] for p in passes])]
    return passes[0][0], passes[0][1], gradients


def four_times_the_work() -> port_lib.Port:
  """Not a bug in what it computes: a port much slower than its model_fn."""
  return _kit_port_with(trainer_class=_EveryPassFourTimes)
