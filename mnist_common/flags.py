"""Flags that mean the same thing in both halves of the kit.

Names and defaults follow tensorflow/tpu's ``mnist_tpu.py`` where it had the
flag; ``--use_tpu`` defaults to off, since most machines that still run this
code have no TPU.
"""
import math

from absl import flags

from kit_core import paths
from mnist_common import prepare
from mnist_common.config import CommonConfig

# Each flag's default is its config field's (config.py).
_DEFAULT = CommonConfig.default

MAX_STEPS = 10**12


def define_common_flags() -> None:
  """Defines the shared flags on absl's global FLAGS (call once, from main)."""
  flags.DEFINE_string(
      'tpu', _DEFAULT('tpu'),
      'The Cloud TPU to use: its name, a grpc://IP:8470 address, or "local" on '
      'a TPU VM. Unset: the TPU_NAME environment variable, else none.')
  flags.DEFINE_string(
      'tpu_zone', _DEFAULT('tpu_zone'),
      'GCE zone of the Cloud TPU. Unset: asked of the GCE metadata server.')
  flags.DEFINE_string(
      'gcp_project', _DEFAULT('gcp_project'),
      'GCP project of the Cloud TPU. Unset: asked of the GCE metadata server.')
  flags.DEFINE_bool('use_tpu', _DEFAULT('use_tpu'),
                    'Train on a TPU. Off: train on the local CPU/GPU.')
  flags.DEFINE_string(
      'data_dir', _DEFAULT('data_dir'),
      'Directory with MNIST: train.tfrecords/test.tfrecords, the four IDX '
      'files (train-images-idx3-ubyte.gz, ...), or mnist.npz. TFRecords are '
      'written there from IDX/npz. Unset: ' + prepare.DEFAULT_DATA_DIR +
      ', filled with scikit-learn\'s handwritten digits when it holds nothing.')
  flags.DEFINE_enum(
      'data_source', _DEFAULT('data_source'), prepare.SOURCES,
      'Where the data comes from. auto: what --data_dir holds; idx / npz: '
      'those files in --data_dir; download: fetch the IDX files from '
      '--data_url; digits: scikit-learn\'s digits resized to 28x28 (offline); '
      'fake: synthetic images for smoke runs.')
  flags.DEFINE_string('data_url', _DEFAULT('data_url'),
                      'Base URL of the IDX files for --data_source=download.')
  flags.DEFINE_string(
      'model_dir', _DEFAULT('model_dir'),
      'Where checkpoints, summaries and the exported SavedModel go. Unset: a '
      'new temporary directory.')
  for name in ('model_dir', 'data_dir'):
    # An unset shell variable ('--model_dir=$DIR') would mean the current
    # folder: train into it, or read data from it.
    flags.register_validator(
        name, lambda value: value is None or bool(value.strip()),
        message='is empty (an unset variable?); give a folder, or leave the '
        'flag out for the default')
    flags.register_validator(name, paths.utf8_path)
  flags.DEFINE_integer(
      'batch_size', _DEFAULT('batch_size'),
      'Global mini-batch size for training: the batch over all replicas '
      '(TPU cores), not the per-replica batch.', lower_bound=1)
  # Bounds that every library down the line takes: numpy's seeds are uint32,
  # and a step count past 10^12 overflows the progress bar's arithmetic.
  flags.DEFINE_integer('train_steps', _DEFAULT('train_steps'),
                       'Total number of training steps.', lower_bound=1,
                       upper_bound=MAX_STEPS)
  flags.DEFINE_integer(
      'eval_steps', _DEFAULT('eval_steps'),
      'Evaluation steps after training. Unset: one pass over the test split '
      '(the last partial batch dropped). 0: skip evaluation.', lower_bound=0)
  flags.DEFINE_float('learning_rate', _DEFAULT('learning_rate'),
                     'Initial learning rate (decays by 0.96 every 100,000 '
                     'steps).', lower_bound=0.0)
  # nan passes a lower bound (nan < 0 is False): ask for a number outright.
  flags.register_validator('learning_rate', math.isfinite,
                           message='must be a finite number, e.g. 0.05')
  flags.DEFINE_bool('enable_predict', _DEFAULT('enable_predict'),
                    'After training, predict a few test images and print them.')
  flags.DEFINE_integer('num_predictions', _DEFAULT('num_predictions'),
                       'How many test images --enable_predict prints.',
                       lower_bound=1)
  flags.DEFINE_bool(
      'skip_resource_checks', _DEFAULT('skip_resource_checks'),
      'Train even where the kit estimates, from the model\'s shapes, that the '
      'batch needs more memory than is available, or where more logical CPU '
      'devices are asked for than it allows.')
  flags.DEFINE_integer(
      'seed', _DEFAULT('seed'), 'Random seed: weights, dropout and '
      'shuffling. Two runs with the same seed on the same machine are '
      'bit-identical.', lower_bound=0,
      upper_bound=2**32 - 1)
