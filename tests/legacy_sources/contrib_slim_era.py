"""TF 1.x contrib-era model code with module aliases, slim and HParams, as
TPU-era research code wrote it; written for the scanner tests. `# expect:`
lists the rule ids the scanner must report on its line."""
import functools

import tensorflow as tf
from tensorflow.contrib import slim  # expect: contrib-slim
from tensorflow.contrib import training as contrib_training  # expect: contrib-training
import tensorflow.contrib.layers as layers_lib  # expect: contrib-layers
from tensorflow.contrib.tpu.python.tpu import tpu_config  # expect: contrib-tpu
from tensorflow.contrib.tpu.python.tpu import tpu_estimator  # expect: contrib-tpu
from tensorflow.python.estimator import estimator as estimator_lib  # expect: estimator

rnn = tf.contrib.rnn  # expect: contrib-rnn
arg_scope = tf.contrib.framework.arg_scope  # expect: contrib-framework


def default_hparams():
  return contrib_training.HParams(  # expect: contrib-training
      learning_rate=0.1, weight_decay=1e-4, use_tpu=True)


def network(images, is_training, hparams):
  with arg_scope([slim.conv2d], padding='SAME',  # expect: contrib-framework, contrib-slim
                 weights_regularizer=slim.l2_regularizer(hparams.weight_decay)):  # expect: contrib-slim
    net = slim.conv2d(images, 64, [3, 3], scope='conv1')  # expect: contrib-slim
    net = slim.max_pool2d(net, [2, 2], scope='pool1')  # expect: contrib-slim
    net = layers_lib.flatten(net)  # expect: contrib-layers
    net = slim.dropout(net, 0.5, is_training=is_training)  # expect: contrib-slim
  cell = rnn.LSTMCell(128)  # expect: contrib-rnn
  return slim.fully_connected(net, 10, activation_fn=None), cell  # expect: contrib-slim


def input_fn(params, data_dir):
  dataset = tf.data.Dataset.list_files(data_dir + '/train-*')
  dataset = dataset.apply(
      tf.contrib.data.parallel_interleave(  # expect: contrib-data
          tf.data.TFRecordDataset, cycle_length=8))
  dataset = dataset.apply(
      tf.contrib.data.map_and_batch(  # expect: contrib-data
          lambda x: x, batch_size=params['batch_size']))  # expect: batch-size-param
  return dataset


def model_fn(features, labels, mode, params):
  logits, _ = network(features, mode == tf.estimator.ModeKeys.TRAIN,  # expect: mode-keys
                      params['hparams'])
  loss = tf.losses.softmax_cross_entropy(labels, logits)  # expect: losses-v1
  optimizer = tf.contrib.opt.AdamWOptimizer(1e-4, 1e-3)  # expect: contrib-opt
  if params['use_tpu']:
    optimizer = tf.contrib.tpu.CrossShardOptimizer(optimizer)  # expect: cross-shard-optimizer
  train_op = optimizer.minimize(loss, tf.train.get_global_step())  # expect: minimize-global-step, get-global-step

  def host_call_fn(gs, loss):
    with tf.contrib.summary.create_file_writer(params['model_dir']).as_default():  # expect: contrib-summary
      return tf.contrib.summary.scalar('loss', loss[0], step=gs[0])  # expect: contrib-summary

  def metric_fn(labels, logits):
    return {'auc': tf.contrib.metrics.streaming_auc(logits, labels)}  # expect: contrib-metrics

  return tf.contrib.tpu.TPUEstimatorSpec(  # expect: estimator-spec
      mode=mode, loss=loss, train_op=train_op,
      host_call=(host_call_fn, [tf.reshape(loss, [1])]),  # expect: host-call
      eval_metrics=(metric_fn, [labels, logits]),  # expect: eval-metrics
      scaffold_fn=None)  # expect: scaffold-fn


def serving_input_fn():
  images = tf.placeholder(tf.float32, [None, 224, 224, 3])  # expect: placeholder
  return tf.estimator.export.ServingInputReceiver(images, {'images': images})  # expect: serving-receiver


def build(model_dir, hparams, cluster):
  per_host = tpu_config.InputPipelineConfig.PER_HOST_V2  # expect: input-pipeline-config
  run_config = tpu_config.RunConfig(  # expect: run-config
      cluster=cluster, model_dir=model_dir,
      tpu_config=tpu_config.TPUConfig(iterations_per_loop=1000,  # expect: tpu-config, iterations-per-loop
                                      num_shards=8))
  estimator = tpu_estimator.TPUEstimator(  # expect: tpu-estimator
      model_fn=functools.partial(model_fn), config=run_config,
      train_batch_size=1024, params={'hparams': hparams})
  estimator.train(functools.partial(input_fn, data_dir=model_dir),  # expect: estimator-call
                  max_steps=10000)
  estimator.export_saved_model(model_dir, serving_input_fn)  # expect: export-saved-model
  columns = [tf.feature_column.numeric_column('x')]  # expect: feature-columns
  mnist = tf.contrib.learn.datasets.load_dataset('mnist')  # expect: contrib-learn
  return estimator_lib, mnist, columns  # expect: estimator
