"""--jit_compile puts XLA in the path of both loops' steps: a step XLA cannot
compile (a tf.py_function in it) fails with it and trains without it."""
import numpy as np
import pytest
import tensorflow as tf

from migrate import custom_loop
from migrate import fit_loop
from migrate import model as model_lib


class _HostStep(custom_loop.Trainer):
  """The kit's step with a tf.py_function in it: no XLA kernel."""

  def train_step(self, images, labels):
    images = tf.py_function(lambda x: x, [images], tf.float32)
    images.set_shape([None, 28, 28, 1])
    super().train_step(images, labels)


class _HostLayer(tf.keras.layers.Layer):
  """Passes its input through a tf.py_function."""

  def call(self, inputs):
    outputs = tf.py_function(lambda x: x, [inputs], tf.float32)
    outputs.set_shape(inputs.shape)
    return outputs

  def compute_output_shape(self, input_shape):
    return input_shape


def _data(strategy):
  images = np.zeros([8, 28, 28, 1], np.float32)
  labels = np.arange(8, dtype=np.int32) % 10
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(
      4, drop_remainder=True).repeat()
  return dataset, strategy.experimental_distribute_dataset(dataset)


@pytest.mark.parametrize('jit_compile', [False, True])
def test_custom_loop_step_goes_through_xla_only_when_asked(jit_compile):
  strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
  with strategy.scope():
    model = model_lib.build_model()
    optimizer = model_lib.make_optimizer(0.01)
  trainer = _HostStep(model, optimizer, strategy, 4, jit_compile=jit_compile)
  iterator = iter(_data(strategy)[1])
  if not jit_compile:
    assert int(trainer.train_steps(iterator, tf.constant(2))) == 2
    return
  with pytest.raises(tf.errors.OpError, match='EagerPyFunc'):
    trainer.train_steps(iterator, tf.constant(2))


@pytest.mark.parametrize('jit_compile', [False, True])
def test_fit_step_goes_through_xla_only_when_asked(jit_compile):
  strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
  with strategy.scope():
    net = model_lib.build_model()
    images = tf.keras.Input((28, 28, 1))
    model = tf.keras.Model(images, net(_HostLayer()(images)))
    optimizer = model_lib.make_optimizer(0.01)
  fit_loop.compile_model(model, optimizer, 2, jit_compile)
  dataset = _data(strategy)[0]
  if not jit_compile:
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0, shuffle=False)
    assert int(optimizer.iterations.numpy()) == 2
    return
  with pytest.raises(tf.errors.OpError, match='EagerPyFunc'):
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0, shuffle=False)
