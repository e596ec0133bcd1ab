"""input_fns: TFRecords -> batches, sized by TPUEstimator's params['batch_size'].

TPUEstimator calls each input_fn with params['batch_size'] set to the batch it
wants from that call: the per-shard (per-core) batch on a TPU, the whole batch
on CPU. The input_fn never reads a global batch size of its own.

tf.data's autotuning thread is off (``process.without_autotune_thread``): on
TF 2.15 its teardown holds up the Estimator's session close for up to a
minute, and these pipelines feed far faster than the model trains anyway.
"""
import tensorflow.compat.v1 as tf

from kit_core import process
from mnist_common import tfrecords

SHUFFLE_BUFFER = 60000  # The whole MNIST train split.


def scale_image(image: tf.Tensor) -> tf.Tensor:
  """uint8 pixels [0, 255] -> float32 [-0.5, 0.5]."""
  return tf.cast(image, tf.float32) / 255.0 - 0.5


def _parse(record):
  image, label = tfrecords.parse_example(record)
  return scale_image(image), label


def _records(data_dir: str, split: str) -> tf.data.Dataset:
  return tf.data.TFRecordDataset(tfrecords.split_path(data_dir, split)).map(
      _parse, num_parallel_calls=tf.data.AUTOTUNE)


def train_input_fn(params: dict) -> tf.data.Dataset:
  """Endless shuffled (image, label) batches of the train split."""
  dataset = _records(params['data_dir'], 'train').cache()
  dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=params['seed']).repeat()
  # TPUs need static shapes: every batch full.
  dataset = dataset.batch(params['batch_size'], drop_remainder=True)
  return process.without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))


def eval_input_fn(params: dict) -> tf.data.Dataset:
  """One pass over the test split in full batches."""
  dataset = _records(params['data_dir'], 'test')
  dataset = dataset.batch(params['batch_size'], drop_remainder=True)
  return process.without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))


def predict_input_fn(params: dict) -> tf.data.Dataset:
  """The first params['num_predictions'] test images, without labels."""
  dataset = _records(params['data_dir'], 'test').take(params['num_predictions'])
  dataset = dataset.map(lambda image, label: image)
  return process.without_autotune_thread(dataset.batch(params['batch_size']))
