"""A TF 1.x (contrib era) TPUEstimator program, written for the scanner tests."""
import tensorflow as tf
from tensorflow.contrib import tpu as contrib_tpu  # expect: contrib-tpu
from tensorflow.contrib.tpu.python.tpu import tpu_estimator  # expect: contrib-tpu


def metric_fn(labels, logits):
  return {'accuracy': tf.metrics.accuracy(labels, tf.argmax(logits, 1))}  # expect: metrics-v1


def model_fn(features, labels, mode, params):
  logits = tf.layers.dense(features, 10)  # expect: layers-v1
  loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)  # expect: losses-v1
  optimizer = contrib_tpu.CrossShardOptimizer(  # expect: cross-shard-optimizer
      tf.train.MomentumOptimizer(0.1, 0.9))  # expect: momentum-v1
  train_op = optimizer.minimize(loss, tf.train.get_global_step())  # expect: minimize-global-step, get-global-step
  return tpu_estimator.TPUEstimatorSpec(mode, loss=loss, train_op=train_op,  # expect: estimator-spec
                                        eval_metrics=(metric_fn, [labels, logits]),  # expect: eval-metrics
                                        host_call=None)  # expect: host-call


def input_fn(params):
  return tf.data.Dataset.range(10).batch(params['batch_size'])  # expect: batch-size-param


def main(_):
  tf.logging.set_verbosity(tf.logging.INFO)  # expect: logging
  resolver = tf.contrib.cluster_resolver.TPUClusterResolver('my-tpu')  # expect: tpu-cluster-resolver
  config = contrib_tpu.RunConfig(  # expect: run-config
      cluster=resolver,
      tpu_config=contrib_tpu.TPUConfig(iterations_per_loop=100))  # expect: tpu-config, iterations-per-loop
  estimator = tpu_estimator.TPUEstimator(model_fn=model_fn, config=config,  # expect: tpu-estimator
                                         train_batch_size=1024)
  estimator.train(input_fn, max_steps=1000)  # expect: estimator-call
  estimator.export_savedmodel('/tmp/export', None)  # expect: export-savedmodel


if __name__ == '__main__':
  tf.app.run()  # expect: app
