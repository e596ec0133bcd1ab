"""Runs a legacy model_fn and the migrated model side by side on the same data.

``LegacyRunner`` executes the model_fn as TPUEstimator does off a TPU: one
graph, one ``session.run(train_op)`` per step. ``MigratedRunner`` executes the
port's own pieces (model, input pipeline, training step) under a strategy.
Both read the same records in file order, so step k of one sees the examples
step k of the other sees; the checks compare what they compute.
"""
import contextlib
import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from migrate import convert_checkpoint
from migrate import custom_loop
from migrate import data
from migrate import model as model_lib
from mnist_common import prepare
from mnist_common import tfrecords

_APPLY_OPS = ('ApplyGradientDescent', 'ResourceApplyGradientDescent')
SPLIT = 'test'  # The comparison data is written as this split.


@contextlib.contextmanager
def dropout_disabled():
  """While graphs are built inside the block, every Keras and
  tf.compat.v1.layers Dropout, and tf.nn.dropout, pass their input through."""
  layer = tf.keras.layers.Dropout
  saved = (layer.call, tf.nn.dropout, tf.compat.v1.nn.dropout)
  layer.call = lambda self, inputs, training=None: tf.identity(inputs)
  tf.nn.dropout = lambda x, *args, **kwargs: tf.identity(x)
  tf.compat.v1.nn.dropout = tf.nn.dropout
  try:
    yield
  finally:
    layer.call, tf.nn.dropout, tf.compat.v1.nn.dropout = saved


@dataclasses.dataclass
class Port:
  """The pieces of a migrated model the checks exercise; defaults: the kit's."""
  build_model: Callable[[], tf.keras.Model] = model_lib.build_model
  make_optimizer: Callable = model_lib.make_optimizer
  trainer_class: type = custom_loop.Trainer
  distribute: Callable = data.distribute
  variable_map: dict = dataclasses.field(
      default_factory=lambda: dict(convert_checkpoint.VARIABLE_MAP))


def write_comparison_data(source: prepare.DatasetInfo, directory: str,
                          examples: int) -> prepare.DatasetInfo:
  """The first `examples` train records of source (cycled), in file order."""
  records = tf.data.TFRecordDataset(source.path('train')).repeat().take(
      examples).map(tfrecords.parse_example).batch(examples)
  images, labels = next(iter(records))
  path = tfrecords.split_path(directory, SPLIT)
  tfrecords.write_records(path, images.numpy()[..., 0], labels.numpy())
  return prepare.DatasetInfo(directory, 'tfrecords', 0, examples)


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


class MigratedRunner:
  """The port's model, input pipeline and training step under a strategy."""

  def __init__(self, port: Port, strategy: tf.distribute.Strategy,
               info: prepare.DatasetInfo, global_batch: int,
               learning_rate: float):
    self.port, self.strategy, self.info = port, strategy, info
    with strategy.scope():
      self.model = port.build_model()
      self.optimizer = port.make_optimizer(learning_rate)
    self.trainer = port.trainer_class(self.model, self.optimizer, strategy,
                                      global_batch)
    self._dataset = port.distribute(strategy, info.data_dir, SPLIT,
                                    global_batch, False)
    self._iterator = custom_loop._iterator(self._dataset)  # pylint: disable=protected-access
    self._probe = custom_loop._iterator(self._dataset)  # pylint: disable=protected-access
    self._by_name = {v.name.removesuffix(':0'): v
                     for v in self.model.trainable_variables}
    self._inverse = {ours: theirs
                     for theirs, ours in port.variable_map.items()}

  def weights(self) -> dict:
    """Trainable weights under their legacy names (through the port's map)."""
    return {self._inverse.get(name, name): v.numpy()
            for name, v in self._by_name.items()}

  def set_weights(self, legacy_values: dict) -> None:
    for theirs, ours in self.port.variable_map.items():
      self._by_name[ours].assign(legacy_values[theirs])

  def predict(self, images: np.ndarray) -> np.ndarray:
    return tf.nn.softmax(self.model(images, training=False)).numpy()

  def step(self) -> dict:
    """The loss, gradients and learning rate of the next step; then takes it.

    Gradients are what the port's replicas compute, summed over replicas as
    the strategy's all-reduce sums them before the update.
    """
    def replica_fn(images, labels):
      per_example, _, gradients = self.trainer.loss_and_gradients(images,
                                                                  labels)
      return per_example, gradients

    per_example, gradients = self.strategy.run(replica_fn,
                                               args=next(self._probe))
    summed = [self.strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None)
              for g in gradients]
    # Summed and divided as the legacy loss is, so that equal losses compare
    # equal to the bit.
    losses = tf.concat(self.strategy.experimental_local_results(per_example),
                       axis=0)
    loss = float(tf.reduce_sum(losses) / losses.shape[0])
    self.trainer.train_steps(self._iterator, tf.constant(1))
    self.trainer.reset()
    names = [self._inverse.get(v.name.removesuffix(':0'))
             for v in self.model.trainable_variables]
    return {'loss': loss,
            'gradients': {n: g.numpy() for n, g in zip(names, summed)},
            'learning_rate': float(self.optimizer.learning_rate.numpy())}
