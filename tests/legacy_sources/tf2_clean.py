"""TF 2 code the scanner must leave alone: no line here needs changing.
Written for the scanner tests."""
import os

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

flags.DEFINE_string('model_dir', '/tmp/model', 'Checkpoints.')
FLAGS = flags.FLAGS


def model():
  return tf.keras.Sequential([
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.BatchNormalization(),
      tf.keras.layers.Dropout(0.4),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(10),
  ])


def dataset(pattern, batch_size):
  files = tf.io.gfile.glob(pattern)
  features = {'image': tf.io.FixedLenFeature([], tf.string),
              'label': tf.io.FixedLenFeature([], tf.int64)}

  def parse(record):
    parsed = tf.io.parse_single_example(record, features)
    image = tf.io.decode_raw(parsed['image'], tf.uint8)
    return tf.cast(image, tf.float32) / 255.0, tf.cast(parsed['label'],
                                                       tf.int32)
  return tf.data.TFRecordDataset(files).map(parse).batch(batch_size)


def train(strategy, steps, batch_size):
  with strategy.scope():
    net = model()
    optimizer = tf.keras.optimizers.Adam(1e-3, epsilon=1e-8)
    accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
  checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer)
  manager = tf.train.CheckpointManager(checkpoint, FLAGS.model_dir, 3)
  writer = tf.summary.create_file_writer(os.path.join(FLAGS.model_dir, 'logs'))

  @tf.function
  def step(images, labels):
    with tf.GradientTape() as tape:
      logits = net(images, training=True)
      per_example = tf.keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True)
      loss = tf.nn.compute_average_loss(per_example,
                                        global_batch_size=batch_size)
    grads = tape.gradient(loss, net.trainable_variables)
    optimizer.apply_gradients(zip(grads, net.trainable_variables))
    accuracy.update_state(labels, logits)
    with writer.as_default(step=optimizer.iterations):
      tf.summary.scalar('loss', loss)
    return tf.nn.dropout(logits, rate=0.1)

  for images, labels in dataset('/data/train-*', batch_size).take(steps):
    strategy.run(step, args=(images, labels))
  manager.save()
  net.evaluate(dataset('/data/test-*', batch_size), steps=10)
  logging.info('accuracy %s', accuracy.result())


def evaluate_checkpoints(model_dir):
  for path in tf.train.checkpoints_iterator(model_dir, timeout=1):
    reader = tf.train.load_checkpoint(path)
    logging.info('%s %s', path, tf.train.load_variable(path, 'step'))
    del reader
  ema = tf.train.ExponentialMovingAverage(0.999)
  return tf.train.latest_checkpoint(model_dir), ema


def resize(images):
  return tf.image.resize(images, [224, 224], method='bilinear',
                         antialias=True)


def main(_):
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu='')
  tf.tpu.experimental.initialize_tpu_system(resolver)
  train(tf.distribute.TPUStrategy(resolver), 100, 1024)
  model().save(os.path.join(FLAGS.model_dir, 'model.keras'))
  hparams = {'batch_size': 1024}
  return hparams['batch_size']


if __name__ == '__main__':
  app.run(main)
