"""The front end of the commands that take a pair (compare, checkpoint):
the flags that name the legacy code and the port, and their loading."""
import dataclasses

from absl import flags

from kit_core import lazy
from migration_tools import cli
from migration_tools.pair import loading
from migration_tools.pair import frameworks
from migration_tools.pair import variable_map

# The commands' defaults: the kit's own pair (kit_pair/mnist.py), named as
# a team names its own, so that the tools import nothing of the example.
KIT_PAIR = {
    'legacy_model_fn': 'estimator_mnist.model:model_fn',
    'legacy_input_fn': 'kit_pair.mnist:legacy_input_fn',
    'legacy_serving_input_fn':
        'estimator_mnist.train:serving_input_receiver_fn',
    'port': 'kit_pair.mnist:make_port',
    # Its model_fn reads params['learning_rate']; params['data_dir'] unset:
    # the kit's default data.
    'params': '{"learning_rate": 0.05}',
}
# Its port on JAX (Keras 3), the default --port where there is no
# TensorFlow (the jax profile), from golden bundles.
KIT_JAX_PORT = 'kit_pair.mnist_jax:make_port'


def define_pair_flags(tool_flags: flags.FlagValues, serving: bool) -> None:
  """The flags that name the pair: the legacy model_fn and input_fn (and,
  if serving, its serving_input_receiver_fn), their params and flags, the
  port and the variable map. The defaults name the kit's own pair."""
  define = dict(flag_values=tool_flags)
  flags.DEFINE_string('legacy_model_fn', KIT_PAIR['legacy_model_fn'],
                      'The legacy model_fn, as package.module:name.', **define)
  flags.DEFINE_string('legacy_input_fn', KIT_PAIR['legacy_input_fn'],
                      'A legacy input_fn that yields (features, labels), or '
                      'features, batched by params["batch_size"], in a fixed '
                      'order (no shuffling): its batches feed both sides.',
                      **define)
  if serving:
    flags.DEFINE_string('legacy_serving_input_fn',
                        KIT_PAIR['legacy_serving_input_fn'],
                        'The legacy serving_input_receiver_fn the Estimator '
                        'exported with; empty: skip the served-predictions '
                        'check.', **define)
    flags.DEFINE_string('legacy_serving_inputs', '',
                        'A function (params) -> {receiver tensor name: array '
                        'of examples}, as package.module:name, giving the '
                        'serving receiver\'s inputs (e.g. JPEG bytes); '
                        'empty: made from the input_fn\'s batches (a tensor '
                        'named as a feature takes its values; a string '
                        'tensor, tf.Example protos of the features).',
                        **define)
  flags.DEFINE_string('port', KIT_PAIR['port'],
                      'A function returning the migration_tools.pair.port.Port '
                      '(or array_port.ArrayPort, for a port on JAX), as '
                      'package.module:name. Where there is no TensorFlow (the '
                      'jax profile), the default is ' + KIT_JAX_PORT + '.',
                      **define)
  cli.define_legacy_flags(tool_flags)
  flags.DEFINE_string('params', KIT_PAIR['params'],
                      'The params of the legacy input_fn and model_fn, as a '
                      'JSON object (what TPUEstimator(params=...) got), also '
                      'handed to the port\'s build_model and make_optimizer; '
                      'batch_size and use_tpu=False are added as TPUEstimator '
                      'adds them.', **define)
  flags.DEFINE_string('variable_map', None,
                      'A JSON file {"legacy/name": "port/name"} pairing the '
                      'models\' variables; unset: the port\'s variable_map, '
                      'or inferred from names and shapes.', **define)


def port_spec(tool_flags: flags.FlagValues) -> str:
  """What --port names; unset, the kit's own port (on JAX where there is
  no TensorFlow)."""
  if not tool_flags['port'].present and not lazy.installed('tensorflow'):
    return KIT_JAX_PORT
  return tool_flags.port


def load_port(tool_flags: flags.FlagValues):
  """The port --port names (a port.Port or an array_port.ArrayPort), with
  --variable_map's pairs if given.

  Raises:
    KitError: as frameworks.load_port and variable_map.read.
  """
  port = frameworks.load_port(port_spec(tool_flags))
  if tool_flags.variable_map:
    port = dataclasses.replace(
        port, variable_map=variable_map.read(tool_flags.variable_map))
  return port


def legacy_callable(tool_flags: flags.FlagValues, name: str):
  """The callable the flag name ('legacy_model_fn', ...) names."""
  return loading.load_callable(getattr(tool_flags, name), f'--{name}')
