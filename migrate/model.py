"""build_model: estimator_mnist's CNN as a Keras model, plus its loss,
optimizer and gradients.

Layer for layer what ``estimator_mnist.model.build_network`` builds, with the
same layer names, so that variables map one to one onto the Estimator
checkpoint (``conv1/kernel`` <-> ``conv1/kernel:0``, ...).
"""
from typing import Sequence

import tensorflow as tf

from kit_core import cpu
from kit_core import keras_compat
from mnist_common import resources

NUM_CLASSES = 10
DROPOUT_RATE = 0.4
DECAY_STEPS = 100000
DECAY_RATE = 0.96
IMAGE_SHAPE = (28, 28, 1)
PRECISIONS = ('float32', 'mixed_bfloat16')


def build_model(dropout_rate: float = DROPOUT_RATE,
                precision: str = 'float32',
                checkpointed_random: bool = False) -> tf.keras.Model:
  """Scaled images [batch, 28, 28, 1] -> logits [batch, 10].

  Build it inside ``strategy.scope()`` so that its variables are mirrored
  (or placed on the TPU). precision: 'float32', the legacy model's numerics,
  or 'mixed_bfloat16', Keras's mixed precision (bfloat16 math, float32
  variables, so checkpoints are the same): what ``tf.tpu.bfloat16_scope``
  was to TPUEstimator code, faster where the hardware has bfloat16 (TPUs;
  CPUs with AVX512_BF16), but no longer the legacy model's rounding.
  checkpointed_random: dropout draws from a state a checkpoint can hold
  (keras_compat.dropout_kwargs), for an exact resume; off, on Keras 2 it
  draws TF 1's random numbers, as the legacy model did.
  """
  if precision not in PRECISIONS:
    raise ValueError(f'precision {precision!r}: one of {PRECISIONS}')
  policy = tf.keras.mixed_precision.Policy(precision)
  layers = tf.keras.layers
  inputs = tf.keras.Input(IMAGE_SHAPE, name='image')
  y = layers.Conv2D(32, 5, padding='same', activation='relu', name='conv1',
                    dtype=policy)(inputs)
  y = layers.MaxPooling2D(2, 2, padding='same', name='pool1', dtype=policy)(y)
  y = layers.Conv2D(64, 5, padding='same', activation='relu', name='conv2',
                    dtype=policy)(y)
  y = layers.MaxPooling2D(2, 2, padding='same', name='pool2', dtype=policy)(y)
  y = layers.Flatten(name='flatten', dtype=policy)(y)
  y = layers.Dense(128, activation='relu', name='dense', dtype=policy)(y)
  y = layers.Dropout(dropout_rate, name='dropout', dtype=policy,
                     **keras_compat.dropout_kwargs(checkpointed_random))(y)
  # float32 logits whatever the precision: the softmax and the loss stay
  # float32, as Keras's mixed-precision guide has it; this layer is tiny.
  logits = layers.Dense(NUM_CLASSES, name='logits', dtype='float32')(y)
  model = Classifier(inputs, logits, name='mnist_cnn')
  model.gate_gradients = gates_gradients(precision)
  return model


def forward_bytes(precision: str = 'float32') -> int:
  """resources.forward_bytes of a training step's forward pass, from a
  model of its own, outside any strategy."""
  model = build_model(precision=precision)
  forward = tf.function(lambda image: model(image, training=True))
  return resources.forward_bytes(forward.get_concrete_function(
      tf.TensorSpec([1, *IMAGE_SHAPE], tf.float32)).graph)


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  """Softmax cross-entropy on one-hot labels, one value per example.

  The Estimator averaged it over its batch; under a strategy each replica sees
  a part of the global batch, so the caller divides the sum by the *global*
  batch (``tf.nn.compute_average_loss``), or lets Keras do it.
  """
  # Keras fit hands labels in as [batch, 1]; the custom loop as [batch].
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  onehot = tf.one_hot(labels, NUM_CLASSES)
  return tf.keras.losses.categorical_crossentropy(onehot, logits,
                                                  from_logits=True)


