"""A team's own custom-loop trainer, input pipeline and export, as the test
ports share them.

It follows migration_tools.pair.port.Trainer; each port subclasses it with its
loss and metrics. Written for the tests, as a team would for its models.
"""
import os
import tempfile

import tensorflow as tf


def distribute_records(strategy, global_batch: int, path: str, parse):
  """The records at path, parsed and batched per replica, in file order."""
  def dataset_fn(context):
    batch = context.get_per_replica_batch_size(global_batch)
    return tf.data.TFRecordDataset(path).map(parse).batch(
        batch, drop_remainder=True)
  return strategy.distribute_datasets_from_function(dataset_fn)


def save_serving(module: tf.Module, base_dir: str) -> str:
  """Saves module with module.serve as serving_default; returns the path."""
  os.makedirs(base_dir, exist_ok=True)
  path = tempfile.mkdtemp(dir=base_dir)
  tf.saved_model.save(module, path,
                      signatures={'serving_default': module.serve})
  return path


class Trainer:
  """strategy.run steps; the loss divided by the global batch."""

  def __init__(self, model, optimizer, strategy, global_batch):
    self.model, self.optimizer, self.strategy = model, optimizer, strategy
    self.global_batch = global_batch
    with strategy.scope():
      self.loss = tf.keras.metrics.Mean('loss')
      self.metrics = self.make_metrics()

  def make_metrics(self) -> dict:
    """{legacy metric name: Keras metric}; override."""
    return {}

  def outputs(self, features, training):
    return self.model(features, training=training)

  def per_example_loss(self, labels, outputs):
    raise NotImplementedError

  def update_metrics(self, labels, outputs) -> None:
    for metric in self.metrics.values():
      metric.update_state(labels, outputs)

  def scaled_loss(self, per_example):
    return tf.nn.compute_average_loss(per_example,
                                      global_batch_size=self.global_batch)

  def loss_and_gradients(self, features, labels):
    with tf.GradientTape() as tape:
      outputs = self.outputs(features, True)
      per_example = self.per_example_loss(labels, outputs)
      loss = self.scaled_loss(per_example)
    return per_example, outputs, tape.gradient(
        loss, self.model.trainable_variables)

  def train_step(self, features, labels):
    per_example, _, gradients = self.loss_and_gradients(features, labels)
    self.optimizer.apply_gradients(
        zip(gradients, self.model.trainable_variables))
    self.loss.update_state(per_example)

  @tf.function
  def train_steps(self, iterator, steps):
    for _ in tf.range(steps):
      self.strategy.run(self.train_step, args=next(iterator))
    # identity: Keras 3 variables have no read_value().
    return tf.identity(self.optimizer.iterations)

  def eval_step(self, features, labels):
    outputs = self.outputs(features, False)
    self.loss.update_state(self.per_example_loss(labels, outputs))
    self.update_metrics(labels, outputs)

  @tf.function
  def eval_steps(self, iterator, steps):
    for _ in tf.range(steps):
      self.strategy.run(self.eval_step, args=next(iterator))

  def reset(self) -> dict:
    values = {'loss': float(self.loss.result())}
    values.update((k, float(m.result())) for k, m in self.metrics.items())
    self.loss.reset_state()
    for metric in self.metrics.values():
      metric.reset_state()
    return values
