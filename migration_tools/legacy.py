"""The one door to legacy code: a user's model_fn, loaded by name and run as
TPUEstimator runs it on CPU.

The tools that compare against legacy code (``convert_checkpoint --verify``,
``compare``) load the model_fn and input_fn named on their command line,
``package.module:function``, when they run, and run them here. Nothing else
in the kit touches ``tf.compat.v1.estimator``.
"""
# migration-scan: skip-file (it runs legacy code on purpose, to compare with it)
import os

import numpy as np
import tensorflow as tf

from mnist_common import process
from mnist_common.errors import KitError
from mnist_common.errors import one_line

_APPLY_OPS = ('ApplyGradientDescent', 'ResourceApplyGradientDescent')


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
  """(features, labels) numpy batches from the legacy input_fn, in order.

  Raises:
    KitError: the input_fn raised (its line) or gave no batch.
  """
  try:
    dataset = process.without_autotune_thread(
        input_fn({'data_dir': data_dir, 'batch_size': global_batch}))
    batches = [(features.numpy(), labels.numpy())
               for features, labels in dataset]
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'the legacy input_fn raised {one_line(e)}') from e
  if not batches:
    raise KitError(f'the legacy input_fn gave no batch of {global_batch} '
                   f'from {data_dir}')
  return batches


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
    self.model_fn, self.params = model_fn, params
    # Every graph is built here: building tf.compat.v1.layers in a graph
    # invalidates Keras models made earlier in the process (the port's).
    self.train = _Graph(model_fn, modes.TRAIN, params, batch_size)
    self.infer = _Graph(model_fn, modes.PREDICT, params, batch_size)
    self.eval = _Graph(model_fn, modes.EVAL, params, batch_size)
    with self.eval.graph.as_default():
      self.eval_metrics = _eval_metric_ops(self.eval.spec)
      self.eval_init = tf.compat.v1.local_variables_initializer()
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
    """The loss, gradients and learning rate of one step, which it takes.

    One session.run, as TPUEstimator's: the values fetched are those of the
    forward pass the update uses, and a dropout layer draws one mask per step.
    """
    feed = {self.train.images: images, self.train.labels: labels}
    fetches = {'loss': self.train.spec.loss, 'gradients': self.gradients,
               'train_op': self.train.spec.train_op}
    if self.learning_rate is not None:
      fetches['learning_rate'] = self.learning_rate
    values = self.train.session.run(fetches, feed)
    del values['train_op']
    values['examples'] = len(labels)
    return values

  def evaluate(self, batches: list) -> dict:
    """The model_fn's EVAL metrics over batches, as Estimator.evaluate reports
    them: each metric accumulated over all batches, 'loss' the batch mean."""
    graph = self.eval
    graph.set_weights(self.weights())
    graph.session.run(self.eval_init)
    updates = {name: update for name, (_, update) in self.eval_metrics.items()}
    losses = []
    for images, labels in batches:
      losses.append(graph.session.run(
          [graph.spec.loss, updates],
          {graph.images: images, graph.labels: labels})[0])
    results = graph.session.run({name: value for name, (value, _) in
                                 self.eval_metrics.items()})
    results['loss'] = float(np.mean(losses))
    return {name: float(value) for name, value in results.items()}

  def export(self, serving_input_fn, base_dir: str) -> str:
    """Exports the current weights through the Estimator's own export path
    (the model_fn in PREDICT mode, the serving_input_fn's receiver).

    It builds a graph of layers: Keras models made before it are unusable
    after it (see __init__).
    """
    model_dir = os.path.join(base_dir, 'legacy_model')
    with self.train.graph.as_default():
      saver = tf.compat.v1.train.Saver()
      step = self.train.session.run(tf.compat.v1.train.get_global_step())
      saver.save(self.train.session, os.path.join(model_dir, 'model.ckpt'),
                 global_step=step)
    params = {k: v for k, v in self.params.items() if k != 'batch_size'}
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=self.model_fn, params=params, use_tpu=False,
        config=tf.compat.v1.estimator.tpu.RunConfig(model_dir=model_dir),
        export_to_tpu=False)
    return estimator.export_saved_model(os.path.join(base_dir, 'legacy_export'),
                                        serving_input_fn).decode()


def _eval_metric_ops(spec) -> dict:
  """{name: (value, update_op)} of an EstimatorSpec or a TPUEstimatorSpec."""
  if getattr(spec, 'eval_metrics', None):
    metric_fn, tensors = spec.eval_metrics
    return (metric_fn(**tensors) if isinstance(tensors, dict) else
            metric_fn(*tensors))
  return dict(getattr(spec, 'eval_metric_ops', None) or {})
