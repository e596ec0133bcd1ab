# coding=utf-8
"""A BERT-shaped TPUEstimator classifier in the style TPU-era code took after
TF 1.14 (tensorflow.compat.v1, contrib modules imported by alias, a flags
alias), written for the --diff comparison with tf_upgrade_v2 (nothing here
is copied from a repository). It parses; it is never run."""
import collections
import math

import tensorflow.compat.v1 as tf
from tensorflow.contrib import cluster_resolver as contrib_cluster_resolver
from tensorflow.contrib import data as contrib_data
from tensorflow.contrib import layers as contrib_layers
from tensorflow.contrib import tpu as contrib_tpu

flags = tf.flags
FLAGS = flags.FLAGS

flags.DEFINE_string('input_file', None, 'TFRecord files, comma-separated.')
flags.DEFINE_string('output_dir', None, 'Where checkpoints are written.')
flags.DEFINE_string('init_checkpoint', None, 'A pre-trained checkpoint.')
flags.DEFINE_integer('max_seq_length', 128, 'Tokens per example.')
flags.DEFINE_integer('train_batch_size', 32, 'Global batch for training.')
flags.DEFINE_float('learning_rate', 5e-5, 'Adam learning rate.')
flags.DEFINE_integer('num_train_steps', 1000, 'Training steps.')
flags.DEFINE_integer('num_warmup_steps', 100, 'Warmup steps.')
flags.DEFINE_bool('use_tpu', False, 'Whether to run on a TPU.')
flags.DEFINE_string('tpu_name', None, 'The Cloud TPU to use.')
flags.DEFINE_integer('iterations_per_loop', 1000, 'Steps per TPU loop.')
flags.DEFINE_integer('num_tpu_cores', 8, 'TPU cores.')


def gelu(x):
  cdf = 0.5 * (1.0 + tf.tanh(
      math.sqrt(2 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
  return x * cdf


def layer_norm(input_tensor, name=None):
  return contrib_layers.layer_norm(
      inputs=input_tensor, begin_norm_axis=-1, begin_params_axis=-1,
      scope=name)


def create_initializer(initializer_range=0.02):
  return tf.truncated_normal_initializer(stddev=initializer_range)


def dense(x, units, name):
  width = x.shape[-1].value
  if width is None:
    width = tf.shape(x)[-1]
  with tf.variable_scope(name):
    kernel = tf.get_variable('kernel', [x.shape[-1].value, units],
                             initializer=create_initializer())
    bias = tf.get_variable('bias', [units],
                           initializer=tf.zeros_initializer())
  return tf.nn.bias_add(tf.matmul(x, kernel), bias)


def encoder(input_ids, input_mask, hidden_size, vocab_size, is_training):
  with tf.variable_scope('bert'):
    embedding_table = tf.get_variable(
        'word_embeddings', [vocab_size, hidden_size],
        initializer=create_initializer())
    output = tf.gather(embedding_table, input_ids)
    output = layer_norm(output, 'embeddings/LayerNorm')
    if is_training:
      output = tf.nn.dropout(output, keep_prob=0.9)
    mask = tf.to_float(input_mask)
    output = output * tf.expand_dims(mask, -1)
    hidden = gelu(dense(output, 4 * hidden_size, 'intermediate'))
    output = layer_norm(dense(hidden, hidden_size, 'output') + output,
                        'output/LayerNorm')
    pooled = tf.tanh(dense(output[:, 0], hidden_size, 'pooler'))
  return pooled


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps,
                     use_tpu):
  global_step = tf.train.get_or_create_global_step()
  learning_rate = tf.train.polynomial_decay(
      init_lr, global_step, num_train_steps, end_learning_rate=0.0, power=1.0)
  warmup = tf.to_float(global_step) / num_warmup_steps * init_lr
  learning_rate = tf.where(global_step < num_warmup_steps, warmup,
                           learning_rate)
  optimizer = tf.train.AdamOptimizer(learning_rate)
  if use_tpu:
    optimizer = contrib_tpu.CrossShardOptimizer(optimizer)
  tvars = tf.trainable_variables()
  grads = tf.gradients(loss, tvars)
  grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
  return optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)


def model_fn_builder(num_labels, learning_rate, num_train_steps,
                     num_warmup_steps, use_tpu, init_checkpoint):
  def model_fn(features, labels, mode, params):
    del labels, params
    input_ids = features['input_ids']
    label_ids = features['label_ids']
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    pooled = encoder(input_ids, features['input_mask'], 64, 1000, is_training)
    logits = dense(pooled, num_labels, 'classifier')
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(label_ids, depth=num_labels, dtype=tf.float32)
    loss = tf.reduce_mean(-tf.reduce_sum(one_hot * log_probs, axis=-1))
    scaffold_fn = None
    if init_checkpoint:
      assignment = {v.name.split(':')[0]: v for v in tf.trainable_variables()}

      def tpu_scaffold():
        tf.train.init_from_checkpoint(init_checkpoint, assignment)
        return tf.train.Scaffold()

      scaffold_fn = tpu_scaffold
    if mode == tf.estimator.ModeKeys.TRAIN:
      train_op = create_optimizer(loss, learning_rate, num_train_steps,
                                  num_warmup_steps, use_tpu)
      return contrib_tpu.TPUEstimatorSpec(mode=mode, loss=loss,
                                          train_op=train_op,
                                          scaffold_fn=scaffold_fn)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)

    def metric_fn(label_ids, predictions):
      return {'eval_accuracy': tf.metrics.accuracy(label_ids, predictions)}

    return contrib_tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [label_ids,
                                                        predictions]),
        scaffold_fn=scaffold_fn)
  return model_fn


