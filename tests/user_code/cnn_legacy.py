"""Legacy pair (a): a TPUEstimator CNN unlike the kit's, as TPU-era code
wrote it. Absl flags defined at import (data_dir, learning_rate, use_tpu,
...), the model_fn reads FLAGS, raw uint8 pixels scaled by /255 inside the
model_fn, sparse integer labels, layers left to tf.compat.v1's default names
(conv2d, conv2d_1, dense, dense_1), no serving function. The input_fn reads
the team's own file name, validation.tfrecords. Written for the tests.
"""
# migration-scan: skip-file (legacy code on purpose)
import os

from absl import flags
import numpy as np
import tensorflow as tf

flags.DEFINE_string('data_dir', None, 'Where validation.tfrecords is.')
flags.DEFINE_string('model_dir', None, 'Checkpoints.')
flags.DEFINE_float('learning_rate', 0.05, 'SGD learning rate.')
flags.DEFINE_integer('train_batch_size', 1024, 'Global batch.')
flags.DEFINE_bool('use_tpu', True, 'Train on a TPU.')
flags.DEFINE_string('tpu', None, 'The TPU.')
FLAGS = flags.FLAGS

SIZE, CLASSES = 12, 10
v1 = tf.compat.v1


def write_data(data_dir: str, examples: int = 384, seed: int = 0) -> None:
  """The team's data: raw pixels and an int64 label per tf.Example."""
  rng = np.random.default_rng(seed)
  os.makedirs(data_dir, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(data_dir,
                                         'validation.tfrecords')) as writer:
    for _ in range(examples):
      label = int(rng.integers(CLASSES))
      image = rng.integers(0, 120, (SIZE, SIZE), dtype=np.uint8)
      image[label:label + 3, :] += 120  # Learnable: a band per class.
      feature = {
          'image_raw': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[image.tobytes()])),
          'label': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[label]))}
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def _parse(record):
  parsed = tf.io.parse_single_example(record, {
      'image_raw': tf.io.FixedLenFeature([], tf.string),
      'label': tf.io.FixedLenFeature([], tf.int64)})
  image = tf.reshape(tf.io.decode_raw(parsed['image_raw'], tf.uint8),
                     [SIZE, SIZE, 1])
  return tf.cast(image, tf.float32), tf.cast(parsed['label'], tf.int32)


def input_fn(params):
  dataset = tf.data.TFRecordDataset(
      os.path.join(FLAGS.data_dir, 'validation.tfrecords'))
  return dataset.map(_parse).batch(params['batch_size'], drop_remainder=True)


def metric_fn(labels, logits):
  return {'accuracy': v1.metrics.accuracy(labels, tf.argmax(logits, 1))}


def model_fn(features, labels, mode, params):
  images = features / 255.0
  net = v1.layers.conv2d(images, 8, 3, padding='same', activation=tf.nn.relu)
  net = v1.layers.max_pooling2d(net, 2, 2)
  net = v1.layers.conv2d(net, 8, 3, padding='same', activation=tf.nn.relu)
  net = v1.layers.flatten(net)
  net = v1.layers.dense(net, 32, activation=tf.nn.relu)
  logits = v1.layers.dense(net, CLASSES)
  if mode == v1.estimator.ModeKeys.PREDICT:
    return v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={
        'classes': tf.argmax(logits, 1), 'probabilities': tf.nn.softmax(
            logits)})
  loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
  if mode == v1.estimator.ModeKeys.EVAL:
    return v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
  optimizer = v1.train.GradientDescentOptimizer(FLAGS.learning_rate)
  if FLAGS.use_tpu:
    optimizer = v1.tpu.CrossShardOptimizer(optimizer)
  train_op = optimizer.minimize(loss, v1.train.get_global_step())
  return v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
