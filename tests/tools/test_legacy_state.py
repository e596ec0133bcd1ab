"""Every variable a legacy training step moves is accounted for: compared by
a check, needless in a port (Adam's beta powers), declared left out by the
port, or a failure of inventory that names it (an EMA's shadows, a counter)."""
import numpy as np
import pytest
import tensorflow as tf

from migration_tools.compare import checks
from migration_tools.pair import legacy
from migration_tools.pair import legacy_state

v1 = tf.compat.v1
pytestmark = pytest.mark.estimator

_SPEC = ({'x': tf.TensorSpec([None, 3], tf.float32)},
         tf.TensorSpec([None], tf.int32))


def _model_fn(optimizer='rmsprop', ema=True, counter=True):
  """A TPUEstimator model_fn with state beyond its weights."""

  def model_fn(features, labels, mode, params):
    del params
    logits = v1.layers.dense(features['x'], 2, name='dense')
    spec = v1.estimator.tpu.TPUEstimatorSpec
    if mode == v1.estimator.ModeKeys.PREDICT:
      return spec(mode, predictions={'logits': logits})
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == v1.estimator.ModeKeys.EVAL:
      return spec(mode, loss=loss)
    step = v1.train.get_global_step()
    made = (v1.train.RMSPropOptimizer(0.1, momentum=0.9)
            if optimizer == 'rmsprop' else v1.train.AdamOptimizer(0.1))
    train_op = made.minimize(loss, step)
    # Made in TRAIN only, never written.
    v1.get_variable('unused', [], initializer=v1.zeros_initializer(),
                    trainable=False)
    if ema:
      average = v1.train.ExponentialMovingAverage(0.99, num_updates=step)
      with tf.control_dependencies([train_op]):
        train_op = average.apply(v1.trainable_variables())
    if counter:
      seen = v1.get_variable('examples_seen', [], tf.int64,
                             initializer=v1.zeros_initializer(),
                             trainable=False)
      train_op = tf.group(train_op, seen.assign_add(
          tf.cast(tf.shape(labels)[0], tf.int64)))
    return spec(mode, loss=loss, train_op=train_op)

  return model_fn


def _runner(**kwargs):
  return legacy.LegacyRunner(_model_fn(**kwargs), {}, _SPEC, 4)


def test_each_variable_of_the_train_graph_has_its_role():
  found = _runner().train_variables()
  roles = {name: entry['role'] for name, entry in found.items()}
  assert roles['dense/kernel'] == roles['dense/bias'] == legacy_state.WEIGHTS
  assert roles['global_step'] == legacy_state.STEP
  assert roles['dense/kernel/RMSProp'] == legacy_state.SLOT
  assert roles['dense/kernel/RMSProp_1'] == legacy_state.SLOT
  assert roles['examples_seen'] == roles['unused'] == legacy_state.OTHER
  shadow = found['dense/kernel/ExponentialMovingAverage']
  assert shadow['role'] == legacy_state.AVERAGE
  assert (shadow['of'], shadow['decay'], shadow['num_updates']) == (
      'dense/kernel', pytest.approx(0.99), True)
  # What the train_op writes, through its control dependencies too.
  moved = {name for name, entry in found.items() if entry['moved']}
  assert {'dense/kernel', 'global_step', 'dense/kernel/RMSProp',
          'dense/kernel/ExponentialMovingAverage',
          'examples_seen'} <= moved
  assert 'unused' not in moved


def _inventory(found, not_compared=None):
  state = {n: np.zeros(e['shape']) for n, e in found.items()
           if e['role'] in (legacy_state.WEIGHTS, legacy_state.MODEL_STATE)}
  return checks.inventory.judge(state, dict(state), train_variables=found,
                          not_compared=not_compared)


def test_a_port_without_the_moving_averages_fails_inventory():
  result = _inventory(_runner(counter=False).train_variables())
  assert result.status == checks.FAILED
  assert result.message.startswith(
      'the legacy training step moves state the port has no counterpart '
      'for: 2 moving averages (tf.train.ExponentialMovingAverage of '
      'dense/kernel and others: dense/kernel/ExponentialMovingAverage, '
      'decay 0.99, lowered early on by num_updates'), result.message
  assert 'Port.not_compared' in result.message
  assert result.figures['unaccounted'] == [
      'dense/kernel/ExponentialMovingAverage',
      'dense/bias/ExponentialMovingAverage']
  # A counter of the model_fn's own is named too.
  counted = _inventory(_runner(ema=False).train_variables())
  assert counted.status == checks.FAILED
  assert '1 other variable (examples_seen)' in counted.message


