"""The random numbers a legacy step draws: masks put at their expectation
(pair/random_ops.py), every other draw named."""
import numpy as np
import pytest

from migration_tools.pair import random_ops

tf = pytest.importorskip('tensorflow')
v1 = tf.compat.v1

KEEP = 0.8


def _step(draw):
  """A TF 1 graph: a loss over draw(x), its train_op (the gradients read the
  mask too) and the tensors to run; draw is the model's random part."""
  graph = tf.Graph()
  with graph.as_default():
    x = v1.placeholder(tf.float32, [4, 3, 3, 2])
    weight = v1.get_variable('w', [2], initializer=v1.random_normal_initializer())
    y = draw(x * weight)
    loss = tf.reduce_sum(y * y)
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
  return graph, x, weight, y, loss, train_op


def _drop_connect(x):
  # As EfficientNet writes it (the whole example kept or dropped).
  batch = tf.shape(x)[0]
  mask = tf.floor(KEEP + v1.random_uniform([batch, 1, 1, 1], dtype=x.dtype))
  return tf.compat.v1.div(x, KEEP) * mask


def _by_hand(x):
  # Stochastic depth with a comparison, the bound first.
  u = tf.random.uniform(tf.shape(x), minval=1.0, maxval=3.0)
  return x * tf.cast(1.0 + 2 * (1.0 - KEEP) < u, x.dtype) / KEEP


def _noise(x):
  return x + v1.random_normal(tf.shape(x), stddev=0.1)


def _run_twice(draw):
  graph, x, weight, y, loss, train_op = _step(draw)
  with graph.as_default():
    found = random_ops.switch_off([loss, train_op])
    gradient = tf.gradients(loss, weight)[0]
    with v1.Session() as session:
      session.run(v1.global_variables_initializer())
      w = session.run(weight)
      feed = {x: np.random.default_rng(0).normal(size=(4, 3, 3, 2))}
      runs = [session.run([y, gradient], feed) for _ in range(2)]
  return found, feed[x] * w, runs


@pytest.mark.parametrize('draw, rule', [
    (_drop_connect, 'floor of keep + uniform'),
])
def test_a_mask_is_put_at_its_expectation_forward_and_backward(draw, rule):
  found, inputs, runs = _run_twice(draw)
  assert list(found.switched_off.values()) == [rule]
  assert found.left == {}
  (first, gradient), (second, again) = runs
  # x / keep * keep: the input again, up to the rounding of two operations.
  np.testing.assert_allclose(first, inputs, rtol=3e-7)
  np.testing.assert_array_equal(first, second)
  np.testing.assert_array_equal(gradient, again)


def test_a_comparison_mask_with_a_scaled_uniform_is_switched_off_too():
  graph, x, weight, y, loss, train_op = _step(_by_hand)
  with graph.as_default():
    found = random_ops.switch_off([loss, train_op])
  assert list(found.switched_off.values()) == ['uniform against a rate']
  # The uniform is [1, 3): the kit reads its scale and shift, and the
  # comparison keeps the share KEEP of the draws.
  with graph.as_default(), v1.Session() as session:
    session.run(v1.global_variables_initializer())
    inputs = np.ones((4, 3, 3, 2), np.float32)
    out, w = session.run([y, weight], {x: inputs})
  np.testing.assert_allclose(out, inputs * w, rtol=3e-7)


def test_other_draws_are_named_and_left_as_they_are():
  found, _, runs = _run_twice(_noise)
  assert found.switched_off == {}
  (name, why), = found.left.items()
  assert name.endswith('RandomStandardNormal')
  assert 'RandomStandardNormal, used otherwise than as a mask' in why
  assert not np.array_equal(runs[0][0], runs[1][0])


def test_initializers_and_ops_off_the_step_are_not_named():
  def unused_draw(x):
    v1.random_uniform([3])  # Drawn, but no step reads it.
    return x
  graph, _, _, _, loss, train_op = _step(unused_draw)
  with graph.as_default():
    found = random_ops.switch_off([loss, train_op])
  # The weight's random_normal initializer is no ancestor of the step.
  assert found.to_json() == {'switched_off': {}, 'left': {}}


def test_a_draw_inside_a_cond_is_named_with_the_reason():
  def in_cond(x):
    return v1.cond(tf.constant(True), lambda: _drop_connect(x), lambda: x)
  graph, _, _, _, loss, train_op = _step(in_cond)
  with graph.as_default():
    found = random_ops.switch_off([loss, train_op])
  assert found.switched_off == {}
  assert found.left == {'cond': (
      'RandomUniform in the body of this If op (a tf.cond, tf.while_loop or '
      'tf.function), where the kit puts no constant')}
