"""The one door from migrate to legacy code: a user's model_fn, loaded by name.

Nothing in migrate imports the Estimator or estimator_mnist; the tools that
compare against legacy code (``convert_checkpoint --verify``, ``compare``) load
the model_fn named on their command line, ``package.module:function``, when
they run. Training and export never come here.
"""
import importlib

import numpy as np
import tensorflow as tf

from mnist_common.errors import KitError

DEFAULT_MODEL_FN = 'estimator_mnist.model:model_fn'


def load_callable(spec: str):
  """'package.module:name' -> the object."""
  module_name, _, attribute = spec.partition(':')
  if not module_name or not attribute:
    raise KitError(f'--legacy_model_fn={spec!r}: expected package.module:name')
  try:
    return getattr(importlib.import_module(module_name), attribute)
  except (ImportError, AttributeError) as e:
    raise KitError(f'cannot load {spec} ({e}); is the legacy code on '
                   'PYTHONPATH?') from e


def predict_probabilities(model_fn, checkpoint_path: str, images: np.ndarray,
                          params: dict) -> np.ndarray:
  """Runs model_fn in PREDICT mode on images with the checkpoint's weights.

  Args:
    model_fn: a (TPU)Estimator model_fn returning predictions['probabilities'].
    checkpoint_path: a name-based checkpoint, as Estimators write.
    images: the features model_fn expects (already scaled).
    params: the params model_fn reads.
  """
  modes = tf.compat.v1.estimator.ModeKeys
  with tf.Graph().as_default():
    features = tf.constant(images)
    spec = model_fn(features, None, modes.PREDICT, dict(params))
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, checkpoint_path)
      return sess.run(spec.predictions['probabilities'])
