"""A TF 1.x (contrib era) TPUEstimator program, written for the scanner tests."""
import tensorflow as tf
from tensorflow.contrib import tpu as contrib_tpu
from tensorflow.contrib.tpu.python.tpu import tpu_estimator


def metric_fn(labels, logits):
  return {'accuracy': tf.metrics.accuracy(labels, tf.argmax(logits, 1))}


def model_fn(features, labels, mode, params):
  logits = tf.layers.dense(features, 10)
  loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
  optimizer = contrib_tpu.CrossShardOptimizer(
      tf.train.MomentumOptimizer(0.1, 0.9))
  train_op = optimizer.minimize(loss, tf.train.get_global_step())
  return tpu_estimator.TPUEstimatorSpec(mode, loss=loss, train_op=train_op,
                                        eval_metrics=(metric_fn, [labels, logits]),
                                        host_call=None)


def input_fn(params):
  return tf.data.Dataset.range(10).batch(params['batch_size'])


def main(_):
  tf.logging.set_verbosity(tf.logging.INFO)
  resolver = tf.contrib.cluster_resolver.TPUClusterResolver('my-tpu')
  config = contrib_tpu.RunConfig(
      cluster=resolver,
      tpu_config=contrib_tpu.TPUConfig(iterations_per_loop=100))
  estimator = tpu_estimator.TPUEstimator(model_fn=model_fn, config=config,
                                         train_batch_size=1024)
  estimator.train(input_fn, max_steps=1000)
  estimator.export_savedmodel('/tmp/export', None)


if __name__ == '__main__':
  tf.app.run()
