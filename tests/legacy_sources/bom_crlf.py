"""A TF 1 file with a UTF-8 BOM and Windows line ends; written for the
scanner tests. `# expect:` lists the rule ids of its line."""
import tensorflow as tf

GREETING = "¡Hola! — 日本"


def flags():
  tf.app.flags.DEFINE_string("name", "été", "Unicode default.")  # expect: app-flags
  return tf.app.flags.FLAGS  # expect: app-flags


def run(x):
  with tf.device("/cpu:0"):
    return tf.Print(x, [x], "x = ")  # expect: tf1-removed
