"""Gradient clipping in a legacy model_fn is read (pair/legacy_clipping.py):
each clip's call site, and at every step its norm and threshold, as the
model_fn measured them (an embedding's rows counted per lookup)."""
import numpy as np
import pytest
import tensorflow as tf

from migration_tools.pair import legacy
from migration_tools.pair import legacy_clipping

v1 = tf.compat.v1
pytestmark = pytest.mark.estimator

_SPEC = ({'ids': tf.TensorSpec([None, 3], tf.int32)},
         tf.TensorSpec([None], tf.int32))


def _model_fn(clip='global', threshold=0.5):
  """An embedding lookup (its gradient an IndexedSlices) and a dense layer,
  the gradients clipped as clip says."""

  def model_fn(features, labels, mode, params):
    del params
    table = v1.get_variable('table', [5, 4])
    pooled = tf.reduce_sum(tf.gather(table, features['ids']), 1)
    logits = v1.layers.dense(pooled, 2, name='dense')
    spec = v1.estimator.tpu.TPUEstimatorSpec
    if mode == v1.estimator.ModeKeys.PREDICT:
      return spec(mode, predictions={'logits': logits})
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == v1.estimator.ModeKeys.EVAL:
      return spec(mode, loss=loss)
    variables = v1.trainable_variables()
    grads = tf.gradients(loss, variables)
    if clip == 'global':
      grads, _ = tf.clip_by_global_norm(grads, clip_norm=threshold)
    elif clip == 'each':
      grads = [v1.clip_by_norm(g, threshold) for g in grads]
    train_op = v1.train.GradientDescentOptimizer(0.1).apply_gradients(
        zip(grads, variables), v1.train.get_global_step())
    return spec(mode, loss=loss, train_op=train_op)

  return model_fn


# Id 1 twice in the first example: its row's gradient is two lookups.
_FEATURES = {'ids': np.array([[1, 1, 2], [3, 4, 0]], np.int32)}
_LABELS = np.array([0, 1], np.int32)


def _lookup_norm(runner):
  """The gradients' global norm with the table's rows counted per lookup,
  by hand from the gradient the kit reads."""
  with runner.train.graph.as_default():
    variables = v1.trainable_variables()
    grads = tf.gradients(runner.train.spec.loss, variables)
    values = [g.values if isinstance(g, tf.IndexedSlices) else g
              for g in grads]
  found = runner.train.run(values, runner.train.feed(_FEATURES, _LABELS))
  return float(np.sqrt(sum(np.sum(np.square(v, dtype=np.float64))
                           for v in found)))


def test_a_global_norm_clip_is_read_with_its_norm_per_lookup_and_threshold():
  runner = legacy.LegacyRunner(_model_fn(), {}, _SPEC, 2)
  [described] = runner.describe_run()['clipping']
  assert described == {'kind': 'global norm', 'tensors': 3,
                       'where': f'test_clipping.py:{_line("clip_by_global")}'}
  expected = _lookup_norm(runner)
  [[norm, threshold]] = runner.step(_FEATURES, _LABELS)['clipping']
  assert threshold == pytest.approx(0.5)
  assert norm == pytest.approx(expected, rel=1e-5)
  # Per lookup differs from the dense norm here (id 1 looked up twice).
  dense = np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in
                      runner.train.run(runner.gradients, runner.train.feed(
                          _FEATURES, _LABELS)).values()))
  assert abs(dense - expected) > 1e-3 * expected


def test_each_core_clips_its_own_and_the_largest_norm_is_answered():
  whole = legacy.LegacyRunner(_model_fn(), {}, _SPEC, 2)
  cores = legacy.LegacyRunner(_model_fn(), {}, _SPEC, 2, shards=2)
  cores.set_state(whole.state())
  per_core = []
  for i in range(2):
    part = ({'ids': _FEATURES['ids'][i:i + 1]}, _LABELS[i:i + 1])
    one = legacy.LegacyRunner(_model_fn(), {}, _SPEC, 1)
    one.set_state(whole.state())
    per_core.append(one.step(*part)['clipping'][0][0])
  [[norm, _]] = cores.step(_FEATURES, _LABELS)['clipping']
  assert norm == pytest.approx(max(per_core), rel=1e-5)


def test_a_clip_of_each_tensor_is_read_and_no_clip_answers_nothing():
  each = legacy.LegacyRunner(_model_fn('each'), {}, _SPEC, 2)
  assert [c['kind'] for c in each.describe_run()['clipping']] == ['norm'] * 3
  assert len(each.step(_FEATURES, _LABELS)['clipping']) == 3
  none = legacy.LegacyRunner(_model_fn(None), {}, _SPEC, 2)
  assert none.describe_run()['clipping'] == []
  assert 'clipping' not in none.step(_FEATURES, _LABELS)
  # The functions are TF's own again after the graphs are built.
  assert tf.clip_by_global_norm.__module__.startswith('tensorflow')


def test_engaged_is_the_norm_above_its_threshold():
  assert legacy_clipping.engaged([[2.0, 1.0], [1.0, 1.0], [0.5, 1.0]]) == [
      True, False, False]


def _line(text: str) -> int:
  """The line of this file that holds text (first)."""
  with open(__file__, encoding='utf-8') as source:
    return next(i for i, line in enumerate(source, 1) if text in line)