def input_fn_builder(input_files, seq_length, is_training):
  name_to_features = {
      'input_ids': tf.FixedLenFeature([seq_length], tf.int64),
      'input_mask': tf.FixedLenFeature([seq_length], tf.int64),
      'label_ids': tf.FixedLenFeature([], tf.int64),
  }

  def decode(record):
    example = tf.parse_single_example(record, name_to_features)
    return {k: tf.to_int32(v) for k, v in example.items()}

  def input_fn(params):
    batch_size = params['batch_size']
    d = tf.data.Dataset.from_tensor_slices(tf.constant(input_files))
    if is_training:
      d = d.repeat()
      d = d.apply(contrib_data.parallel_interleave(
          tf.data.TFRecordDataset, sloppy=is_training, cycle_length=4))
      d = d.shuffle(buffer_size=100)
    d = d.apply(contrib_data.map_and_batch(
        decode, batch_size=batch_size, drop_remainder=True))
    return d

  return input_fn


def main(_):
  tf.logging.set_verbosity(tf.logging.INFO)
  tf.gfile.MakeDirs(FLAGS.output_dir)
  input_files = []
  for pattern in FLAGS.input_file.split(','):
    input_files.extend(tf.gfile.Glob(pattern))
  tf.logging.info('*** Input files: %d ***', len(input_files))
  resolver = None
  if FLAGS.use_tpu and FLAGS.tpu_name:
    resolver = contrib_cluster_resolver.TPUClusterResolver(FLAGS.tpu_name)
  run_config = contrib_tpu.RunConfig(
      cluster=resolver, model_dir=FLAGS.output_dir,
      tpu_config=contrib_tpu.TPUConfig(
          iterations_per_loop=FLAGS.iterations_per_loop,
          num_shards=FLAGS.num_tpu_cores,
          per_host_input_for_training=(
              contrib_tpu.InputPipelineConfig.PER_HOST_V2)))
  model_fn = model_fn_builder(2, FLAGS.learning_rate, FLAGS.num_train_steps,
                              FLAGS.num_warmup_steps, FLAGS.use_tpu,
                              FLAGS.init_checkpoint)
  estimator = contrib_tpu.TPUEstimator(
      use_tpu=FLAGS.use_tpu, model_fn=model_fn, config=run_config,
      train_batch_size=FLAGS.train_batch_size)
  estimator.train(input_fn_builder(input_files, FLAGS.max_seq_length, True),
                  max_steps=FLAGS.num_train_steps)
  with tf.gfile.GFile(FLAGS.output_dir + '/done.txt', 'w') as f:
    f.write(str(collections.Counter(input_files)))


if __name__ == '__main__':
  flags.mark_flag_as_required('input_file')
  tf.app.run()
