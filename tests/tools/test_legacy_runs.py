"""A legacy run started from another's graphs (LegacyRunner.fresh): what
each pass of a comparison takes in place of building the model_fn again. It
must be the run a new LegacyRunner would be: the same start, slots, step and
random draws, and nothing shared with the run it came from but the graphs."""
import numpy as np
import pytest
import tensorflow as tf

from migration_tools.pair import legacy

v1 = tf.compat.v1
pytestmark = pytest.mark.estimator

_SPEC = ({'x': tf.TensorSpec([None, 3], tf.float32)},
         tf.TensorSpec([None], tf.int32))
_FEATURES = {'x': np.arange(12, dtype=np.float32).reshape(4, 3) / 10}
_LABELS = np.array([0, 1, 1, 0], np.int32)


def _model_fn(features, labels, mode, params):
  """A dense layer, dropout in training, Adam (slots) and a global step."""
  del params
  hidden = v1.layers.dense(features['x'], 8, activation=tf.nn.relu,
                           name='hidden')
  training = mode == v1.estimator.ModeKeys.TRAIN
  hidden = v1.layers.dropout(hidden, 0.5, training=training)
  logits = v1.layers.dense(hidden, 2, name='logits')
  spec = v1.estimator.tpu.TPUEstimatorSpec
  if mode == v1.estimator.ModeKeys.PREDICT:
    return spec(mode, predictions={'logits': logits})
  loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
  if mode == v1.estimator.ModeKeys.EVAL:
    return spec(mode, loss=loss)
  train_op = v1.train.AdamOptimizer(0.1).minimize(
      loss, v1.train.get_global_step())
  return spec(mode, loss=loss, train_op=train_op)


def _run(draws=False):
  return legacy.LegacyRunner(_model_fn, {}, _SPEC, 4, draws=draws)


def _same(a: dict, b: dict) -> bool:
  return a.keys() == b.keys() and all(
      np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('draws', [False, True])
def test_a_fresh_run_starts_and_steps_as_the_first_on_the_same_graphs(draws):
  first = _run(draws)
  start, slots = first.state(), first.slots()
  steps = [first.step(_FEATURES, _LABELS) for _ in range(2)]
  moved = first.state()
  again = first.graphs_only().fresh()
  # Built once: the graphs are the first run's.
  assert again.train.graph is first.train.graph
  assert again.infer.graph is first.infer.graph
  # The first run's start, slots and step, not where that run is now.
  assert _same(again.state(), start) and not _same(again.state(), moved)
  assert _same(again.slots(), slots) and again.global_step() == 0
  # Its steps answer as the first run's did, its dropout masks drawn anew
  # as the first run drew them (a session's random state is its own).
  for theirs in steps:
    ours = again.step(_FEATURES, _LABELS)
    assert ours['loss'] == theirs['loss']
    assert _same(ours['gradients'], theirs['gradients'])
    assert len(ours.get('masks', ())) == (1 if draws else 0)
    assert all(np.array_equal(a, b) for a, b in zip(ours.get('masks', ()),
                                                    theirs.get('masks', ())))
  assert _same(again.state(), moved)
  # Nothing of the first run moved with it: the two sessions are apart.
  assert _same(first.state(), moved)
  assert first.global_step() == again.global_step() == 2
  first.set_state(start)
  assert _same(again.state(), moved)
  # Its PREDICT graph, the first's too, answers for its own state.
  assert not _same(again.predict(_FEATURES), first.predict(_FEATURES))
  first.set_state(moved)
  assert _same(again.predict(_FEATURES), first.predict(_FEATURES))
