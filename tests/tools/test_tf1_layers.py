"""tf1_keras.layers.BatchNormalization moves its statistics as TF 1's fused batch
norm did, on Keras 2 and Keras 3: the unbiased variance, and on several
replicas their mean. Keras 3's own layer does neither (the test shows it)."""
import numpy as np
import pytest
import tensorflow as tf

from kit_core import keras_compat
from migration_tools.tf1_keras import layers as tf1_layers

MOMENTUM = 0.9
_X = np.random.default_rng(3).normal(2.0, 3.0, (8, 4, 4, 2)).astype(
    np.float32)


def _tf1_moving_variance() -> np.ndarray:
  """The moving variance after one training step on _X, as the kernel of
  TF 1's fused batch norm (tf.compat.v1.layers.batch_normalization, and
  Keras 2's) moves it; the op is there on every TensorFlow."""
  channels = _X.shape[-1]
  _, _, variance, *_ = tf.raw_ops.FusedBatchNormV3(
      x=_X, scale=np.ones(channels, np.float32),
      offset=np.zeros(channels, np.float32),
      mean=np.zeros(channels, np.float32),
      variance=np.ones(channels, np.float32), epsilon=1e-3,
      exponential_avg_factor=1.0 - MOMENTUM, is_training=True)
  return variance.numpy()


def _keras_moving_variance(layer_class) -> np.ndarray:
  layer = layer_class(momentum=MOMENTUM)
  layer(tf.constant(_X), training=True)
  return np.asarray(layer.moving_variance)


def test_the_moving_variance_moves_as_tf1s():
  theirs = _tf1_moving_variance()
  ours = _keras_moving_variance(tf1_layers.BatchNormalization)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)
  keras = _keras_moving_variance(tf.keras.layers.BatchNormalization)
  if keras_compat.is_keras3():
    # Keras 3 moves it by the biased variance: off by (1 - m) var / (N - 1).
    assert np.max(np.abs(keras - theirs) / theirs) > 1e-5
  else:
    np.testing.assert_allclose(keras, theirs, rtol=1e-6)


@pytest.mark.parametrize('layer_class', [tf1_layers.BatchNormalization,
                                         tf.keras.layers.BatchNormalization],
                         ids=['tf1_layers', 'keras'])
def test_on_two_replicas_the_statistics_are_their_mean(layer_class):
  strategy = tf.distribute.MirroredStrategy(
      ['/cpu:0', '/cpu:1'],
      cross_device_ops=tf.distribute.ReductionToOneDevice())
  with strategy.scope():
    layer = layer_class(momentum=0.5)
    layer.build((None, 1))
  # Replica 0 sees 0s, replica 1 sees 10s.
  batch = tf.data.Dataset.from_tensor_slices(
      tf.constant([[0.0], [0.0], [10.0], [10.0]])).batch(4)
  inputs = next(iter(strategy.experimental_distribute_dataset(batch)))

  @tf.function
  def step(x):
    strategy.run(lambda b: layer(b, training=True), args=(x,))
  step(inputs)
  mean = float(np.asarray(layer.moving_mean)[0])
  if layer_class is tf.keras.layers.BatchNormalization and (
      keras_compat.is_keras3()):
    assert mean == 0.0  # The first replica's alone.
  else:
    assert mean == pytest.approx(2.5)  # 0.5 * 0 + 0.5 * mean(0, 10).


def test_its_outputs_and_gradients_are_the_fused_kernels():
  # The same kernel: the same rounding, so a gradient that is 0 in exact
  # arithmetic is the same noise on both sides.
  layer = tf1_layers.BatchNormalization(momentum=MOMENTUM)
  layer.build(_X.shape)
  x = tf.constant(_X)
  upstream = tf.constant(np.random.default_rng(4).normal(size=_X.shape),
                         tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(x)
    ours = layer(x, training=True)
    loss = tf.reduce_sum(ours * upstream)
  ours_grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
  gamma, beta = tf.ones([2]), tf.zeros([2])
  with tf.GradientTape() as tape:
    tape.watch([x, gamma, beta])
    theirs, _, _ = tf.compat.v1.nn.fused_batch_norm(x, gamma, beta,
                                                    epsilon=layer.epsilon)
    loss = tf.reduce_sum(theirs * upstream)
  theirs_grads = tape.gradient(loss, [x, gamma, beta])
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=0)
  for a, b in zip(ours_grads, theirs_grads):
    np.testing.assert_allclose(a, b, rtol=0, atol=0)
