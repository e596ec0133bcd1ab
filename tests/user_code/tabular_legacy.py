"""Legacy pair (c): a non-image TPUEstimator model. A dict of integer and
float features (two id columns through embeddings made with get_variable,
two numeric columns), a multi-label head (three sigmoid outputs), Adam with
TF 1's epsilon (1e-8) on a polynomial learning-rate decay, precision and
mean-absolute-error metrics, and a serving signature with several outputs.
Its data is the team's own file, events.tfrecord. Written for the tests.
"""
# migration-scan: skip-file (legacy code on purpose)
import os

import numpy as np
import tensorflow as tf

USERS, ITEMS, DIM, LABELS = 50, 30, 8, 3
NUMERIC = ('age', 'hours')
v1 = tf.compat.v1


def write_data(data_dir: str, examples: int = 384, seed: int = 0) -> None:
  rng = np.random.default_rng(seed)
  os.makedirs(data_dir, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(data_dir,
                                         'events.tfrecord')) as writer:
    for _ in range(examples):
      user, item = int(rng.integers(USERS)), int(rng.integers(ITEMS))
      age, hours = float(rng.uniform(18, 70)), float(rng.uniform(0, 10))
      labels = [float((user + item) % 2), float(hours > 5),
                float(age < 30 and item % 3 == 0)]
      feature = {
          'user_id': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[user])),
          'item_id': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[item])),
          'age': tf.train.Feature(float_list=tf.train.FloatList(value=[age])),
          'hours': tf.train.Feature(float_list=tf.train.FloatList(
              value=[hours])),
          'labels': tf.train.Feature(float_list=tf.train.FloatList(
              value=labels))}
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def _parse(record):
  parsed = tf.io.parse_single_example(record, {
      'user_id': tf.io.FixedLenFeature([], tf.int64),
      'item_id': tf.io.FixedLenFeature([], tf.int64),
      'age': tf.io.FixedLenFeature([], tf.float32),
      'hours': tf.io.FixedLenFeature([], tf.float32),
      'labels': tf.io.FixedLenFeature([LABELS], tf.float32)})
  return parsed, parsed.pop('labels')


def input_fn(params):
  dataset = tf.data.TFRecordDataset(os.path.join(params['data_dir'],
                                                 'events.tfrecord'))
  return dataset.map(_parse).batch(params['batch_size'], drop_remainder=True)


def network(features, unused_bias=False):
  if unused_bias:  # Made, never used: no gradient reaches it.
    v1.get_variable('unused_bias', [LABELS], initializer=v1.zeros_initializer())
  users = v1.get_variable('user_embedding', [USERS, DIM])
  items = v1.get_variable('item_embedding', [ITEMS, DIM])
  numeric = tf.stack([features['age'] / 70.0, features['hours'] / 10.0], 1)
  net = tf.concat([tf.nn.embedding_lookup(users, features['user_id']),
                   tf.nn.embedding_lookup(items, features['item_id']),
                   numeric], axis=1)
  net = v1.layers.dense(net, 16, activation=tf.nn.relu, name='hidden')
  return v1.layers.dense(net, LABELS, name='head')


def metric_fn(labels, logits):
  probabilities = tf.sigmoid(logits)
  return {'precision': v1.metrics.precision(labels, probabilities > 0.5),
          'mae': v1.metrics.mean_absolute_error(labels, probabilities)}


def model_fn(features, labels, mode, params):
  logits = network(features, params.get('unused_bias', False))
  if mode == v1.estimator.ModeKeys.PREDICT:
    return v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={
        'probabilities': tf.sigmoid(logits), 'logits': logits,
        'top_label': tf.argmax(logits, 1)})
  loss = v1.losses.sigmoid_cross_entropy(labels, logits)
  if mode == v1.estimator.ModeKeys.EVAL:
    return v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
  step = v1.train.get_global_step()
  rate = v1.train.polynomial_decay(params['learning_rate'], step,
                                   params['decay_steps'], end_learning_rate=0.0)
  optimizer = v1.train.AdamOptimizer(rate)
  if params['use_tpu']:
    optimizer = v1.tpu.CrossShardOptimizer(optimizer)
  train_op = optimizer.minimize(loss, step)
  return v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def serving_input_receiver_fn():
  inputs = {'user_id': v1.placeholder(tf.int64, [None], name='user_id'),
            'item_id': v1.placeholder(tf.int64, [None], name='item_id'),
            'age': v1.placeholder(tf.float32, [None], name='age'),
            'hours': v1.placeholder(tf.float32, [None], name='hours')}
  return v1.estimator.export.ServingInputReceiver(inputs, inputs)
