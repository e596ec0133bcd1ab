"""The front end of the commands that take a pair (compare, checkpoint):
the flags that name the legacy code and the port, and their loading."""
import dataclasses
import importlib.util
import os
import warnings

from absl import flags

from kit_core import lazy
from kit_core.errors import KitError
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
# Its ports, by the framework each needs: the default --port is the first
# whose framework is installed (Keras on TensorFlow; Keras 3 on JAX on the
# jax profile; PyTorch on the torch profile).
KIT_PORTS = (('tensorflow', 'kit_pair.mnist:make_port'),
             ('jax', 'kit_pair.mnist_jax:make_port'),
             ('torch', 'kit_pair.mnist_torch:make_port'))
# The kit's pair recorded on TF 2.15 (kit_pair/golden_bundle.npz): what
# migration-compare checks against where no tf.estimator can run the
# model_fn and no --bundle is given.
KIT_BUNDLE = ('kit_pair', 'golden_bundle.npz')


def __getattr__(name: str):
  # KIT_JAX_PORT, the JAX one of KIT_PORTS under its earlier name: kept,
  # with a warning, for a release.
  if name == 'KIT_JAX_PORT':
    warnings.warn('migration_tools.pair.flags.KIT_JAX_PORT is deprecated: '
                  "use dict(flags.KIT_PORTS)['jax']", DeprecationWarning,
                  stacklevel=2)
    return dict(KIT_PORTS)['jax']
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


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
                      'A function returning a port of a registered framework, '
                      'as package.module:name: ' + '; '.join(
                          f'{f.title}: a {f.contract}'
                          for f in frameworks.registered()) + '. Unset: the kit\'s own port on the '
                      'first framework installed of ' + ', '.join(
                          f'{f} ({p})' for f, p in KIT_PORTS) + '.',
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
  """What --port names; unset, the kit's own port on the first framework
  installed (KIT_PORTS)."""
  if tool_flags['port'].present:
    return tool_flags.port
  return next((spec for framework, spec in KIT_PORTS
               if lazy.installed(framework)), tool_flags.port)


# The flags that name code a run imports, as module:name.
_CODE_FLAGS = ('port', 'legacy_model_fn', 'legacy_input_fn',
               'legacy_serving_input_fn', 'legacy_serving_inputs')


def code_files(tool_flags: flags.FlagValues) -> list[tuple[str, str]]:
  """(what, path) of what a run imports or reads beside its data flags: the
  file of each module --port and the --legacy_* flags name (and the folder
  of the package it sits in), --variable_map's file and params' data_dir:
  inputs no output may replace (paths.check_output)."""
  found = []
  for name in _CODE_FLAGS:
    if name not in tool_flags:
      continue
    spec = port_spec(tool_flags) if name == 'port' else tool_flags[name].value
    origin = _origin(spec.partition(':')[0]) if spec else None
    if origin is None:
      continue  # Loading it says what is wrong, in its own line.
    found.append((f'the module --{name} names', origin))
    folder = os.path.dirname(origin)
    if os.path.exists(os.path.join(folder, '__init__.py')):
      found.append((f'the package of the module --{name} names', folder))
  if 'variable_map' in tool_flags and tool_flags.variable_map:
    found.append(('the input --variable_map', tool_flags.variable_map))
  data_dir = _data_dir(tool_flags)
  if data_dir:
    found.append(("the data folder params' data_dir names", data_dir))
  return found


def _origin(module: str) -> str | None:
  """The file module would be imported from (its packages imported, not
  it), or None."""
  try:
    spec = importlib.util.find_spec(module)
  except (ImportError, ValueError):
    return None
  return spec.origin if spec is not None and spec.has_location else None


def _data_dir(tool_flags: flags.FlagValues) -> str | None:
  if 'params' not in tool_flags:
    return None
  try:
    params = cli.parse_params(tool_flags.params)
  except KitError:
    return None  # Read again, and refused in its own line, later.
  value = params.get('data_dir')
  return value if isinstance(value, str) and os.path.isdir(value) else None


def kit_bundle() -> str:
  """The path of the kit's own golden bundle (KIT_BUNDLE).

  Raises:
    KitError: it is not there (an install without the package's data).
  """
  package, name = KIT_BUNDLE
  spec = importlib.util.find_spec(package)
  folder = (os.path.dirname(spec.origin) if spec and spec.origin else None)
  path = os.path.join(folder, name) if folder else None
  if path is None or not os.path.isfile(path):
    raise KitError(f'the kit\'s own bundle {package}/{name} is missing from '
                   'this install: reinstall the kit, or give --bundle=FILE')
  return path


def names_a_pair(tool_flags: flags.FlagValues) -> bool:
  """Whether any flag that names the legacy side was given."""
  return any(tool_flags[name].present for name in (
      'legacy_model_fn', 'legacy_input_fn', 'legacy_serving_input_fn',
      'legacy_serving_inputs', 'legacy_flags', 'params')
             if name in tool_flags)


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
