"""The kit's own pair, estimator_mnist's model_fn and migrate's port: the
defaults of compare and convert_checkpoint, and a worked example of a Port.

A team writes the same few lines for its own port (docs/MIGRATION.md, "Plug
your own pair in") and names them with --port.
"""
from migrate import custom_loop
from migrate import data
from migrate import model
from migrate import train
from migration_tools import port as port_lib

LEGACY_MODEL_FN = 'estimator_mnist.model:model_fn'
LEGACY_INPUT_FN = 'estimator_mnist.data:eval_input_fn'
LEGACY_SERVING_INPUT_FN = 'estimator_mnist.train:serving_input_receiver_fn'
PORT = 'migration_tools.kit_pair:make_port'

# The migrated model names its layers as the model_fn does (conv1, conv2,
# dense, logits), so each legacy variable keeps its name.
VARIABLE_MAP = {name: name for name in (
    'conv1/kernel', 'conv1/bias', 'conv2/kernel', 'conv2/bias',
    'dense/kernel', 'dense/bias', 'logits/kernel', 'logits/bias')}


def make_port() -> port_lib.Port:
  """migrate's model, optimizer, custom-loop trainer, input pipeline, export."""
  return port_lib.Port(build_model=model.build_model,
                       make_optimizer=model.make_optimizer,
                       trainer_class=custom_loop.Trainer,
                       distribute=data.distribute,
                       export=train.export,
                       variable_map=dict(VARIABLE_MAP))
