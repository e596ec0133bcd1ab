"""The kit's own pair, estimator_mnist's model_fn and migrate's port: the
defaults of compare and convert_checkpoint, and a worked example of a Port.

A team writes the same few lines for its own port (docs/MIGRATION.md, "Plug
your own pair in") and names them with --port; tests/user_code/ holds three
pairs unlike this one.
"""
import tensorflow as tf

from migrate import custom_loop
from migrate import data
from migrate import model
from migrate import train
from migration_tools.pair import port as port_lib
from mnist_common import prepare

# The migrated model names its layers as the model_fn does (conv1, conv2,
# dense, logits), so each legacy variable keeps its name.
VARIABLE_MAP = {name: name for name in (
    'conv1/kernel', 'conv1/bias', 'conv2/kernel', 'conv2/bias',
    'dense/kernel', 'dense/bias', 'logits/kernel', 'logits/bias')}


def _data_dir(params: dict) -> str:
  return params.get('data_dir') or prepare.prepare(None).data_dir


def legacy_input_fn(params: dict):
  """estimator_mnist's eval input_fn (the test split, in file order) on
  params['data_dir'], or on the kit's default data."""
  # Imported here: the port's side of the pair runs on TensorFlows without
  # tf.compat.v1's estimator stack.
  from estimator_mnist import data as legacy_data  # pylint: disable=g-import-not-at-top
  return legacy_data.eval_input_fn({**params, 'data_dir': _data_dir(params)})


def input_pipeline(strategy: tf.distribute.Strategy, params: dict):
  """migrate's pipeline over the records legacy_input_fn reads, at the
  global batch the legacy params hold (data.distribute splits it)."""
  global_batch = params['batch_size']  # migration-scan: ignore
  return data.distribute(strategy, _data_dir(params), 'test', global_batch,
                         False)


def predict(net: tf.keras.Model, features: tf.Tensor) -> dict:
  """The model_fn's PREDICT outputs, from the port's logits."""
  logits = net(features, training=False)
  return {'class_ids': tf.argmax(logits, axis=1),
          'probabilities': tf.nn.softmax(logits)}


def make_port() -> port_lib.Port:
  """migrate's model, optimizer, custom-loop trainer, input pipeline, export."""
  return port_lib.Port(
      build_model=lambda params: model.build_model(),
      make_optimizer=lambda params: model.make_optimizer(
          params['learning_rate']),
      trainer_class=custom_loop.Trainer,
      input_pipeline=input_pipeline,
      export=train.export,
      predict=predict,
      variable_map=dict(VARIABLE_MAP))
