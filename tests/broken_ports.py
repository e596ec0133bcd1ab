"""Deliberately broken ports, one classic migration bug each, for the harness.

Each function returns an equivalence.Port; `python -m migrate.compare
--port=broken_ports:NAME` loads it (tests/ on PYTHONPATH).
"""
import tensorflow as tf

from migrate import custom_loop
from migrate import data
from migrate import equivalence
from migrate import model as model_lib


class _PerReplicaMean(custom_loop.Trainer):

  def scaled_loss(self, per_example):
    return tf.reduce_mean(per_example)  # Not divided by the global batch.


def loss_averaged_per_replica() -> equivalence.Port:
  return equivalence.Port(trainer_class=_PerReplicaMean)


def global_batch_per_replica() -> equivalence.Port:
  def distribute(strategy, data_dir, split, global_batch, training, seed=0):
    def dataset_fn(input_context):
      return data.make_dataset(data_dir, split, global_batch, training, seed,
                               input_context)
    return strategy.distribute_datasets_from_function(dataset_fn)
  return equivalence.Port(distribute=distribute)


def pixels_zero_to_one() -> equivalence.Port:
  def make_dataset(data_dir, split, batch_size, training, seed=0,
                   input_context=None):
    return data.make_dataset(data_dir, split, batch_size, training, seed,
                             input_context).map(lambda x, y: (x + 0.5, y))

  def distribute(strategy, data_dir, split, global_batch, training, seed=0):
    def dataset_fn(input_context):
      batch = input_context.get_per_replica_batch_size(global_batch)
      return make_dataset(data_dir, split, batch, training, seed,
                          input_context)
    return strategy.distribute_datasets_from_function(dataset_fn)
  return equivalence.Port(distribute=distribute)


def missing_relu() -> equivalence.Port:
  def build_model():
    net = model_lib.build_model()
    net.get_layer('dense').activation = tf.keras.activations.linear
    return net
  return equivalence.Port(build_model=build_model)
