"""TF 1.x graph code under `import tensorflow as tf`, as TPU-era input and
model code was written; written for the scanner tests. A `# expect:` comment
lists the rule ids the scanner must report on its line; no comment, none."""
import os

import tensorflow as tf

flags = tf.flags  # expect: flags
flags.DEFINE_string('data_dir', None, 'Where the TFRecords are.')  # expect: flags
flags.DEFINE_integer('train_batch_size', 1024, 'Global batch.')  # expect: flags
flags.DEFINE_float('learning_rate', 0.1, 'Peak rate.')  # expect: flags
FLAGS = flags.FLAGS  # expect: flags


def parse_record(serialized):
  features = tf.parse_single_example(  # expect: parse-single-example
      serialized,
      features={
          'image': tf.FixedLenFeature([], tf.string),  # expect: fixed-len-feature
          'label': tf.FixedLenFeature([], tf.int64),  # expect: fixed-len-feature
          'tags': tf.VarLenFeature(tf.string),  # expect: var-len-feature
      })
  image = tf.decode_raw(features['image'], tf.uint8)  # expect: decode-raw
  image = tf.reshape(image, [28, 28, 1])
  label = tf.to_int32(features['label'])  # expect: to-dtype
  return tf.to_float(image) / 255.0, label  # expect: to-float


def input_fn(params):
  files = tf.gfile.Glob(os.path.join(FLAGS.data_dir, 'train-*'))  # expect: gfile
  dataset = tf.data.TFRecordDataset(files)
  dataset = dataset.map(parse_record).repeat()
  dataset = dataset.batch(params['batch_size'], drop_remainder=True)  # expect: batch-size-param
  images, labels = dataset.make_one_shot_iterator().get_next()  # expect: one-shot-iterator
  return images, labels


def write_records(path, examples):
  with tf.python_io.TFRecordWriter(path) as writer:  # expect: python-io
    for example in examples:
      writer.write(example.SerializeToString())
  if not tf.gfile.Exists(path):  # expect: gfile
    raise IOError(path)


def crop(image, scope=None):
  with tf.name_scope(scope, 'crop', [image]):  # expect: tf1-positional-count
    return tf.image.resize_image_with_crop_or_pad(image, 24, 24)  # expect: tf1-removed


def tower(images, is_training):
  with tf.variable_scope('tower', reuse=tf.AUTO_REUSE):  # expect: variable-scope, tf1-removed
    weights = tf.get_variable(  # expect: get-variable
        'weights', [784, 10],
        initializer=tf.truncated_normal_initializer(stddev=0.1))  # expect: tf1-removed
    bias = tf.get_variable('bias', [10], initializer=tf.zeros_initializer())  # expect: get-variable
    flat = tf.reshape(images, [-1, 784])
    net = tf.layers.batch_normalization(flat, training=is_training)  # expect: batch-norm-v1
    logits = tf.matmul(net[:, :784], weights) + bias
  tf.summary.histogram('logits', logits)  # expect: summary-histogram
  return logits


def train_op_fn(loss, learning_rate):
  global_step = tf.train.get_or_create_global_step()  # expect: global-step
  optimizer = tf.train.MomentumOptimizer(learning_rate, 0.9)  # expect: momentum-v1
  update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)  # expect: collections, graph-keys
  variables = tf.trainable_variables()  # expect: trainable-variables
  grads = tf.gradients(loss, variables)  # expect: gradients
  grads, _ = tf.clip_by_global_norm(grads, 5.0)
  with tf.control_dependencies(update_ops):
    return optimizer.apply_gradients(zip(grads, variables), global_step)  # expect: apply-gradients-global-step


def summaries(loss, step):
  tf.summary.scalar('loss', loss)  # expect: summary-op
  merged = tf.summary.merge_all()  # expect: summary-v1
  writer = tf.summary.FileWriter('/tmp/logs')  # expect: summary-v1
  return merged, writer


def run_graph(loss):
  config = tf.ConfigProto(allow_soft_placement=True)  # expect: config-proto
  config.gpu_options.allow_growth = True
  with tf.Session(config=config) as sess:  # expect: session
    sess.run(tf.global_variables_initializer())  # expect: variables-initializer
    saver = tf.train.Saver(max_to_keep=5)  # expect: saver
    for step in range(100):
      value = sess.run(loss)
      if step % 10 == 0:
        tf.logging.info('step %d loss %f', step, value)  # expect: logging
        saver.save(sess, os.path.join('/tmp/model', 'model.ckpt'), step)


def math_v1(x, y):
  total = tf.reduce_sum(x, axis=1, keep_dims=True)  # expect: tf1-keyword
  largest = tf.argmax(y, dimension=1)  # expect: tf1-keyword
  return tf.log(total) + tf.cast(largest, tf.float32)  # expect: tf1-removed


def main(_):
  tf.logging.set_verbosity(tf.logging.INFO)  # expect: logging
  classifier = tf.estimator.Estimator(model_fn=None, model_dir='/tmp/model')  # expect: estimator
  logging_hook = tf.train.LoggingTensorHook({'loss': 'loss'}, every_n_iter=100)  # expect: session-hook
  classifier.train(input_fn=input_fn, max_steps=1000, hooks=[logging_hook])  # expect: estimator-call, hooks
  classifier.evaluate(input_fn, steps=10)  # expect: estimator-call


if __name__ == '__main__':
  tf.app.run()  # expect: app
