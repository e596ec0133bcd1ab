"""Keras layers that keep what a TF 1 layer did where Keras 3 changed it.

``BatchNormalization`` is Keras's, computing what TF 1's fused batch norm
(``tf.compat.v1.layers.batch_normalization``, and Keras 2's layer) computed.
Keras 3's own differs three ways:

- it moves the moving variance toward the batch's biased variance; TF 1's
  fused kernel toward the unbiased one (N / (N - 1) times it, N the values
  each channel's statistics are taken over);
- on several replicas it keeps the first replica's moving statistics (its
  variables aggregate nothing); Keras 2 keeps their mean;
- it computes the batch's normalisation and its gradients with separate ops,
  which round otherwise than the fused kernel: a beta whose gradient is 0 in
  exact arithmetic (a batch norm's, followed through linear layers by
  another batch norm) then gets other rounding noise, which the `updates`
  check sees.

On Keras 3, for a 4-D input normalised over its last axis (images, NHWC),
this layer runs TF 1's fused kernel itself (``FusedBatchNormV3`` with its
exponential average), so that all three are as TF 1's; for other inputs it
corrects the variance's update only. On Keras 2 it is Keras's own layer,
unchanged (fused already). tests/tools/test_tf1_layers.py holds it to the
kernel, on one replica and two.
"""
import tensorflow as tf

from kit_core import keras_compat


class BatchNormalization(tf.keras.layers.BatchNormalization):
  """tf.keras.layers.BatchNormalization that computes and moves its
  statistics as TF 1's fused batch norm did (see module)."""

  def add_weight(self, *args, **kwargs):
    if keras_compat.is_keras3() and kwargs.get('trainable') is False:
      # The replicas' mean, as Keras 2's and the TPU cores' moving
      # statistics are compared (migration-compare takes their mean).
      kwargs.setdefault('aggregation', 'mean')
    return super().add_weight(*args, **kwargs)

  def _fuses(self, inputs) -> bool:
    axes = list(self._reduction_axes)  # pylint: disable=protected-access
    return (len(inputs.shape) == 4 and axes == [0, 1, 2] and self.scale and
            self.center and not self.renorm)

  def call(self, inputs, training=None, mask=None):
    if not keras_compat.is_keras3():
      return super().call(inputs, training=training, mask=mask)
    if mask is None and self._fuses(inputs):
      return self._fused(inputs, bool(training) and self.trainable)
    outputs = super().call(inputs, training=training, mask=mask)
    if training and self.trainable:
      # Keras 3 moved the variance by (1 - momentum) * biased; TF 1 by (1 -
      # momentum) * biased * N / (N - 1): the rest, biased / (N - 1).
      axes = list(self._reduction_axes)  # pylint: disable=protected-access
      values = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)),
                       tf.float32)
      _, variance = tf.nn.moments(tf.cast(inputs, tf.float32), axes)
      self.moving_variance.assign_add(
          (1.0 - self.momentum) * variance / tf.maximum(values - 1.0, 1.0))
    return outputs

  def _fused(self, inputs, training: bool):
    """TF 1's fused kernel: in training, the batch's statistics and the
    moving ones moved by its exponential average (unbiased variance)."""
    dtype = inputs.dtype
    # The kernel itself (tf.compat.v1.nn.fused_batch_norm wraps it): its
    # gradient is registered, and it is TF 2 API.
    outputs, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
        x=tf.cast(inputs, tf.float32), scale=tf.convert_to_tensor(self.gamma),
        offset=tf.convert_to_tensor(self.beta),
        mean=tf.convert_to_tensor(self.moving_mean),
        variance=tf.convert_to_tensor(self.moving_variance),
        epsilon=self.epsilon,
        exponential_avg_factor=1.0 - self.momentum if training else 1.0,
        is_training=training)
    if training:
      self.moving_mean.assign(mean)
      self.moving_variance.assign(variance)
    return tf.cast(outputs, dtype)
