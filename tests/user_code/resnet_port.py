"""The team's port of resnet_legacy, with an explicit variable map, and three
deliberate bugs."""
import dataclasses
import os

import tensorflow as tf

import resnet_legacy as legacy
import team_trainer
from migration_tools.pair import port as port_lib

layers = tf.keras.layers

# tf.compat.v1.layers named the layers by creation order; the port names
# them by role.
VARIABLE_MAP = {
    'conv2d/kernel': 'stem_conv/kernel',
    'batch_normalization/gamma': 'stem_bn/gamma',
    'batch_normalization/beta': 'stem_bn/beta',
    'batch_normalization/moving_mean': 'stem_bn/moving_mean',
    'batch_normalization/moving_variance': 'stem_bn/moving_variance',
    'conv2d_1/kernel': 'block_conv_a/kernel',
    'batch_normalization_1/gamma': 'block_bn_a/gamma',
    'batch_normalization_1/beta': 'block_bn_a/beta',
    'batch_normalization_1/moving_mean': 'block_bn_a/moving_mean',
    'batch_normalization_1/moving_variance': 'block_bn_a/moving_variance',
    'conv2d_2/kernel': 'block_conv_b/kernel',
    'batch_normalization_2/gamma': 'block_bn_b/gamma',
    'batch_normalization_2/beta': 'block_bn_b/beta',
    'batch_normalization_2/moving_mean': 'block_bn_b/moving_mean',
    'batch_normalization_2/moving_variance': 'block_bn_b/moving_variance',
    'dense/kernel': 'logits/kernel',
    'dense/bias': 'logits/bias',
}


def build_model(params, bn_momentum=legacy.BN_MOMENTUM,
                bn_epsilon=legacy.BN_EPSILON):
  del params
  image = tf.keras.Input((legacy.SIZE, legacy.SIZE, legacy.CHANNELS),
                         name='image')
  gain = tf.keras.Input((), name='gain')

  def conv_bn(net, conv, bn):
    net = layers.Conv2D(legacy.WIDTH, 3, padding='same', use_bias=False,
                        name=conv)(net)
    return layers.BatchNormalization(momentum=bn_momentum, epsilon=bn_epsilon,
                                     name=bn)(net)

  net = image * gain[:, None, None, None]
  net = tf.nn.relu(conv_bn(net, 'stem_conv', 'stem_bn'))
  shortcut = net
  net = tf.nn.relu(conv_bn(net, 'block_conv_a', 'block_bn_a'))
  net = conv_bn(net, 'block_conv_b', 'block_bn_b')
  net = tf.nn.relu(net + shortcut)
  net = tf.reduce_mean(net, axis=[1, 2])
  logits = layers.Dense(legacy.CLASSES, name='logits')(net)
  return tf.keras.Model({'image': image, 'gain': gain}, logits)


class Trainer(team_trainer.Trainer):

  def make_metrics(self):
    return {'top_1_accuracy': tf.keras.metrics.SparseCategoricalAccuracy(),
            'top_5_accuracy': tf.keras.metrics.SparseTopKCategoricalAccuracy(
                k=self.top_k)}

  top_k = 5

  def per_example_loss(self, labels, outputs):
    return tf.keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)


def input_pipeline(strategy, params):
  return team_trainer.distribute_records(
      strategy, params['batch_size'],
      os.path.join(params['data_dir'], 'shard-0.tfrecord'),
      legacy._parse)  # pylint: disable=protected-access


def predict(model, features):
  logits = model(features, training=False)
  return {'classes': tf.argmax(logits, 1),
          'probabilities': tf.nn.softmax(logits)}


class _Serving(tf.Module):

  def __init__(self, model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[
      tf.TensorSpec([None, legacy.SIZE, legacy.SIZE, legacy.CHANNELS],
                    tf.float32, name='image'),
      tf.TensorSpec([None], tf.float32, name='gain')])
  def serve(self, image, gain):
    return predict(self.model, {'image': image, 'gain': gain})


def export(model, base_dir, strategy):
  del strategy
  return team_trainer.save_serving(_Serving(model), base_dir)


def make_port() -> port_lib.Port:
  return port_lib.Port(
      build_model=build_model,
      make_optimizer=lambda params: tf.keras.optimizers.SGD(
          params['learning_rate'], momentum=params['momentum']),
      trainer_class=Trainer, input_pipeline=input_pipeline, export=export,
      predict=predict, variable_map=dict(VARIABLE_MAP))


def keras_bn_momentum() -> port_lib.Port:
  """Bug: Keras's default batch-norm momentum (0.99), not the legacy 0.997."""
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, bn_momentum=0.99)))


def keras_bn_epsilon() -> port_lib.Port:
  """Bug: Keras's default batch-norm epsilon (1e-3), not the legacy 1e-5."""
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, bn_epsilon=1e-3)))


class _TopFiveAsTopOne(Trainer):
  top_k = 1


def top_5_with_k_1() -> port_lib.Port:
  """Bug: the top-5 metric computed with k=1."""
  return dataclasses.replace(make_port(), trainer_class=_TopFiveAsTopOne)


def nesterov_momentum() -> port_lib.Port:
  """Bug: Nesterov momentum where the legacy optimizer had none."""
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      tf.keras.optimizers.SGD(params['learning_rate'],
                              momentum=params['momentum'], nesterov=True)))


class _AssignedOutOfOrder(tf.keras.Model):
  """The same network as a subclassed model whose layers are assigned in
  another order than they are called (the block's second convolution and
  batch norm first), as a team's residual block may assign its shortcut's:
  Keras tracks its variables in assignment order, they are created in call
  order, the legacy model's. Its layers are named by Keras (conv2d_1, ...),
  numbered anew each time the model is built."""

  def __init__(self):
    super().__init__(name='resnet')

    def bn():
      return layers.BatchNormalization(momentum=legacy.BN_MOMENTUM,
                                       epsilon=legacy.BN_EPSILON)

    def conv():
      return layers.Conv2D(legacy.WIDTH, 3, padding='same', use_bias=False)
    self.conv_b, self.bn_b = conv(), bn()
    self.logits = layers.Dense(legacy.CLASSES)
    self.conv_a, self.bn_a = conv(), bn()
    self.stem_conv, self.stem_bn = conv(), bn()

  def call(self, features, training=False):
    net = features['image'] * features['gain'][:, None, None, None]
    net = tf.nn.relu(self.stem_bn(self.stem_conv(net), training=training))
    shortcut = net
    net = tf.nn.relu(self.bn_a(self.conv_a(net), training=training))
    net = self.bn_b(self.conv_b(net), training=training)
    net = tf.reduce_mean(tf.nn.relu(net + shortcut), axis=[1, 2])
    return self.logits(net)


def _built_out_of_order(params):
  del params
  model = _AssignedOutOfOrder()
  model({'image': tf.zeros([1, legacy.SIZE, legacy.SIZE, legacy.CHANNELS]),
         'gain': tf.ones([1])})
  return model


def assigned_out_of_order() -> port_lib.Port:
  """Correct, with no variable map: the inferred one must pair its
  same-shaped convolutions and batch norms in creation order."""
  return dataclasses.replace(make_port(), build_model=_built_out_of_order,
                             variable_map=None)
