"""Lines that still run on TF 2 but compute something else, in a TF 1 file;
written for the scanner tests. `# expect:` lists the rule ids of its line."""
import tensorflow as tf


def regularised_tower(images, keep_prob, is_training):
  net = tf.layers.conv2d(images, 32, 3)  # expect: layers-v1
  net = tf.layers.batch_normalization(net, training=is_training)  # expect: batch-norm-v1
  norm = tf.layers.BatchNormalization(momentum=0.9)  # expect: batch-norm-layer-v1
  net = tf.nn.dropout(net, keep_prob)  # expect: dropout-positional
  net = tf.nn.dropout(net, 1.0 - 0.1)  # expect: dropout-positional
  net = tf.nn.dropout(net, keep_prob=0.9)  # expect: dropout-keep-prob
  net = tf.nn.dropout(net, rate=0.1)
  return norm(net)


def losses_and_metrics(labels, predictions, weights):
  mse = tf.losses.mean_squared_error(labels, predictions, weights)  # expect: losses-mse-v1
  xent = tf.losses.sparse_softmax_cross_entropy(labels, predictions)  # expect: losses-v1
  reduction = tf.losses.Reduction.SUM_BY_NONZERO_WEIGHTS  # expect: losses-reduction-v1
  accuracy = tf.metrics.accuracy(labels, tf.argmax(predictions, 1))  # expect: metrics-v1
  mean_loss = tf.metrics.mean(xent)  # expect: metrics-v1
  return mse, xent, reduction, accuracy, mean_loss


def optimizers(learning_rate):
  return [
      tf.train.AdamOptimizer(learning_rate),  # expect: adam-epsilon
      tf.train.RMSPropOptimizer(learning_rate, decay=0.9),  # expect: rmsprop-epsilon
      tf.train.AdagradOptimizer(learning_rate),  # expect: adagrad-epsilon
      tf.train.AdadeltaOptimizer(learning_rate),  # expect: adadelta-epsilon
      tf.train.GradientDescentOptimizer(learning_rate),  # expect: sgd-v1
      tf.train.FtrlOptimizer(learning_rate),  # expect: optimizer-v1
  ]


def schedules(global_step):
  decayed = tf.train.exponential_decay(0.1, global_step, 1000, 0.96)  # expect: decay-v1
  cosine = tf.train.cosine_decay(0.1, global_step, 10000)  # expect: decay-v1
  steps = tf.train.piecewise_constant(global_step, [100], [0.1, 0.01])  # expect: piecewise-constant
  return decayed, cosine, steps


def images(batch, size):
  a = tf.image.resize_images(batch, size)  # expect: image-resize-v1
  b = tf.image.resize_bilinear(batch, size, align_corners=True)  # expect: image-resize-methods
  c = tf.image.resize_nearest_neighbor(batch, size)  # expect: image-resize-methods
  d = tf.image.resize(batch, size, align_corners=True)  # expect: tf1-keyword
  e = tf.image.resize(batch, size, tf.image.ResizeMethod.BILINEAR, False)  # expect: tf1-positional
  f = tf.image.resize(batch, size)
  return a, b, c, d, e, f


def summaries_in_host_call(gs, loss, lr):
  with tf.contrib.summary.create_file_writer('/tmp/logs').as_default():  # expect: contrib-summary
    with tf.contrib.summary.always_record_summaries():  # expect: contrib-summary
      tf.contrib.summary.scalar('loss', loss[0], step=gs[0])  # expect: contrib-summary
  tf.summary.scalar('learning_rate', lr)  # expect: summary-op
  tf.summary.image('inputs', lr, max_outputs=3)  # expect: summary-image
  return tf.contrib.summary.all_summary_ops()  # expect: contrib-summary


def normalisation(x):
  softmax = tf.nn.softmax(x, dim=-1)  # expect: tf1-keyword
  mean, variance = tf.nn.moments(x, [0], keep_dims=True)  # expect: tf1-keyword
  return softmax, mean, variance
