"""The team's port of tabular_legacy (its variable map is a JSON file the
test writes, tabular_map.json's content below), and three deliberate bugs."""
import dataclasses
import os

import tensorflow as tf

import tabular_legacy as legacy
import team_trainer
from migration_tools.pair import port as port_lib

layers = tf.keras.layers

VARIABLE_MAP = {
    'user_embedding': 'users/embeddings',
    'item_embedding': 'items/embeddings',
    'hidden/kernel': 'hidden/kernel', 'hidden/bias': 'hidden/bias',
    'head/kernel': 'head/kernel', 'head/bias': 'head/bias',
}


def build_model(params, embedding_scale=None):
  del params
  inputs = {'user_id': tf.keras.Input((), dtype=tf.int64, name='user_id'),
            'item_id': tf.keras.Input((), dtype=tf.int64, name='item_id'),
            'age': tf.keras.Input((), name='age'),
            'hours': tf.keras.Input((), name='hours')}
  users = layers.Embedding(legacy.USERS, legacy.DIM, name='users')(
      inputs['user_id'])
  if embedding_scale:
    users *= embedding_scale
  items = layers.Embedding(legacy.ITEMS, legacy.DIM, name='items')(
      inputs['item_id'])
  numeric = tf.stack([inputs['age'] / 70.0, inputs['hours'] / 10.0], 1)
  net = layers.Concatenate()([users, items, numeric])
  net = layers.Dense(16, activation='relu', name='hidden')(net)
  return tf.keras.Model(inputs, layers.Dense(legacy.LABELS, name='head')(net))


class Trainer(team_trainer.Trainer):

  def make_metrics(self):
    return {'precision': tf.keras.metrics.Precision(thresholds=0.5),
            'mae': tf.keras.metrics.MeanAbsoluteError()}

  def per_example_loss(self, labels, outputs):
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels, logits=outputs), axis=1)

  def update_metrics(self, labels, outputs):
    probabilities = tf.sigmoid(outputs)
    self.metrics['precision'].update_state(labels, probabilities)
    self.metrics['mae'].update_state(labels, probabilities)


def make_optimizer(params, epsilon=1e-8):
  rate = tf.keras.optimizers.schedules.PolynomialDecay(
      params['learning_rate'], params['decay_steps'], end_learning_rate=0.0)
  return tf.keras.optimizers.Adam(rate, epsilon=epsilon)


def input_pipeline(strategy, params):
  return team_trainer.distribute_records(
      strategy, params['batch_size'],
      os.path.join(params['data_dir'], 'events.tfrecord'),
      legacy._parse)  # pylint: disable=protected-access


def predict(model, features):
  logits = model(features, training=False)
  return {'probabilities': tf.sigmoid(logits), 'logits': logits,
          'top_label': tf.argmax(logits, 1)}


class _Serving(tf.Module):

  def __init__(self, model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[
      tf.TensorSpec([None], tf.int64, name='user_id'),
      tf.TensorSpec([None], tf.int64, name='item_id'),
      tf.TensorSpec([None], tf.float32, name='age'),
      tf.TensorSpec([None], tf.float32, name='hours')])
  def serve(self, user_id, item_id, age, hours):
    return predict(self.model, {'user_id': user_id, 'item_id': item_id,
                                'age': age, 'hours': hours})


def export(model, base_dir, strategy):
  del strategy
  return team_trainer.save_serving(_Serving(model), base_dir)


def make_port() -> port_lib.Port:
  """No variable_map: the test gives it as a file (--variable_map)."""
  return port_lib.Port(
      build_model=build_model, make_optimizer=make_optimizer,
      trainer_class=Trainer, input_pipeline=input_pipeline, export=export,
      predict=predict)


def keras_adam_epsilon() -> port_lib.Port:
  """Bug: Keras's default Adam epsilon (1e-7), not TF 1's 1e-8."""
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, epsilon=1e-7)))


def scaled_embedding() -> port_lib.Port:
  """Bug: the user embedding scaled by sqrt(dim), as some ports of
  transformer code do where the legacy model did not."""
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, embedding_scale=legacy.DIM ** 0.5)))


class _PrecisionOnLogits(Trainer):

  def update_metrics(self, labels, outputs):
    self.metrics['precision'].update_state(labels, outputs)  # Not sigmoid.
    self.metrics['mae'].update_state(labels, tf.sigmoid(outputs))


def precision_on_logits() -> port_lib.Port:
  """Bug: precision computed on the logits, not the probabilities."""
  return dataclasses.replace(make_port(), trainer_class=_PrecisionOnLogits)


class _Bias(layers.Layer):
  """A bias of LABELS, added to the logits or not."""

  def __init__(self, used, **kwargs):
    super().__init__(**kwargs)
    self.used = used

  def build(self, input_shape):
    self.bias = self.add_weight(name='bias', shape=[legacy.LABELS],
                                initializer='zeros')

  def call(self, logits):
    return logits + self.bias * 3.0 if self.used else logits


def _with_bias(used: bool) -> port_lib.Port:
  def build(params):
    model = build_model(params)
    return tf.keras.Model(model.inputs, _Bias(used, name='extra')(
        model.outputs[0]))
  return dataclasses.replace(make_port(), build_model=build)


def unused_bias() -> port_lib.Port:
  """The legacy model's unused bias, made and not used here either."""
  return _with_bias(used=False)


def used_bias() -> port_lib.Port:
  """Bug: the bias the legacy model never used, added to the logits."""
  return _with_bias(used=True)
