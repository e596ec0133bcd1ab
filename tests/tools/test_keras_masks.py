"""The legacy masks handed to a Keras port's dropout on TensorFlow
(keras_tf/dropout.py): taken by a traced step's calls when it runs, one
trace for every step; a call or a mask that does not pair named at the
port's line; the draws of a port's predict watched. On Keras 3 its Dropout
layer takes them too; tf.nn.dropout and the masks own_draws reads, on
both."""
import numpy as np
import pytest
import tensorflow as tf

from kit_core import keras_compat
from migration_tools.pair import masks
from migration_tools.pair.frameworks.keras_tf import dropout

_X = tf.ones([4, 6])


def _step_masks(seed: int) -> list:
  rng = np.random.default_rng(seed)
  return [rng.random((4, 6)) > 0.5, rng.random((4, 1)) > 0.5]


def test_one_trace_takes_each_steps_masks_in_order():
  traces = []

  @tf.function
  def step(x):
    traces.append(1)
    y = tf.nn.dropout(x, rate=0.5)
    return y, tf.nn.dropout(y, rate=0.2)

  for seed in (0, 1):
    handed = _step_masks(seed)
    with dropout.given(handed, ['a', 'b']):
      first, second = step(_X)
    np.testing.assert_allclose(first.numpy(), handed[0] / 0.5)
    # The second mask ([4, 1], a noise shape) broadcast over the input.
    np.testing.assert_allclose(second.numpy(),
                               handed[0] / 0.5 * handed[1] / 0.8, rtol=1e-6)
  assert len(traces) == 1


def test_a_mask_that_fits_no_call_is_named_at_the_ports_line():
  @tf.function
  def step(x):
    return tf.nn.dropout(tf.concat([x, x], 1), rate=0.5)  # [4, 12]

  with pytest.raises(masks.DropoutMismatch,
                     match=r"dropout call 1 \(at test_keras_masks.py:\d+\) "
                     r'takes a tensor of shape \[4, 12\]'):
    with dropout.given(_step_masks(0), ['a', 'b']):
      step(_X)


def test_a_step_with_fewer_calls_than_masks_fails_and_names_its_draws():
  @tf.function
  def step(x):
    kept = tf.where(tf.random.uniform(tf.shape(x)) < 0.5, x / 0.5, 0.0)
    return tf.nn.dropout(kept, rate=0.5)

  with pytest.raises(masks.DropoutMismatch) as raised:
    with dropout.given(_step_masks(0), ['a', 'b']):
      step(_X)
  said = str(raised.value)
  assert "the port's step made 1 dropout call where the legacy step drew 2 " \
         'masks; none took b' in said
  assert 'the step also drew with tf.random.uniform at test_keras_masks.py:' \
         in said


def test_a_mask_read_by_own_draws_takes_the_legacy_mask():
  @tf.function
  def step(x):  # Drop connect as tensorflow/tpu's TF 2 EfficientNet writes it.
    keep = 0.8
    mask = tf.floor(keep + tf.random.uniform([4, 1]))
    return x / keep * mask

  handed = [np.array([[1], [0], [1], [1]], bool)]
  with dropout.given(handed, ['drop_connect']):
    out = step(_X).numpy()
  np.testing.assert_allclose(out, np.broadcast_to(handed[0] / 0.8, (4, 6)))


@pytest.mark.skipif(not keras_compat.is_keras3(), reason='Keras 2 aligns '
                    'its Dropout with TF 1 (aligned_draws) and is handed no '
                    'mask; test_a_predict_that_draws_is_watched covers it')
def test_a_keras_3_dropout_layer_takes_the_mask():
  layer = tf.keras.layers.Dropout(0.5)

  @tf.function
  def step(x):
    return layer(x, training=True)

  handed = _step_masks(2)[:1]
  with dropout.given(handed, ['a']):
    out = step(_X).numpy()
  np.testing.assert_allclose(out, handed[0] / 0.5)


def test_a_predict_that_draws_is_watched():
  layer = tf.keras.layers.Dropout(0.5)
  with dropout.watched() as drawing:
    layer(_X, training=False)
    assert drawing == []
    layer(_X, training=True)  # The line the watch names.
  assert len(drawing) == 1 and drawing[0].startswith('test_keras_masks.py:')
