"""A port's moving averages by default: its Keras optimizer's (use_ema),
found in the order of its variables; and how Keras's average starts, which
the guide compares with TF 1's (a shadow starts at its variable)."""
import numpy as np
import tensorflow as tf

from kit_core import keras_compat


def _optimizer_on(variables, **kwargs):
  optimizer = tf.keras.optimizers.SGD(0.5, use_ema=True, ema_momentum=0.9,
                                      **kwargs)
  optimizer.build(variables)
  return optimizer


def test_a_keras_optimizers_averages_pair_with_its_variables():
  variables = [tf.Variable(np.full(3, 2.0, np.float32)),
               tf.Variable(np.ones((2, 2), np.float32))]
  if keras_compat.is_keras3():
    import keras  # pylint: disable=import-outside-toplevel
    variables = [keras.Variable(v.numpy()) for v in variables]
  pairs = keras_compat.optimizer_averages(_optimizer_on(variables),
                                          variables)
  assert [v is w for (v, _), w in zip(pairs, variables)] == [True, True]
  assert [tuple(a.shape) for _, a in pairs] == [(3,), (2, 2)]
  plain = tf.keras.optimizers.SGD(0.5)
  plain.build(variables)
  assert keras_compat.optimizer_averages(plain, variables) == []


def test_where_a_keras_average_starts():
  # TF 1: shadow = 0.9 * 2 + 0.1 * w1 after the first step (it starts at
  # the variable). Keras 2 does the same; Keras 3 starts at 0 and takes the
  # variable at its first step.
  variable = tf.Variable(np.full(3, 2.0, np.float32))
  if keras_compat.is_keras3():
    import keras  # pylint: disable=import-outside-toplevel
    variable = keras.Variable(variable.numpy())
  optimizer = _optimizer_on([variable])
  (_, average), = keras_compat.optimizer_averages(optimizer, [variable])
  optimizer.apply_gradients([(tf.ones(3), variable)])
  after = 2.0 - 0.5  # One SGD step of rate 0.5 on a gradient of 1.
  expected = after if keras_compat.is_keras3() else 0.9 * 2.0 + 0.1 * after
  np.testing.assert_allclose(np.asarray(average), np.full(3, expected),
                             rtol=1e-6)
