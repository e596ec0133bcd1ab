"""The port's side of a comparison: its own pieces, run under a strategy.

``PortRunner`` executes what a ``port.Port`` names (model, optimizer, input
pipeline, trainer, export) as the port's training would; ``legacy.LegacyRunner``
executes the legacy model_fn as TPUEstimator does off a TPU. Both read the
same records in file order, so step k of one sees the examples step k of the
other sees, and the checks compare what they compute.
"""
import contextlib

import numpy as np
import tensorflow as tf

from migration_tools import port as port_lib
from mnist_common import process

# The comparison's records are written as this split of a data directory.
SPLIT = 'test'


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


class PortRunner:
  """The port's model, input pipeline and trainer under one strategy."""

  def __init__(self, port: port_lib.Port, strategy: tf.distribute.Strategy,
               data_dir: str, global_batch: int, learning_rate: float):
    """Builds the port's model, optimizer and trainer in strategy.scope().

    Args:
      port: the port's pieces (checked with port.check_port).
      strategy: where the port runs.
      data_dir: holds the comparison records as the split SPLIT.
      global_batch: the batch over all replicas.
      learning_rate: handed to port.make_optimizer.

    Raises:
      KitError: the variable map names a variable the model lacks.
    """
    self.port, self.strategy, self.data_dir = port, strategy, data_dir
    self.global_batch = global_batch
    with strategy.scope():
      self.model = port.build_model()
      self.optimizer = port.make_optimizer(learning_rate)
    port_lib.check_variable_map(port, self.model)
    self.trainer = port.trainer_class(self.model, self.optimizer, strategy,
                                      global_batch)
    # Kept: dropping a distributed iterator can block for a minute on TF 2.15
    # (mnist_common/process.py), and a comparison makes many.
    self._iterator = process.keep_alive(iter(self.dataset(SPLIT)))
    self._probe = process.keep_alive(iter(self.dataset(SPLIT)))
    self._by_name = port_lib.variables_by_name(self.model)
    self._legacy_name = {ours: theirs
                         for theirs, ours in port.variable_map.items()}

  def dataset(self, split: str):
    """The port's input pipeline over a split of data_dir, in file order."""
    return self.port.distribute(self.strategy, self.data_dir, split,
                                self.global_batch, False)

  def weights(self) -> dict[str, np.ndarray]:
    """Trainable weights under their legacy names (through the port's map);
    a variable the map does not name keeps the port's name."""
    return {self._legacy_name.get(name, name): v.numpy()
            for name, v in self._by_name.items()}

  def set_weights(self, legacy_values: dict[str, np.ndarray]) -> None:
    for theirs, ours in self.port.variable_map.items():
      self._by_name[ours].assign(legacy_values[theirs])

  def predict(self, features) -> np.ndarray:
    """The port model's outputs at inference (softmax of the logits)."""
    return tf.nn.softmax(self.model(features, training=False)).numpy()

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
    names = [self._legacy_name.get(v.name.removesuffix(':0'))
             for v in self.model.trainable_variables]
    return {'loss': loss, 'examples': int(losses.shape[0]),
            'gradients': {n: g.numpy() for n, g in zip(names, summed)},
            'learning_rate': self.learning_rate()}

  def learning_rate(self) -> float:
    """The rate the optimizer applies at its current step."""
    rate = self.optimizer.learning_rate
    if callable(rate):
      rate = rate(self.optimizer.iterations)
    return float(tf.convert_to_tensor(rate).numpy())

  def train_loss(self) -> float:
    """Takes the next step, all of it inside the port's step function, and
    returns the loss that step's metric recorded (the same forward pass, so
    the same dropout mask, as the update)."""
    self.trainer.train_steps(self._iterator, tf.constant(1))
    return self.trainer.reset()['loss']

  def evaluate(self, data_dir: str, steps: int) -> dict[str, float]:
    """The port's evaluation over `steps` batches of data_dir's test split."""
    dataset = self.port.distribute(self.strategy, data_dir, 'test',
                                   self.global_batch, False)
    self.trainer.reset()
    self.trainer.eval_steps(process.keep_alive(iter(dataset)),
                            tf.constant(steps))
    return self.trainer.reset()

  def export(self, base_dir: str) -> str:
    return self.port.export(self.model, base_dir, self.strategy)
