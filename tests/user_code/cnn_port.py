"""The team's port of cnn_legacy, and two deliberate bugs.

Its layers have names of its own (the harness infers the map from shapes),
the /255 stays in the model (as division: Rescaling(1/255) multiplies, which
rounds otherwise), the input pipeline reads the same file.
"""
import dataclasses
import os

import tensorflow as tf

import cnn_legacy
import team_trainer
from migration_tools.pair import port as port_lib

layers = tf.keras.layers


def build_model(params, scale=True):
  del params
  images = tf.keras.Input((cnn_legacy.SIZE, cnn_legacy.SIZE, 1))
  net = layers.Lambda(lambda x: x / 255.0, name='scale')(images) if scale else (
      images)
  net = layers.Conv2D(8, 3, padding='same', activation='relu',
                      name='features_a')(net)
  net = layers.MaxPooling2D(2, 2)(net)
  net = layers.Conv2D(8, 3, padding='same', activation='relu',
                      name='features_b')(net)
  net = layers.Dense(32, activation='relu', name='hidden')(
      layers.Flatten()(net))
  return tf.keras.Model(images, layers.Dense(cnn_legacy.CLASSES,
                                             name='logits')(net))


class Trainer(team_trainer.Trainer):

  def make_metrics(self):
    return {'accuracy': tf.keras.metrics.SparseCategoricalAccuracy()}

  def per_example_loss(self, labels, outputs):
    return tf.keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)


def input_pipeline(strategy, params):
  return team_trainer.distribute_records(
      strategy, params['batch_size'],
      os.path.join(cnn_legacy.FLAGS.data_dir, 'validation.tfrecords'),
      cnn_legacy._parse)  # pylint: disable=protected-access


def predict(model, features):
  logits = model(features, training=False)
  return {'classes': tf.argmax(logits, 1),
          'probabilities': tf.nn.softmax(logits)}


def make_port() -> port_lib.Port:
  return port_lib.Port(
      build_model=build_model,
      make_optimizer=lambda params: tf.keras.optimizers.SGD(
          cnn_legacy.FLAGS.learning_rate),
      trainer_class=Trainer, input_pipeline=input_pipeline, predict=predict)


def legacy_keras_optimizer() -> port_lib.Port:
  """A team's optimizer on Keras 2's legacy API (OptimizerV2), as
  SimCLR's LARS is written."""
  return dataclasses.replace(
      make_port(), make_optimizer=lambda params: (
          tf.keras.optimizers.legacy.SGD(cnn_legacy.FLAGS.learning_rate)))


def without_scaling() -> port_lib.Port:
  """Bug: the /255 the model_fn did is lost."""
  return dataclasses.replace(
      make_port(), build_model=lambda params: build_model(params, False))


class _PerReplicaMean(Trainer):

  def scaled_loss(self, per_example):
    return tf.reduce_mean(per_example)


def loss_averaged_per_replica() -> port_lib.Port:
  """Bug: each replica's mean, not divided by the global batch."""
  return dataclasses.replace(make_port(), trainer_class=_PerReplicaMean)
