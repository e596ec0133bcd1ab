"""Entry point: ``python -m estimator_mnist [--flags]``. The only place flags live.

Trains the MNIST CNN with TPUEstimator, evaluates it on the test split, prints
a few predictions and exports a SavedModel. On the offline default data
(scikit-learn's digits) the default flags reach an eval accuracy of about 0.98
in a few minutes on a 2-core CPU:

  python -m estimator_mnist --model_dir=/tmp/estimator_mnist

On a Cloud TPU:

  python -m estimator_mnist --use_tpu --tpu=NAME --data_dir=gs://... \
      --model_dir=gs://...
"""
import sys

from kit_core import process

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

if not hasattr(tf.compat.v1, 'estimator'):  # What config and train import.
  sys.exit(f'error: estimator_mnist runs tf.estimator, which TensorFlow '
           f'{tf.__version__} no longer has (removed in 2.16): run it in the '
           'estimator profile (TensorFlow 2.15.1 on Python 3.11; README, '
           'Set-up)')

from estimator_mnist import config as config_lib
from estimator_mnist import train
from kit_core import exits
from kit_core import framework_logs
from kit_core.exits import exit_with_one_line
from mnist_common import flags as common_flags
# pylint: enable=g-import-not-at-top,wrong-import-position

common_flags.define_common_flags()
# Each flag's default is its config field's (config.py).
_DEFAULT = config_lib.Config.default
flags.DEFINE_integer('iterations', _DEFAULT('iterations'),
                     'Training steps per TPU loop (TPUConfig\'s '
                     'iterations_per_loop); no effect off a TPU.',
                     lower_bound=1, upper_bound=common_flags.MAX_STEPS)
flags.DEFINE_integer(
    'save_checkpoints_steps', _DEFAULT('save_checkpoints_steps'),
    'Save a checkpoint every this many steps (RunConfig\'s '
    'save_checkpoints_steps; on a TPU, at the end of a loop). Unset: '
    'max(--iterations, 100).', lower_bound=1,
    upper_bound=common_flags.MAX_STEPS)
flags.DEFINE_integer('num_shards', _DEFAULT('num_shards'),
                     'Number of TPU cores (TPUConfig\'s num_shards); '
                     '--batch_size must be divisible by it under --use_tpu.',
                     lower_bound=1)
flags.DEFINE_bool('export_to_tpu', _DEFAULT('export_to_tpu'),
                  'Also export a TPU serving MetaGraph (tags serve,tpu); a '
                  'plain tf.saved_model.load(path) then needs tags=["serve"].')
flags.DEFINE_bool('version', False,
                  'Print the TensorFlow, Keras and Estimator builds and exit.')
flags.DEFINE_bool('verbose', False,
                  'Show all of TensorFlow\'s log lines (its deprecation '
                  'notices, the Estimator\'s graph and session steps). '
                  'Without it, only the training progress and results the '
                  'Estimator logs (loss, steps per second, checkpoints, '
                  'evaluation) and errors show.')

FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {argv[1:]}; flags take the form '
             '--name=value (see --helpfull)')
  if FLAGS.version:
    from estimator_mnist import versions  # pylint: disable=g-import-not-at-top
    print(versions.report())
    return
  logging.set_verbosity(logging.INFO)
  # TF's logger has a handler of its own; absl's already prints its records.
  tf.get_logger().handlers.clear()
  if not FLAGS.verbose:
    framework_logs.hold_back(keep=_estimator_progress)
  exit_with_one_line(
      lambda: train.run(config_lib.Config.from_flags(FLAGS)))


# What the Estimator logs that a user of the example reads: its progress
# and results, by the start of each message.
_PROGRESS = ('loss = ', 'global_step/sec', 'Loss for final step',
             'Saving checkpoints for', 'Saving dict for global step',
             'Restoring parameters from')


def _estimator_progress(record) -> bool:
  return record.getMessage().startswith(_PROGRESS)


def _parse_flags(argv: list[str]) -> list[str]:
  # --help lists this command's flags, the shared ones included.
  return exits.parse_flags(argv, usage=__doc__,
                           modules=(common_flags.__name__, __name__))


def run() -> None:
  """Console-script entry point (``estimator-mnist``).

  Ends the process as soon as main is done: kit_core/process.py says why.
  """
  process.run_command(lambda: app.run(main, flags_parser=_parse_flags))
