"""The one door from migrate to legacy code: a user's model_fn, loaded by name.

Nothing in migrate imports the Estimator or estimator_mnist; the tools that
compare against legacy code (``convert_checkpoint --verify``, ``compare``) load
the model_fn and input_fn named on their command line,
``package.module:function``, when they run, and run them here as TPUEstimator
does on CPU. Training and export never come here.
"""
import importlib

import numpy as np
import tensorflow as tf

from mnist_common.errors import KitError

DEFAULT_MODEL_FN = 'estimator_mnist.model:model_fn'
_APPLY_OPS = ('ApplyGradientDescent', 'ResourceApplyGradientDescent')


def load_callable(spec: str):
  """'package.module:name' -> the object."""
  module_name, _, attribute = spec.partition(':')
  if not module_name or not attribute:
    raise KitError(f'--legacy_model_fn={spec!r}: expected package.module:name')
  try:
    return getattr(importlib.import_module(module_name), attribute)
  except (ImportError, AttributeError) as e:
    raise KitError(f'cannot load {spec} ({e}); is the legacy code on '
                   'PYTHONPATH?') from e


def predict_probabilities(model_fn, checkpoint_path: str, images: np.ndarray,
                          params: dict) -> np.ndarray:
  """Runs model_fn in PREDICT mode on images with the checkpoint's weights.

  Args:
    model_fn: a (TPU)Estimator model_fn returning predictions['probabilities'].
    checkpoint_path: a name-based checkpoint, as Estimators write.
    images: the features model_fn expects (already scaled).
    params: the params model_fn reads.
  """
  modes = tf.compat.v1.estimator.ModeKeys
  with tf.Graph().as_default():
    features = tf.constant(images)
    spec = model_fn(features, None, modes.PREDICT, dict(params))
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, checkpoint_path)
      return sess.run(spec.predictions['probabilities'])


def legacy_batches(input_fn, data_dir: str, global_batch: int) -> list:
  """(images, labels) numpy batches from the legacy input_fn, in order."""
  dataset = input_fn({'data_dir': data_dir, 'batch_size': global_batch})
  return [(images.numpy(), labels.numpy()) for images, labels in dataset]


class _Graph:
  """One mode of a model_fn in a graph and session of its own."""

  def __init__(self, model_fn, mode, params: dict, batch_size: int):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.images = tf.compat.v1.placeholder(tf.float32,
                                             [batch_size, 28, 28, 1])
      self.labels = tf.compat.v1.placeholder(tf.int32, [batch_size])
      tf.compat.v1.train.create_global_step()
      labels = None if mode == tf.compat.v1.estimator.ModeKeys.PREDICT else (
          self.labels)
      self.spec = model_fn(self.images, labels, mode, dict(params))
      self.variables = {v.op.name: v
                        for v in tf.compat.v1.trainable_variables()}
      self._feeds = {name: tf.compat.v1.placeholder(v.dtype.base_dtype,
                                                     v.shape)
                     for name, v in self.variables.items()}
      self._assign = [v.assign(self._feeds[name])
                      for name, v in self.variables.items()]
      self.session = tf.compat.v1.Session(graph=self.graph)
      self.session.run(tf.compat.v1.global_variables_initializer())

  def weights(self) -> dict:
    return self.session.run(self.variables)

  def set_weights(self, values: dict) -> None:
    self.session.run(self._assign, {self._feeds[name]: values[name]
                                    for name in self.variables})


class LegacyRunner:
  """A model_fn as TPUEstimator runs it on CPU: a graph per mode, and one
  ``session.run(train_op)`` per training step."""

  def __init__(self, model_fn, params: dict, batch_size: int):
    modes = tf.compat.v1.estimator.ModeKeys
    self.train = _Graph(model_fn, modes.TRAIN, params, batch_size)
    self.infer = _Graph(model_fn, modes.PREDICT, params, batch_size)
    with self.train.graph.as_default():
      self.gradients = dict(zip(self.train.variables, tf.gradients(
          self.train.spec.loss, list(self.train.variables.values()))))
    # The rate the optimizer applies: the alpha input of its update ops.
    rates = {op.inputs[1].ref() for op in self.train.graph.get_operations()
             if op.type in _APPLY_OPS}
    self.learning_rate = rates.pop().deref() if len(rates) == 1 else None

  def weights(self) -> dict:
    return self.train.weights()

  def set_weights(self, values: dict) -> None:
    self.train.set_weights(values)

  def predict(self, images: np.ndarray) -> np.ndarray:
    self.infer.set_weights(self.weights())
    return self.infer.session.run(self.infer.spec.predictions['probabilities'],
                                  {self.infer.images: images})

  def step(self, images: np.ndarray, labels: np.ndarray) -> dict:
    """The loss, gradients and learning rate of one step; then takes it."""
    feed = {self.train.images: images, self.train.labels: labels}
    fetches = {'loss': self.train.spec.loss, 'gradients': self.gradients}
    if self.learning_rate is not None:
      fetches['learning_rate'] = self.learning_rate
    before = self.train.session.run(fetches, feed)
    self.train.session.run(self.train.spec.train_op, feed)
    return before
