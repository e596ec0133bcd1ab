"""The migrated side of the comparison, and what both sides share.

``MigratedRunner`` executes the port's own pieces (model, input pipeline,
training step) under a strategy; ``legacy.LegacyRunner`` executes the legacy
model_fn as TPUEstimator does off a TPU. Both read the same records in file
order, so step k of one sees the examples step k of the other sees; the checks
in ``compare`` compare what they compute.
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
from migrate import train as train_lib
from mnist_common import prepare
from mnist_common import tfrecords

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
  export: Callable = train_lib.export
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
    self._iterator = custom_loop.live_iterator(self._dataset)
    self.global_batch = global_batch
    self._probe = custom_loop.live_iterator(self._dataset)
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

  @tf.function
  def _probe_step(self):
    """The replicas' loss_and_gradients on the next batch; in a function, as
    in the port's step (its gradients may be graph-only)."""
    return self.strategy.run(self.trainer.loss_and_gradients,
                             args=next(self._probe))

  def step(self) -> dict:
    """The loss, gradients and learning rate of the next step; then takes it.

    Gradients are what the port's replicas compute, summed over replicas as
    the strategy's all-reduce sums them before the update.
    """
    per_example, _, gradients = self._probe_step()
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

  def train_loss(self) -> float:
    """Takes the next step, all of it inside the port's step function, and
    returns the loss that step's metric recorded (the same forward pass, so
    the same dropout mask, as the update)."""
    self.trainer.train_steps(self._iterator, tf.constant(1))
    return self.trainer.reset()['loss']

  def evaluate(self, data_dir: str, steps: int) -> dict:
    """The port's evaluation over `steps` batches of data_dir's test split."""
    dataset = self.port.distribute(self.strategy, data_dir, 'test',
                                   self.global_batch, False)
    self.trainer.reset()
    self.trainer.eval_steps(custom_loop.live_iterator(dataset),
                            tf.constant(steps))
    return self.trainer.reset()

  def export(self, base_dir: str) -> str:
    return self.port.export(self.model, base_dir, self.strategy)
