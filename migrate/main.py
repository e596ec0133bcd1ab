"""Entry point: ``python -m migrate [--flags]``. The only place flags live.

Trains estimator_mnist's CNN with tf.distribute, evaluates it on the test
split, prints a few predictions and exports a SavedModel whose signature
matches estimator_mnist's. On the offline default data (scikit-learn's digits)
the default flags reach an eval accuracy of about 0.98:

  python -m migrate --loop=fit
  python -m migrate --loop=custom --num_cpu_devices=2   # 2 replicas on a CPU

On a Cloud TPU:

  python -m migrate --use_tpu --tpu=NAME --data_dir=gs://... --model_dir=gs://...

On several machines: set TF_CONFIG on each and pass --strategy=multi_worker.
"""
import sys

from kit_core import process

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from kit_core import devices
from kit_core.errors import KitError
from kit_core import exits
from kit_core.exits import exit_with_one_line
from migrate import config as config_lib
from migrate import model as model_lib
from migrate import strategy as strategy_lib
from migrate import train
from mnist_common import flags as common_flags
from mnist_common import resources
# pylint: enable=g-import-not-at-top,wrong-import-position

common_flags.define_common_flags()
# Each flag's default is its config field's (config.py).
_DEFAULT = config_lib.Config.default
flags.DEFINE_enum(
    'strategy', _DEFAULT('strategy'), strategy_lib.STRATEGIES,
    'tf.distribute strategy. auto: a TPU if there is one, else every local '
    'GPU (or logical CPU device) with MirroredStrategy, else one device.')
flags.DEFINE_integer(
    'num_cpu_devices', _DEFAULT('num_cpu_devices'),
    'Split the CPU into this many logical devices before TensorFlow starts, '
    'so that N replicas (like N TPU cores) train on one machine.')
flags.DEFINE_integer(
    'steps_per_execution', _DEFAULT('steps_per_execution'),
    'Training steps per tf.function call: the TF2 form of '
    'iterations_per_loop.', lower_bound=1, upper_bound=common_flags.MAX_STEPS)
flags.DEFINE_enum('loop', _DEFAULT('loop'), train.LOOPS,
                  'Trainer: Keras compile/fit, or a custom loop with '
                  'strategy.run.')
flags.DEFINE_enum('precision', _DEFAULT('precision'), model_lib.PRECISIONS,
                  'float32: the legacy model\'s numerics. mixed_bfloat16: '
                  'Keras mixed precision (bfloat16 math, float32 variables '
                  'and checkpoints), as tf.tpu.bfloat16_scope was; faster on '
                  'TPUs and on CPUs with AVX512_BF16 or AMX, slower on CPUs '
                  'without (emulated), not bit-comparable to the legacy '
                  'model.')
flags.DEFINE_integer(
    'worker_wait_seconds', _DEFAULT('worker_wait_seconds'),
    'With --strategy=multi_worker: how long to wait for the other workers of '
    'TF_CONFIG before giving up with a message.', lower_bound=1)
flags.DEFINE_boolean(
    'jit_compile', _DEFAULT('jit_compile'),
    'Compile the training and evaluation steps with XLA '
    '(jit_compile=True), as a TPU always does: run the step through XLA on '
    'a CPU or GPU before a TPU is at hand. Off by default: on a CPU, XLA runs '
    'this step slower than the graph (benchmarks/README.md), and compiles '
    'for one replica only (--num_cpu_devices=1, one worker). No effect on a '
    'TPU, which compiles it anyway.')
flags.DEFINE_integer('checkpoint_steps', _DEFAULT('checkpoint_steps'),
                     'Save a checkpoint (and log the loss) every this many '
                     'steps. With --loop=fit, a multiple of '
                     '--steps_per_execution.', lower_bound=1,
                     upper_bound=common_flags.MAX_STEPS)

FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {argv[1:]}; flags take the form '
             '--name=value (see --helpfull)')
  logging.set_verbosity(logging.INFO)
  # TF's logger has a handler of its own; absl's already prints its records.
  tf.get_logger().handlers.clear()
  exit_with_one_line(_train)


def make_config() -> config_lib.Config:
  """The run's config from the parsed flags; --use_tpu means --strategy=tpu.

  Raises:
    KitError: --use_tpu with another --strategy.
  """
  strategy = FLAGS.strategy
  if FLAGS.use_tpu:
    if strategy not in ('auto', 'tpu'):
      raise KitError(f'--use_tpu contradicts --strategy={strategy}; drop one '
                     'of them')
    strategy = 'tpu'
  return config_lib.Config.from_flags(FLAGS, strategy=strategy)


def _train() -> None:
  config = make_config()
  # Before anything else: devices are fixed once TensorFlow starts.
  if not config.skip_resource_checks:
    resources.check_cpu_devices(config.num_cpu_devices)
  devices.split_cpu(config.num_cpu_devices)
  train.run(config)


def _parse_flags(argv: list[str]) -> list[str]:
  # --help lists this command's flags, the shared ones included.
  return exits.parse_flags(argv, usage=__doc__,
                           modules=(common_flags.__name__, __name__))


def run() -> None:
  """Console-script entry point (``migrate-mnist``).

  Ends the process as soon as main is done: kit_core/process.py says why.
  """
  process.run_command(lambda: app.run(main, flags_parser=_parse_flags))
