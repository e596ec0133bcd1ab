"""A Keras-on-TensorFlow port's dots at an accelerator's rounding, emulated on
the CPU (--emulate_precision): each float32 operand of every matmul,
einsum and convolution rounded as precision.rounded says, forward and
backward, eagerly and as traced. The comparisons that use it run in
test_golden.py and test_across_versions.py."""
import numpy as np
import pytest
import tensorflow as tf

from migration_tools.pair import precision
from migration_tools.pair.frameworks.keras_tf import precision as keras_tf_precision

ROUNDINGS = [precision.TF32, precision.BF16]


def _values() -> np.ndarray:
  """Values over float32's whole range, ties included, and the specials."""
  generator = np.random.default_rng(0)
  spread = generator.standard_normal(20000) * 10.0 ** generator.integers(
      -40, 38, 20000)
  ties = np.float32(1) + np.float32(2.0 ** -11) * np.arange(-8, 9)
  specials = [np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 0.0, -0.0, 1e-42]
  return np.concatenate([spread, ties, specials]).astype(np.float32)


@pytest.mark.parametrize('rounding', ROUNDINGS, ids=lambda r: r.name)
def test_tensorflows_rounding_is_the_reference_rounding(rounding):
  values = _values()
  got = keras_tf_precision.round_to(tf.constant(values), rounding).numpy()
  np.testing.assert_array_equal(got, precision.rounded(values, rounding))
  # Not a value unchanged: the rounding did round.
  assert np.sum(got != values) > len(values) // 2


def test_the_reference_rounds_to_nearest_ties_to_even():
  one = np.float32(1)
  # TF32 keeps 10 mantissa bits: 2^-11 is half a unit in the last place.
  tf32 = precision.rounded(one + np.float32(2.0 ** -11) * np.float32(
      [1, 3, 0.5, 1.5]), precision.TF32) - one
  np.testing.assert_array_equal(tf32, np.float32([0, 2.0 ** -9, 0,
                                                  2.0 ** -10]))
  # Beyond the largest finite value of the rounded format: an infinity.
  assert precision.rounded(np.float32(3.4e38), precision.BF16) == np.inf
  assert precision.rounded(np.float32(-3.4e38), precision.BF16) == -np.inf


def _operands():
  generator = np.random.default_rng(1)
  x = tf.constant(generator.normal(size=(6, 32)), tf.float32)
  w = tf.constant(generator.normal(size=(32, 5)), tf.float32)
  images = tf.constant(generator.normal(size=(2, 7, 7, 3)), tf.float32)
  kernel = tf.constant(generator.normal(size=(3, 3, 3, 4)), tf.float32)
  return x, w, images, kernel


def _dots(x, w, images, kernel):
  return [tf.matmul(x, w),
          tf.einsum('ij,jk->ik', x, w),
          tf.matmul(tf.stack([x, x]), tf.stack([w, w])),
          tf.nn.conv2d(images, kernel, 1, 'SAME'),
          tf.nn.depthwise_conv2d(images, kernel, [1, 1, 1, 1], 'SAME')]


@pytest.mark.parametrize('rounding', ROUNDINGS, ids=lambda r: r.name)
def test_emulation_rounds_every_dots_operands_eager_and_traced(rounding):
  operands = _operands()
  exact = _dots(*operands)
  dots = keras_tf_precision.TensorFlowDots(rounding)
  with dots.deployed():
    eager = _dots(*operands)
    traced = tf.function(_dots)(*operands)
  assert dots.rounded >= 2 * len(exact)
  # Computed float32 from operands rounded first: what the device's units do.
  rounded = [tf.constant(precision.rounded(o.numpy(), rounding))
             for o in operands]
  expected = _dots(*rounded)
  for got, want, before in zip(eager + list(traced), expected * 2, exact * 2):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    assert np.abs(got.numpy() - before.numpy()).max() > 1e-4
  # Out of it, float32 again.
  for got, before in zip(_dots(*operands), exact):
    np.testing.assert_array_equal(got, before)


def test_emulation_rounds_a_gradients_dots_too():
  x, _, images, kernel = _operands()
  dots = keras_tf_precision.TensorFlowDots(precision.BF16)

  def gradients():
    with tf.GradientTape() as tape:
      tape.watch(kernel)
      loss = tf.reduce_sum(tf.tanh(tf.nn.conv2d(images, kernel, 1, 'SAME')))
    return tape.gradient(loss, kernel)

  exact = gradients()
  with dots.deployed():
    forward_only = dots.rounded
    emulated = gradients()
  # The forward convolution and the filter's gradient (and the input's).
  assert dots.rounded - forward_only >= 2
  assert np.abs(emulated.numpy() - exact.numpy()).max() > 0
  del x


def test_a_keras_models_outputs_move_by_the_rounding_and_no_more():
  model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation='relu'),
                               tf.keras.layers.Dense(4)])
  x = tf.constant(np.random.default_rng(2).normal(size=(8, 12)), tf.float32)
  exact = model(x).numpy()
  dots = keras_tf_precision.TensorFlowDots(precision.BF16)
  with dots.deployed():
    emulated = model(x).numpy()
  assert dots.rounded == 2
  moved = np.abs(emulated - exact).max() / np.abs(exact).max()
  # A few bfloat16 unit roundoffs (2^-8) through two layers, not more.
  assert 0 < moved < 8 * precision.BF16.unit
