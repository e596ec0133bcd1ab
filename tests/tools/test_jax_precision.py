"""A port's precision on JAX, set from outside it: the highest for the checks
of its math, an accelerator's rounding emulated on the CPU for device_drift
(--emulate_precision), and its own rounding noise measured by its step on
reordered examples. The comparisons that use them run in test_jax_ports.py."""
import os
import sys

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import TESTS
from migration_tools.pair.frameworks.arrays import runner as array_runner
from migration_tools.pair import precision
from migration_tools.pair.frameworks.arrays import precision as arrays_precision

sys.path.insert(0, os.path.join(TESTS, 'user_code'))
import mnist_optax_port  # pylint: disable=g-import-not-at-top,wrong-import-position


def _conv(images, kernel):
  return lax.conv_general_dilated(images, kernel, (1, 1), 'SAME',
                                  dimension_numbers=('NHWC', 'HWIO', 'NHWC'))


def _rounded(x, rounding):
  return lax.reduce_precision(x, rounding.exponent_bits,
                              rounding.mantissa_bits)


@pytest.mark.parametrize('rounding', [precision.TF32, precision.BF16])
def test_emulation_rounds_every_dots_operands_inside_jit(rounding):
  generator = np.random.default_rng(0)
  x = jnp.asarray(generator.normal(size=(16, 64)), jnp.float32)
  w = jnp.asarray(generator.normal(size=(64, 8)), jnp.float32)
  images = jnp.asarray(generator.normal(size=(2, 8, 8, 3)), jnp.float32)
  kernel = jnp.asarray(generator.normal(size=(3, 3, 3, 4)), jnp.float32)
  matmul, conv = jax.jit(lambda a, b: a @ b), jax.jit(_conv)
  exact = matmul(x, w), conv(images, kernel)  # Traced before: cached.
  with arrays_precision.emulated(rounding):
    emulated = matmul(x, w), conv(images, kernel)
    # Its gradient's dots too (the transposed ones of the backward pass).
    gradient = jax.grad(lambda b: jnp.sum(jnp.tanh(x @ b)))(w)
  expected = (_rounded(x, rounding) @ _rounded(w, rounding),
              _conv(_rounded(images, rounding), _rounded(kernel, rounding)))
  for got, want, before in zip(emulated, expected, exact):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(got) - np.asarray(before)).max() > 0
  assert np.all(np.isfinite(gradient))
  # Out of it, the same jitted functions compute float32 again: no program
  # traced with the rounding is reused.
  np.testing.assert_array_equal(matmul(x, w), exact[0])
  np.testing.assert_array_equal(conv(images, kernel), exact[1])


@pytest.mark.parametrize('rounding', [precision.TF32, precision.BF16])
def test_the_reference_rounding_is_xlas(rounding):
  # precision.rounded, which TensorFlow's and PyTorch's emulations are
  # tested against, rounds as lax.reduce_precision does.
  generator = np.random.default_rng(0)
  values = np.concatenate([
      generator.standard_normal(20000) * 10.0 ** generator.integers(
          -40, 38, 20000),
      1 + 2.0 ** -11 * np.arange(-8, 9),
      [np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 0.0, -0.0]
  ]).astype(np.float32)
  np.testing.assert_array_equal(precision.rounded(values, rounding),
                                np.asarray(_rounded(values, rounding)))


def test_the_emulation_tallies_the_dots_it_rounds_as_traced():
  dots = arrays_precision.JaxDots(precision.TF32)
  x = jnp.ones((4, 4), jnp.float32)
  product = jax.jit(lambda a: a @ (a + 1))
  product(x)  # Traced before: the emulation clears jit's caches.
  with dots.deployed():
    product(x)
  assert dots.rounded == 1
  product(x)
  assert dots.rounded == 1  # Out of it, nothing is rounded.


def test_highest_asks_float32_of_every_dot_the_port_traces():
  x = jnp.ones((4, 4), jnp.float32)
  with arrays_precision.highest():
    hlo = jax.jit(lambda a: a @ a).lower(x).as_text(dialect='hlo')
  assert 'operand_precision={highest,highest}' in hlo


def _runner(dots=None):
  port = mnist_optax_port.make_port()
  generator = np.random.default_rng(0)
  features = generator.uniform(size=(8, 28, 28, 1)).astype(np.float32)
  labels = generator.integers(0, 10, size=8).astype(np.int64)
  return array_runner.ArrayRunner(port, 1, {'learning_rate': 0.05},
                                  [(features, labels)],
                                  dots=dots), features, labels


def test_the_runner_computes_at_the_highest_but_where_deployed_is_asked():
  runner, features, _ = _runner(
      arrays_precision.JaxDots(precision.BF16))
  highest = runner.predict(features)['probabilities']
  with runner.at_deployed_precision():
    deployed = runner.predict(features)['probabilities']
  assert np.abs(deployed - highest).max() > 1e-6  # Rounded to bfloat16.
  np.testing.assert_array_equal(runner.predict(features)['probabilities'],
                                highest)


def test_a_reordered_step_leaves_the_runner_as_it_found_it():
  runner, features, labels = _runner()
  before, steps = runner.state(), runner.global_step()
  again = runner.reordered_step(features, labels)
  assert runner.global_step() == steps
  for name, value in runner.state().items():
    np.testing.assert_array_equal(value, before[name])
  # It took the step: the weights it left moved, its gradients are the
  # step's own up to the order of their sums, and the next step is still
  # the first legacy batch's.
  assert any(np.any(again['state'][k] != before[k]) for k in before)
  answer = runner.step(features, labels)
  for name, gradient in answer['gradients'].items():
    np.testing.assert_allclose(again['gradients'][name], gradient,
                               rtol=1e-4, atol=1e-6)
  assert again['loss'] == pytest.approx(answer['loss'], rel=1e-6)
