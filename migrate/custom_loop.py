"""Trainer 'custom': a training loop of our own with strategy.run.

The pieces TPUEstimator hid, in the open: ``train_step`` runs on every replica
on its share of the global batch; the loss is divided by the *global* batch
(``tf.nn.compute_average_loss``) so that the strategy's sum of the replicas'
gradients is the gradient of the global mean; ``train_steps`` runs several
steps per tf.function call with ``tf.range``, as ``iterations_per_loop`` did.
"""
import tensorflow as tf

from kit_core import process
from migrate import cadence as cadence_lib
from migrate import model as model_lib


class Trainer:
  """Holds the distributed step functions and their metrics."""

  def __init__(self, model: tf.keras.Model,
               optimizer: tf.keras.optimizers.Optimizer,
               strategy: tf.distribute.Strategy, global_batch: int,
               jit_compile: bool = False):
    """jit_compile: each replica's step compiled with XLA, as TPUStrategy
    compiles it (migrate's --jit_compile)."""
    self.model, self.optimizer, self.strategy = model, optimizer, strategy
    self.global_batch = global_batch
    if jit_compile:  # What strategy.run runs, each replica's step.
      self.train_step = tf.function(self.train_step, jit_compile=True)
      self.eval_step = tf.function(self.eval_step, jit_compile=True)
    with strategy.scope():
      self.loss = tf.keras.metrics.Mean('loss')
      self.accuracy = tf.keras.metrics.SparseCategoricalAccuracy('accuracy')

  def scaled_loss(self, per_example: tf.Tensor) -> tf.Tensor:
    """This replica's share of the global-batch mean: sum / global batch."""
    return tf.nn.compute_average_loss(per_example,
                                      global_batch_size=self.global_batch)

  def per_example_loss(self, labels: tf.Tensor,
                       logits: tf.Tensor) -> tf.Tensor:
    return model_lib.per_example_loss(labels, logits)

  def loss_and_gradients(self, images: tf.Tensor, labels: tf.Tensor):
    """Per-example losses, logits and this replica's gradients (inside a
    tf.function: see model_lib.gradients for why not a GradientTape)."""
    logits = self.model(images, training=True)
    per_example = self.per_example_loss(labels, logits)
    loss = self.scaled_loss(per_example)
    return per_example, logits, model_lib.gradients(
        loss, self.model.trainable_variables,
        # A model of build_model's says; any other is gated, as TF 1 was.
        getattr(self.model, 'gate_gradients', True))

  def train_step(self, images: tf.Tensor, labels: tf.Tensor) -> None:
    """One step on one replica's share of the global batch."""
    per_example, logits, gradients = self.loss_and_gradients(images, labels)
    # Under a strategy, apply_gradients sums the replicas' gradients.
    self.optimizer.apply_gradients(
        zip(gradients, self.model.trainable_variables))
    self.loss.update_state(per_example)
    self.accuracy.update_state(labels, logits)

  @tf.function
  def train_steps(self, iterator, steps: tf.Tensor) -> tf.Tensor:
    """`steps` training steps in one call: the host is visited once.

    Returns the optimizer's step after them. A tf.function with no outputs
    is not pruned by Grappler: the first convolution's input gradient, gated
    with its weight gradient and used by nothing, would still be computed
    (a third of a step here).
    """
    for _ in tf.range(steps):
      self.strategy.run(self.train_step, args=next(iterator))
    # identity, not read_value(): Keras 3's variables are not tf.Variables.
    return tf.identity(self.optimizer.iterations)

  def eval_step(self, images: tf.Tensor, labels: tf.Tensor) -> None:
    logits = self.model(images, training=False)
    self.loss.update_state(self.per_example_loss(labels, logits))
    self.accuracy.update_state(labels, logits)

  @tf.function
  def eval_steps(self, iterator, steps: tf.Tensor) -> None:
    for _ in tf.range(steps):
      self.strategy.run(self.eval_step, args=next(iterator))

  def reset(self) -> dict:
    """Returns the metrics since the last reset, and resets them."""
    values = {'loss': float(self.loss.result()),
              'accuracy': float(self.accuracy.result())}
    self.loss.reset_state()
    self.accuracy.reset_state()
    return values


def train(trainer: Trainer, dataset, steps_per_execution: int,
          cadence: cadence_lib.Cadence, writer) -> None:
  """Trains from the optimizer's step up to cadence.total_steps.

  Executions stop at each of the cadence's boundaries, so that logs,
  summaries and checkpoints land on round steps.
  """
  # Kept: dropping a distributed iterator can block for a minute on TF 2.15
  # (kit_core/process.py).
  iterator = process.keep_alive(iter(dataset))
  step = int(trainer.optimizer.iterations.numpy())
  while step < cadence.total_steps:
    steps = min(steps_per_execution, cadence.steps_to_boundary(step))
    step = int(trainer.train_steps(iterator, tf.constant(steps)))
    logged = cadence.after_execution(step, float(trainer.loss.result()),
                                     trainer.reset)
    if logged:
      with writer.as_default(step=step):
        for name, value in logged.items():
          tf.summary.scalar(name, value)
        tf.summary.scalar('learning_rate', trainer.optimizer.learning_rate)
  cadence.end(step)
  writer.flush()


def evaluate(trainer: Trainer, dataset, steps: int) -> dict:
  trainer.reset()
  trainer.eval_steps(process.keep_alive(iter(dataset)), tf.constant(steps))
  return trainer.reset()