def learning_rate_schedule(initial_rate: float
                           ) -> tf.keras.optimizers.schedules.LearningRateSchedule:
  """initial_rate * 0.96 ** (step / 100000), as tf.compat.v1's exponential_decay."""
  return tf.keras.optimizers.schedules.ExponentialDecay(
      initial_rate, decay_steps=DECAY_STEPS, decay_rate=DECAY_RATE)


def make_optimizer(learning_rate: float) -> tf.keras.optimizers.Optimizer:
  """Plain SGD on the decay schedule.

  The schedule reads ``optimizer.iterations``, which advances once per global
  batch whatever the number of replicas, as the Estimator's global_step did.
  No CrossShardOptimizer: the strategy all-reduces the gradients.
  """
  return tf.keras.optimizers.SGD(learning_rate_schedule(learning_rate))


def gates_gradients(precision: str) -> bool:
  """Whether ``gradients`` gates them for a model of this precision.

  Gated (as TF 1 took them), except in bfloat16 on a CPU with AMX. The
  gating keeps oneDNN from fusing each convolution's weight gradient with
  its bias gradient (_MklNativeConv2DBackpropFilterWithBias). In float32 the
  fused kernel is the slower one on every CPU measured (AVX2, AVX-512 with
  AVX512_BF16, AMX). In bfloat16 with AMX it is the faster one: apart, the
  bias gradient runs on Eigen's slow bfloat16 kernel, and the ungated step
  trains 1.09-1.46x faster (benchmarks/README.md, "On a CPU with AMX"). Not
  measured in bfloat16 without AMX: left gated there.
  """
  return precision == 'float32' or cpu.has_amx_bfloat16() is not True


def gradients(loss: tf.Tensor, variables: Sequence[tf.Variable],
              gate: bool = True) -> list[tf.Tensor]:
  """d loss / d variables, gated per op as TF 1 optimizers took them.

  ``optimizer.minimize`` in a model_fn called ``tf.gradients`` with
  ``gate_gradients=True`` (GATE_OP, the default): each op's gradients are
  grouped before they flow on. A GradientTape does not group them, and on a
  CPU oneDNN then fuses each convolution's weight gradient with its bias
  gradient into one kernel (_MklNativeConv2DBackpropFilterWithBias) that
  takes 1.8x (conv2) and 6x (conv1) the time of the two apart here in
  float32 (``python benchmarks/kernels.py``; benchmarks/README.md). The
  gradients are the same ops on the same values. gate=False: ungrouped, as a
  tape takes them (``gates_gradients`` says when: a model's
  ``gate_gradients``). Graph-only: call it inside a tf.function (a training
  step always is).
  """
  # Graph-only on purpose (see above): the scanner cannot see the
  # tf.function it runs in from this call.
  return tf.gradients(loss, variables, gate_gradients=gate)  # migration-scan: ignore


class Classifier(tf.keras.Model):
  """A functional Keras model whose fit() step takes its gradients with
  ``gradients`` (above) instead of a GradientTape; otherwise Keras's own
  step: compiled loss (scaled for the replicas), optimizer, metrics.
  ``gate_gradients``: build_model sets it by the model's precision."""

  gate_gradients = True

  def train_step(self, data):
    images, labels = data
    logits = self(images, training=True)
    loss = self.compute_loss(images, labels, logits)
    keras_compat.add_to_loss_tracker(self, loss, tf.shape(images)[0])
    variables = self.trainable_variables
    self.optimizer.apply_gradients(
        zip(gradients(loss, variables, self.gate_gradients), variables))
    return self.compute_metrics(images, labels, logits, sample_weight=None)

  def make_train_function(self, force=False):
    """Keras's own, except where keras-team/keras#19246 would fail it."""
    if not keras_compat.fit_needs_own_steps(self):
      return super().make_train_function(force)
    if self.train_function is None or force:
      self.train_function = keras_compat.multi_step_train_function(self)
    return self.train_function
