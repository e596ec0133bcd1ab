"""A file migrated construct by construct, half way: Keras beside the TF 1
calls left in it, and the TF 2 calls that look like them. Symbols TF 2
redefined are judged by each call's shape, not by the rest of the file;
written for the scanner tests. `# expect:` lists the rule ids of its line."""
import tensorflow as tf


class Encoder(tf.keras.layers.Layer):
  """BERT's dropout and summaries, one call migrated and one not."""

  def __init__(self, dropout_prob):
    super().__init__()
    self.dense = tf.keras.layers.Dense(8)
    self.dropout_prob = dropout_prob

  def call(self, x, loss, step):
    x = self.dense(x)
    x = tf.nn.dropout(x, 1.0 - self.dropout_prob)  # expect: dropout-positional
    x = tf.nn.dropout(x, rate=self.dropout_prob)
    x = tf.nn.dropout(x, self.dropout_rate)
    tf.summary.scalar("loss", loss)  # expect: summary-op
    tf.summary.scalar("loss", loss, step=step)
    tf.summary.image("inputs", x, max_outputs=3)  # expect: summary-image
    tf.summary.image("inputs", x, step=step, max_outputs=3)
    return x


def convolutions(x, kernel, kernel_3d):
  # TF 1 took value/input and filter/filters as one argument: the positions
  # mean the same in TF 2.
  y = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME")
  y = tf.nn.conv1d(x, kernel, 1, "SAME")
  y = tf.nn.conv3d(x, kernel_3d, [1, 1, 1, 1, 1], "SAME")
  y = tf.nn.max_pool(y, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
  y = tf.nn.avg_pool(y, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
  # Position 5 moved: use_cudnn_on_gpu in TF 1, data_format in TF 2.
  y = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME", True)  # expect: tf1-positional
  return y


def serving(path, images, boxes, colors):
  # TF 1's load(sess, tags, export_dir) cannot take one argument: TF 2 code.
  model = tf.saved_model.load(path)
  drawn = tf.image.draw_bounding_boxes(images, boxes, colors)
  named = tf.image.draw_bounding_boxes(images, boxes, "boxes")  # expect: tf1-positional
  return model, drawn, named


def shapes(x):
  return tf.shape(x, tf.int64), tf.shape(x, "shape")  # expect: tf1-positional