def test_state_the_port_declares_left_out_is_listed_with_the_reason():
  result = _inventory(_runner().train_variables(), {
      '*/ExponentialMovingAverage': 'the port keeps no EMA yet',
      'examples_seen': 'a counter for logs'})
  assert result.status == checks.PASSED, result.message
  table = result.figures['train_state']
  assert table['dense/bias/ExponentialMovingAverage']['not_compared'] == (
      'declared by the port: the port keeps no EMA yet')
  assert table['unused']['not_compared'] == (
      'the training step does not move it')
  assert table['dense/kernel']['compared_by'].startswith('inventory')
  assert 'not compared: dense/kernel/ExponentialMovingAverage, ' in (
      result.message)


def test_adams_beta_powers_need_no_counterpart():
  result = _inventory(_runner(optimizer='adam', ema=False,
                              counter=False).train_variables())
  assert result.status == checks.PASSED, result.message
  assert ('not compared: beta1_power, beta2_power (a Keras optimizer '
          'derives it from its step') in result.message


def test_a_legacy_run_let_go_is_freed_with_its_graphs():
  """Nothing outlives a run the harness lets go: its graphs and sessions
  hold the model and its slots (a functools.cache on a method once held
  every run to the end of the process: 7.5 GB at BERT-base)."""
  import gc  # pylint: disable=g-import-not-at-top
  import weakref  # pylint: disable=g-import-not-at-top
  runner = _runner()
  runner.describe_optimizer()
  runner.describe_run()
  runner.step({'x': np.ones((4, 3), np.float32)}, np.zeros(4, np.int32))
  gone, graph = weakref.ref(runner), weakref.ref(runner.train.graph)
  del runner
  gc.collect()
  assert gone() is None and graph() is None


def test_legacy_predictions_come_a_batch_at_a_time_strings_included(tmp_path):
  """legacy.predict builds the PREDICT graph once for params['batch_size']
  examples and feeds it batch by batch, the last padded: what --verify
  predicts with, however many examples it asks for."""
  def model_fn(features, labels, mode, params):
    del labels, params
    weight = v1.get_variable('w', [], initializer=v1.ones_initializer())
    length = tf.cast(tf.strings.length(features['text']), tf.float32)
    assert features['x'].shape[0] == 2  # The batch, static.
    return v1.estimator.tpu.TPUEstimatorSpec(
        mode, predictions={'n': length * weight, 'x': features['x'] * weight})

  with tf.Graph().as_default():
    v1.get_variable('w', [], initializer=v1.constant_initializer(2.0))
    with v1.Session() as session:
      session.run(v1.global_variables_initializer())
      path = v1.train.Saver().save(session, str(tmp_path / 'model.ckpt'))
  features = {'text': np.array([b'ab', b'abc', b'a'], dtype=object),
              'x': np.arange(3, dtype=np.float32)}
  done = []
  got = legacy.predict(model_fn, path, features, {'batch_size': 2},
                       done=lambda n, count: done.append(n))
  np.testing.assert_array_equal(got['n'], [4, 6, 2])
  np.testing.assert_array_equal(got['x'], [0, 2, 4])
  assert done == [2, 3]


def _unseeded_model_fn(features, labels, mode, params):
  """BERT's way: tf.compat.v1.get_variable with a truncated normal that has
  no seed of its own, in a graph TPUEstimator leaves unseeded."""
  del params
  kernel = v1.get_variable('kernel', [3, 2], initializer=(
      v1.truncated_normal_initializer(stddev=0.02)))
  logits = tf.matmul(features['x'], kernel)
  spec = v1.estimator.tpu.TPUEstimatorSpec
  if mode == v1.estimator.ModeKeys.PREDICT:
    return spec(mode, predictions={'logits': logits})
  loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
  train_op = v1.train.GradientDescentOptimizer(0.1).minimize(
      loss, v1.train.get_global_step())
  return spec(mode, loss=loss, train_op=train_op)


def test_an_initializer_without_a_seed_starts_the_same_on_every_run():
  # A verdict that depends on the start (beyond_init) must not move between
  # two runs of one command; another --seed gives another start.
  def start(seed):
    return legacy.LegacyRunner(_unseeded_model_fn, {}, _SPEC, 4,
                               seed=seed).state()['kernel']
  first = start(0)
  assert np.any(first)
  np.testing.assert_array_equal(first, start(0))
  assert not np.array_equal(first, start(1))
