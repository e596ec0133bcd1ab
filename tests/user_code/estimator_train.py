"""Trains a legacy test pair with TPUEstimator on CPU, as its team did: the
checkpoint (weights, optimizer slots, global step) the converter reads.

  python estimator_train.py --pair_module=resnet_legacy --estimator_dir=DIR \
      --pair_params='{"data_dir": ...}' --train_steps=5 --global_batch=32 \
      [the legacy module's own flags, e.g. --nouse_tpu]
"""
# migration-scan: skip-file (legacy code on purpose)
import importlib
import json

from absl import app
from absl import flags
import tensorflow as tf

flags.DEFINE_string('pair_module', None, 'The legacy module.')
flags.DEFINE_string('estimator_dir', None, 'Where checkpoints go.')
flags.DEFINE_string('pair_params', '{}', 'params, as JSON.')
flags.DEFINE_integer('train_steps', 5, 'Steps.')
flags.DEFINE_integer('global_batch', 32, 'train_batch_size.')


def main(argv):
  del argv
  module = importlib.import_module(flags.FLAGS.pair_module)
  estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
      model_fn=module.model_fn, use_tpu=False,
      train_batch_size=flags.FLAGS.global_batch,
      params=json.loads(flags.FLAGS.pair_params),
      config=tf.compat.v1.estimator.tpu.RunConfig(
          model_dir=flags.FLAGS.estimator_dir))
  estimator.train(module.input_fn, max_steps=flags.FLAGS.train_steps)


if __name__ == '__main__':
  # The legacy module defines its flags at import: import it before parsing.
  import sys
  for arg in sys.argv:
    if arg.startswith('--pair_module='):
      importlib.import_module(arg.split('=', 1)[1])
  app.run(main)
