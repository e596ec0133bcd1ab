"""Legacy pair (b): a small ResNet-style TPUEstimator model unlike the
kit's. Batch norm whose moving statistics are updated through UPDATE_OPS
(momentum 0.997, epsilon 1e-5, as TPU ResNets set them), momentum SGD, a
dict of features (an image and a per-example gain), top-1 and top-5 metrics,
a serving function with named float inputs, and params keys of its own
(data_dir, learning_rate, momentum). Its data is the team's own file,
shard-0.tfrecord. Written for the tests.
"""
# migration-scan: skip-file (legacy code on purpose)
import os

import numpy as np
import tensorflow as tf

SIZE, CHANNELS, CLASSES, WIDTH = 8, 3, 10, 8
BN_MOMENTUM, BN_EPSILON = 0.997, 1e-5
v1 = tf.compat.v1


def write_data(data_dir: str, examples: int = 384, seed: int = 0) -> None:
  rng = np.random.default_rng(seed)
  os.makedirs(data_dir, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(data_dir,
                                         'shard-0.tfrecord')) as writer:
    for _ in range(examples):
      label = int(rng.integers(CLASSES))
      image = rng.normal(size=(SIZE, SIZE, CHANNELS)).astype(np.float32)
      image[:, label % SIZE, :] += 2.0
      feature = {
          'image': tf.train.Feature(float_list=tf.train.FloatList(
              value=image.ravel())),
          'gain': tf.train.Feature(float_list=tf.train.FloatList(
              value=[rng.uniform(0.5, 1.5)])),
          'label': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[label]))}
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def _parse(record):
  parsed = tf.io.parse_single_example(record, {
      'image': tf.io.FixedLenFeature([SIZE, SIZE, CHANNELS], tf.float32),
      'gain': tf.io.FixedLenFeature([], tf.float32),
      'label': tf.io.FixedLenFeature([], tf.int64)})
  label = tf.cast(parsed.pop('label'), tf.int32)
  return parsed, label


def input_fn(params):
  dataset = tf.data.TFRecordDataset(os.path.join(params['data_dir'],
                                                 'shard-0.tfrecord'))
  return dataset.map(_parse).batch(params['batch_size'], drop_remainder=True)


def _bn(net, training):
  return v1.layers.batch_normalization(net, momentum=BN_MOMENTUM,
                                       epsilon=BN_EPSILON, training=training)


def _conv(net):
  return v1.layers.conv2d(net, WIDTH, 3, padding='same', use_bias=False)


def network(features, training):
  net = features['image'] * features['gain'][:, None, None, None]
  net = tf.nn.relu(_bn(_conv(net), training))
  shortcut = net
  net = tf.nn.relu(_bn(_conv(net), training))
  net = _bn(_conv(net), training)
  net = tf.nn.relu(net + shortcut)
  net = tf.reduce_mean(net, axis=[1, 2])
  return v1.layers.dense(net, CLASSES)


def metric_fn(labels, logits):
  return {
      'top_1_accuracy': v1.metrics.accuracy(labels, tf.argmax(logits, 1)),
      'top_5_accuracy': v1.metrics.mean(tf.cast(
          v1.nn.in_top_k(logits, labels, 5), tf.float32))}


def model_fn(features, labels, mode, params):
  training = mode == v1.estimator.ModeKeys.TRAIN
  logits = network(features, training)
  if mode == v1.estimator.ModeKeys.PREDICT:
    return v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={
        'classes': tf.argmax(logits, 1),
        'probabilities': tf.nn.softmax(logits)})
  loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
  if mode == v1.estimator.ModeKeys.EVAL:
    return v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
  optimizer = v1.train.MomentumOptimizer(params['learning_rate'],
                                         params['momentum'])
  if params['use_tpu']:
    optimizer = v1.tpu.CrossShardOptimizer(optimizer)
  # The batch-norm statistics move only through UPDATE_OPS.
  with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
    train_op = optimizer.minimize(loss, v1.train.get_global_step())
  return v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def serving_input_receiver_fn():
  inputs = {'image': v1.placeholder(tf.float32, [None, SIZE, SIZE, CHANNELS],
                                    name='image'),
            'gain': v1.placeholder(tf.float32, [None], name='gain')}
  return v1.estimator.export.ServingInputReceiver(inputs, inputs)
