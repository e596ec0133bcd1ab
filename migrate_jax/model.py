"""build_model: estimator_mnist's CNN as a backend-agnostic Keras 3 model,
plus its loss and optimizer; keras.ops only, so it runs on JAX.

Layer for layer what ``estimator_mnist.model.build_network`` builds, with the
same layer names as migrate/model.py, so that its variables map one to one
onto the Estimator checkpoint (``conv1/kernel`` <-> ``conv1/kernel:0``).
"""
import keras
from keras import layers
from keras import ops

NUM_CLASSES = 10
DROPOUT_RATE = 0.4
DECAY_STEPS = 100000
DECAY_RATE = 0.96
IMAGE_SHAPE = (28, 28, 1)
PRECISIONS = ('float32', 'mixed_bfloat16')


def build_model(dropout_rate: float = DROPOUT_RATE,
                precision: str = 'float32', seed: int = 0) -> keras.Model:
  """Scaled images [batch, 28, 28, 1] -> logits [batch, 10].

  Build it after ``keras.distribution.set_distribution``, so that its
  variables are laid out over the devices (replicated, for DataParallel).
  precision: 'float32', the legacy model's numerics, or 'mixed_bfloat16'
  (bfloat16 math, float32 variables), what ``tf.tpu.bfloat16_scope`` was.
  seed: dropout's; its state is a variable of the model, so a checkpoint
  holds it and a resumed run draws the masks the whole run would have.
  """
  if precision not in PRECISIONS:
    raise ValueError(f'precision {precision!r}: one of {PRECISIONS}')
  policy = keras.DTypePolicy(precision)
  inputs = keras.Input(IMAGE_SHAPE, name='image')
  y = layers.Conv2D(32, 5, padding='same', activation='relu', name='conv1',
                    dtype=policy)(inputs)
  y = layers.MaxPooling2D(2, 2, padding='same', name='pool1', dtype=policy)(y)
  y = layers.Conv2D(64, 5, padding='same', activation='relu', name='conv2',
                    dtype=policy)(y)
  y = layers.MaxPooling2D(2, 2, padding='same', name='pool2', dtype=policy)(y)
  y = layers.Flatten(name='flatten', dtype=policy)(y)
  y = layers.Dense(128, activation='relu', name='dense', dtype=policy)(y)
  y = layers.Dropout(dropout_rate, name='dropout', dtype=policy, seed=seed)(y)
  # float32 logits whatever the precision: the softmax and the loss stay
  # float32, as Keras's mixed-precision guide has it.
  logits = layers.Dense(NUM_CLASSES, name='logits', dtype='float32')(y)
  return keras.Model(inputs, logits, name='mnist_cnn')


def scale_image(image):
  """uint8 pixels [0, 255] -> float32 [-0.5, 0.5], as estimator_mnist does."""
  return ops.cast(image, 'float32') / 255.0 - 0.5


def per_example_loss(labels, logits):
  """Softmax cross-entropy of int labels, one value per example; Keras
  averages it over the global batch, as the Estimator did over its batch."""
  labels = ops.reshape(ops.cast(labels, 'int32'), (-1,))
  return keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                      from_logits=True)


def make_optimizer(learning_rate: float) -> keras.optimizers.Optimizer:
  """Plain SGD on the decay schedule: initial * 0.96 ** (step / 100000), as
  tf.compat.v1's exponential_decay. The schedule reads the optimizer's
  iterations, one per global batch, as the Estimator's global_step was. No
  CrossShardOptimizer: under DataParallel the loss is the global batch's
  mean, and its gradient is the sum over the devices' shares."""
  return keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(
      learning_rate, decay_steps=DECAY_STEPS, decay_rate=DECAY_RATE))


def predict_probabilities(model: keras.Model, trainable, non_trainable,
                          image):
  """The exported signature's outputs from raw uint8 pixels: the model's
  stateless call on the given variable values (a pure function of them,
  as jax.export needs)."""
  logits, _ = model.stateless_call(trainable, non_trainable,
                                   scale_image(image), training=False)
  return {'class_ids': ops.argmax(logits, axis=1),
          'probabilities': ops.softmax(logits)}
