"""Input pipelines: the same TFRecords as estimator_mnist, sized per replica.

TPUEstimator handed each input_fn ``params['batch_size']``. Here the strategy
hands ``dataset_fn`` an ``InputContext``: the per-replica batch is the global
batch divided by the number of replicas, and each input pipeline (one per
worker) reads its own shard of the data.
"""
import tensorflow as tf

from mnist_common import tfrecords

SHUFFLE_BUFFER = 60000  # The whole MNIST train split.


def scale_image(image: tf.Tensor) -> tf.Tensor:
  """uint8 pixels [0, 255] -> float32 [-0.5, 0.5], as estimator_mnist does."""
  return tf.cast(image, tf.float32) / 255.0 - 0.5


def _parse(record):
  image, label = tfrecords.parse_example(record)
  return scale_image(image), label


def make_dataset(data_dir: str, split: str, batch_size: int, training: bool,
                 seed: int = 0,
                 input_context: tf.distribute.InputContext | None = None,
                 skip_batches: int = 0) -> tf.data.Dataset:
  """Batches of (scaled image, int label) from one split.

  Args:
    data_dir: directory with ``{split}.tfrecords``.
    split: 'train' or 'test'.
    batch_size: examples per batch (per replica under a strategy).
    training: shuffle and repeat forever; otherwise one pass.
    seed: shuffle seed.
    input_context: when given, keep only this input pipeline's shard.
    skip_batches: start after this many batches (training only): where a run
      that stopped after them was. The shuffle is seeded, so the batches that
      follow are the ones the uninterrupted run read.
  """
  dataset = tf.data.TFRecordDataset(tfrecords.split_path(data_dir, split))
  if input_context and input_context.num_input_pipelines > 1:
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
  dataset = dataset.map(_parse, num_parallel_calls=tf.data.AUTOTUNE)
  if training:
    dataset = dataset.cache().shuffle(SHUFFLE_BUFFER, seed=seed).repeat()
    # Element by element, before batching: the same position, no batch built.
    dataset = dataset.skip(skip_batches * batch_size)
  # Static shapes for TPUs: every batch full.
  dataset = dataset.batch(batch_size, drop_remainder=True)
  return dataset.prefetch(tf.data.AUTOTUNE)


def distribute(strategy: tf.distribute.Strategy, data_dir: str, split: str,
               global_batch: int, training: bool, seed: int = 0,
               start_step: int = 0) -> tf.distribute.DistributedDataset:
  """A dataset that feeds each replica global_batch // replicas examples.

  start_step: the training step to start at (a resumed run's). A distributed
  iterator cannot be checkpointed (tensorflow/tensorflow#56372), but each step
  takes one batch per replica from its pipeline, so the position follows from
  the step.
  """

  def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    batch = input_context.get_per_replica_batch_size(global_batch)
    replicas_here = (input_context.num_replicas_in_sync //
                     input_context.num_input_pipelines)
    return make_dataset(data_dir, split, batch, training, seed, input_context,
                        skip_batches=start_step * replicas_here)

  return strategy.distribute_datasets_from_function(dataset_fn)
