"""Entry point: ``python -m migrate_jax [--flags]``. The only place flags live.

Trains estimator_mnist's CNN with Keras 3 on JAX, over every device JAX has
(keras.distribution.DataParallel), evaluates it on the test split, prints a
few predictions and exports the predict function (jax.export) with
estimator_mnist's signature. The same flags as migrate's:

  python -m migrate_jax --num_cpu_devices=4   # 4 replicas on a CPU

On a TPU VM (jax[tpu] installed): python -m migrate_jax --use_tpu
"""
import logging as std_logging
import sys

from absl import app
from absl import flags
from absl import logging

from kit_core import exits
from kit_core.exits import exit_with_one_line
from kit_core import process
from migrate_jax import config as config_lib
from migrate_jax import devices
from mnist_common import flags as common_flags
from mnist_common import resources

common_flags.define_common_flags()
# Each flag's default is its config field's (config.py).
_DEFAULT = config_lib.Config.default
PRECISIONS = ('float32', 'mixed_bfloat16')  # migrate_jax.model's, before JAX.
flags.DEFINE_integer(
    'num_cpu_devices', _DEFAULT('num_cpu_devices'),
    'On a CPU: make this many XLA devices before JAX starts, so that N '
    'replicas (like N TPU cores) train on one machine. Every device JAX has '
    'trains: a TPU\'s cores where there is one.')
flags.DEFINE_integer(
    'steps_per_execution', _DEFAULT('steps_per_execution'),
    'Training steps per compiled call: the JAX form of iterations_per_loop.',
    lower_bound=1, upper_bound=common_flags.MAX_STEPS)
flags.DEFINE_enum('precision', _DEFAULT('precision'), PRECISIONS,
                  'float32: the legacy model\'s numerics. mixed_bfloat16: '
                  'bfloat16 math, float32 variables and checkpoints, as '
                  'tf.tpu.bfloat16_scope was; not bit-comparable to the '
                  'legacy model.')
flags.DEFINE_integer('checkpoint_steps', _DEFAULT('checkpoint_steps'),
                     'Save a checkpoint (and log the loss) every this many '
                     'steps; a multiple of --steps_per_execution.',
                     lower_bound=1, upper_bound=common_flags.MAX_STEPS)
flags.DEFINE_integer('keep_checkpoints', _DEFAULT('keep_checkpoints'),
                     'How many of the newest checkpoints to keep.',
                     lower_bound=1)

FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {argv[1:]}; flags take the form '
             '--name=value (see --helpfull)')
  logging.set_verbosity(logging.INFO)
  # JAX looks for a TPU first and logs at INFO that there is none.
  std_logging.getLogger('jax._src.xla_bridge').setLevel(std_logging.WARNING)
  exit_with_one_line(_train)


def _train() -> None:
  config = config_lib.Config.from_flags(FLAGS)
  # Before JAX starts: its devices and Keras's backend are fixed then.
  if not config.skip_resource_checks:
    resources.check_cpu_devices(config.num_cpu_devices)
  devices.use_jax_backend()
  devices.split_cpu(config.num_cpu_devices)
  from migrate_jax import train  # pylint: disable=g-import-not-at-top
  train.run(config)


def _parse_flags(argv: list[str]) -> list[str]:
  # --help lists this command's flags, the shared ones included.
  return exits.parse_flags(argv, usage=__doc__,
                           modules=(common_flags.__name__, __name__))


def run() -> None:
  """Console-script entry point (``migrate-jax-mnist``)."""
  process.run_command(lambda: app.run(main, flags_parser=_parse_flags))
