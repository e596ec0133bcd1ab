"""model_fn: the MNIST CNN as a TPUEstimator model function.

conv 5x5x32 relu -> max-pool 2x2 -> conv 5x5x64 relu -> max-pool 2x2 ->
dense 128 relu -> dropout 0.4 (training only) -> dense 10.
"""
import tensorflow.compat.v1 as tf

from mnist_common import resources

NUM_CLASSES = 10
DROPOUT_RATE = 0.4
DECAY_STEPS = 100000
DECAY_RATE = 0.96
LOG_EVERY_STEPS = 100

def build_network(images: tf.Tensor, training: bool) -> tf.Tensor:
  """Scaled images [batch, 28, 28, 1] -> logits [batch, 10].

  The layer names fix the checkpoint's variable names (conv1/kernel, ...),
  which the migrated model and the checkpoint converter map onto one to one.
  """
  layers = tf.layers
  y = layers.Conv2D(32, 5, padding='same', activation=tf.nn.relu,
                    name='conv1')(images)
  y = layers.MaxPooling2D(2, 2, padding='same')(y)
  y = layers.Conv2D(64, 5, padding='same', activation=tf.nn.relu,
                    name='conv2')(y)
  y = layers.MaxPooling2D(2, 2, padding='same')(y)
  y = layers.Flatten()(y)
  y = layers.Dense(128, activation=tf.nn.relu, name='dense')(y)
  y = layers.Dropout(DROPOUT_RATE)(y, training=training)
  return layers.Dense(NUM_CLASSES, name='logits')(y)


def forward_bytes() -> int:
  """resources.forward_bytes of build_network."""
  with tf.Graph().as_default() as graph:
    build_network(tf.placeholder(tf.float32, [1, 28, 28, 1]), training=True)
  return resources.forward_bytes(graph)


def variable_shapes() -> dict[str, list[int]]:
  """{name: shape} of the network's variables, as a checkpoint holds them."""
  with tf.Graph().as_default():
    build_network(tf.placeholder(tf.float32, [1, 28, 28, 1]), training=True)
    return {v.op.name: v.shape.as_list() for v in tf.global_variables()}


def metric_fn(labels: tf.Tensor, logits: tf.Tensor) -> dict:
  """Evaluation metrics; on a TPU this runs on the host, after the shards."""
  predictions = tf.argmax(logits, axis=1)
  return {'accuracy': tf.metrics.accuracy(labels=labels,
                                          predictions=predictions)}


def learning_rate_schedule(initial_rate: float) -> tf.Tensor:
  """Exponential decay on the global step: one step per global batch."""
  return tf.train.exponential_decay(initial_rate, tf.train.get_global_step(),
                                    decay_steps=DECAY_STEPS,
                                    decay_rate=DECAY_RATE)


def make_optimizer(learning_rate: tf.Tensor,
                   use_tpu: bool) -> tf.train.Optimizer:
  """Plain SGD; on a TPU wrapped to average the shards' gradients."""
  optimizer = tf.train.GradientDescentOptimizer(learning_rate)
  if use_tpu:
    # Sums the shards' gradients with CrossReplicaSum and divides by the
    # number of shards. Only on a TPU: on CPU the graph builds but the first
    # step fails (no CrossReplicaSum kernel).
    optimizer = tf.tpu.CrossShardOptimizer(optimizer)
  return optimizer


def model_fn(features, labels, mode, params):
  """The TPUEstimator model function.

  Args:
    features: images scaled to [-0.5, 0.5], [batch, 28, 28, 1] float32.
    labels: int32 class ids [batch] (None in PREDICT).
    mode: a tf.estimator.ModeKeys value.
    params: from TPUEstimator: 'batch_size' (per shard), and ours:
      'learning_rate', 'use_tpu'.

  Returns:
    A TPUEstimatorSpec for the mode.
  """
  training = mode == tf.estimator.ModeKeys.TRAIN
  logits = build_network(features, training)

  if mode == tf.estimator.ModeKeys.PREDICT:
    predictions = {
        'class_ids': tf.argmax(logits, axis=1),
        'probabilities': tf.nn.softmax(logits),
    }
    return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions=predictions)

  loss = tf.losses.softmax_cross_entropy(
      onehot_labels=tf.one_hot(labels, NUM_CLASSES), logits=logits)

  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))

  optimizer = make_optimizer(learning_rate_schedule(params['learning_rate']),
                             params['use_tpu'])
  global_step = tf.train.get_global_step()
  train_op = optimizer.minimize(loss, global_step=global_step)
  hooks = []
  if not params['use_tpu']:
    # TPUEstimator logs the loss itself only on a TPU, after each loop.
    hooks.append(tf.train.LoggingTensorHook(
        {'step': global_step, 'loss': loss}, every_n_iter=LOG_EVERY_STEPS))
  return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op,
                                           training_hooks=hooks)
