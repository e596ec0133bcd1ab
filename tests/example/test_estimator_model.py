"""model_fn in its three modes, the input_fns, and the TPU graph path (no TPU)."""
import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from tensorflow.python.tpu import tpu_function

from estimator_mnist import data
from estimator_mnist import model

ModeKeys = tf.estimator.ModeKeys
PARAMS = {'learning_rate': 0.05, 'use_tpu': False}


def _build(mode, params=PARAMS, batch=4):
  graph = tf.Graph()
  with graph.as_default():
    tf.train.create_global_step()
    images = tf.random.uniform([batch, 28, 28, 1], -0.5, 0.5, seed=1)
    labels = None if mode == ModeKeys.PREDICT else tf.constant(
        [0, 1, 2, 3][:batch], tf.int32)
    spec = model.model_fn(images, labels, mode, params)
  return graph, spec


def test_train_spec_has_loss_and_train_op_and_named_variables():
  graph, spec = _build(ModeKeys.TRAIN)
  assert spec.loss.shape == () and spec.train_op is not None
  with graph.as_default():
    shapes = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  assert shapes == {
      'conv1/kernel': [5, 5, 1, 32], 'conv1/bias': [32],
      'conv2/kernel': [5, 5, 32, 64], 'conv2/bias': [64],
      'dense/kernel': [7 * 7 * 64, 128], 'dense/bias': [128],
      'logits/kernel': [128, 10], 'logits/bias': [10]}
  # Dropout is in the training graph, with rate 0.4.
  ops = {op.type for op in graph.get_operations()}
  assert 'CrossReplicaSum' not in ops


def test_train_step_reduces_loss_and_advances_global_step():
  graph, spec = _build(ModeKeys.TRAIN)
  with graph.as_default(), tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    step = tf.train.get_global_step()
    first = sess.run(spec.loss)
    for _ in range(20):
      sess.run(spec.train_op)
    assert sess.run(step) == 20
    assert sess.run(spec.loss) < first


def test_eval_spec_has_accuracy_metric():
  graph, spec = _build(ModeKeys.EVAL)
  assert spec.train_op is None
  metric_fn, tensors = spec.eval_metrics
  with graph.as_default():
    metrics = metric_fn(*tensors)
    assert set(metrics) == {'accuracy'}
    value, update = metrics['accuracy']
    with tf.Session() as sess:
      sess.run([tf.global_variables_initializer(),
                tf.local_variables_initializer()])
      sess.run(update)
      assert 0.0 <= sess.run(value) <= 1.0


def test_predict_spec_gives_class_ids_and_probabilities():
  graph, spec = _build(ModeKeys.PREDICT)
  assert spec.loss is None
  with graph.as_default(), tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    out = sess.run(spec.predictions)
  assert out['class_ids'].shape == (4,)
  np.testing.assert_allclose(out['probabilities'].sum(axis=1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(out['class_ids'],
                                out['probabilities'].argmax(axis=1))


def test_dropout_only_in_training():
  with tf.Graph().as_default():
    images = tf.random.uniform([64, 28, 28, 1], -0.5, 0.5, seed=1)
    with tf.variable_scope('net'):
      train_logits = model.build_network(images, training=True)
    with tf.variable_scope('net', reuse=True):
      eval_logits = model.build_network(images, training=False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      images_value = sess.run(images)
      feed = {images: images_value}
      t1, t2 = sess.run(train_logits, feed), sess.run(train_logits, feed)
      e1, e2 = sess.run(eval_logits, feed), sess.run(eval_logits, feed)
  assert not np.allclose(t1, t2)
  np.testing.assert_array_equal(e1, e2)


def test_learning_rate_decays_per_global_step():
  with tf.Graph().as_default():
    step = tf.train.create_global_step()
    rate = model.learning_rate_schedule(0.05)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      assert sess.run(rate) == pytest.approx(0.05)
      sess.run(step.assign(50000))
      assert sess.run(rate) == pytest.approx(0.05 * 0.96 ** 0.5)


def test_tpu_graph_uses_cross_shard_optimizer_and_cross_replica_sum():
  graph = tf.Graph()
  with graph.as_default():
    assert not isinstance(model.make_optimizer(0.1, use_tpu=False),
                          tf.tpu.CrossShardOptimizer)
    assert isinstance(model.make_optimizer(0.1, use_tpu=True),
                      tf.tpu.CrossShardOptimizer)
    tf.train.create_global_step()
    # The context TPUEstimator builds each shard's graph in.
    with tpu_function.tpu_shard_context(8):
      spec = model.model_fn(tf.zeros([16, 28, 28, 1]),
                            tf.zeros([16], tf.int32), ModeKeys.TRAIN,
                            {'learning_rate': 0.05, 'use_tpu': True})
  assert spec.train_op is not None
  sums = [op for op in graph.get_operations() if op.type == 'CrossReplicaSum']
  # One all-reduce per gradient: 4 kernels and 4 biases.
  assert len(sums) == 8


@pytest.mark.parametrize('batch_size', [8, 32])
def test_train_input_fn_honours_params_batch_size(fake_data_dir, batch_size):
  params = {'batch_size': batch_size, 'data_dir': fake_data_dir.data_dir,
            'seed': 0}
  images, labels = next(iter(data.train_input_fn(params)))
  assert images.shape == (batch_size, 28, 28, 1)
  assert images.dtype == tf.float32 and labels.shape == (batch_size,)
  assert images.numpy().min() >= -0.5 and images.numpy().max() <= 0.5
  assert images.numpy().max() == 0.5  # 255 maps to the top of the range.


def test_train_input_fn_repeats_and_keeps_batches_full(fake_data_dir):
  # 2048 examples, batch 1000: the 3rd batch crosses the epoch boundary.
  params = {'batch_size': 1000, 'data_dir': fake_data_dir.data_dir, 'seed': 0}
  batches = list(data.train_input_fn(params).take(5))
  assert [b[0].shape[0] for b in batches] == [1000] * 5


def test_eval_input_fn_drops_remainder(fake_data_dir):
  params = {'batch_size': 200, 'data_dir': fake_data_dir.data_dir}
  sizes = [b[0].shape[0] for b in data.eval_input_fn(params)]
  assert sizes == [200, 200]  # 512 test examples -> 2 full batches.


def test_scale_image_range():
  pixels = tf.constant([0, 128, 255], tf.uint8)
  np.testing.assert_allclose(data.scale_image(pixels).numpy(),
                             [-0.5, 128 / 255 - 0.5, 0.5], atol=1e-7)
