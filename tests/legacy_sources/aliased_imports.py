"""Aliased imports, as real repositories spell them; written for the tests."""
from absl import flags
import tensorflow as tf
from tensorflow_estimator.python.estimator.tpu import tpu_estimator as tpu_est  # expect: estimator
from tensorflow.compat.v1.estimator.tpu import RunConfig as TPURunConfig  # expect: run-config
from tensorflow.compat.v1 import train as v1_train

FLAGS = flags.FLAGS


def build(model_fn):
  optimizer = v1_train.AdamOptimizer()  # expect: adam-epsilon
  config = TPURunConfig()  # expect: run-config
  return tpu_est.TPUEstimator(model_fn, config=config), optimizer  # expect: tpu-estimator


def fine_in_tf2(images):
  # TF 2 spellings the scanner must leave alone.
  model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
  loss = tf.losses.categorical_crossentropy(images, model(images))
  checkpoint = tf.train.Checkpoint(model=model)
  accuracy = tf.metrics.SparseCategoricalAccuracy()
  return loss, checkpoint, accuracy, tf.train.Example()
