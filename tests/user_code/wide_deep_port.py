"""A team's small wide-and-deep port, written to run on Keras 2 and 3 alike:
an embedding, batch normalization and Adam or momentum slots, the state a
port checkpoint carries from TF 2.15 (Keras 2) to Keras 3
(tests/tools/test_across_versions.py)."""
import numpy as np
import tensorflow as tf

from migrate import custom_loop
from migration_tools.pair import port as port_lib

NUMBERS = 6
VOCABULARY = 20
CLASSES = 3


def build_model(params: dict) -> tf.keras.Model:
  del params
  category = tf.keras.Input((1,), dtype='int32', name='category')
  numbers = tf.keras.Input((NUMBERS,), name='numbers')
  embedded = tf.keras.layers.Embedding(VOCABULARY, 4, name='embedding')(
      category)
  wide = tf.keras.layers.Flatten(name='flatten')(embedded)
  joined = tf.keras.layers.Concatenate(name='joined')([wide, numbers])
  hidden = tf.keras.layers.Dense(16, activation='relu', name='hidden')(joined)
  hidden = tf.keras.layers.BatchNormalization(name='norm')(hidden)
  logits = tf.keras.layers.Dense(CLASSES, name='logits')(hidden)
  return tf.keras.Model({'category': category, 'numbers': numbers}, logits,
                        name='wide_deep')


def make_optimizer(params: dict):
  if params.get('optimizer', 'adam') == 'adam':
    return tf.keras.optimizers.Adam(params.get('learning_rate', 0.01))
  return tf.keras.optimizers.SGD(params.get('learning_rate', 0.05),
                                 momentum=0.9)


def examples(count: int, seed: int = 0) -> tuple[dict, np.ndarray]:
  """Features and labels the model learns something from."""
  rng = np.random.default_rng(seed)
  numbers = rng.normal(size=(count, NUMBERS)).astype(np.float32)
  category = rng.integers(0, VOCABULARY, (count, 1)).astype(np.int32)
  labels = ((numbers[:, 0] > 0) + (category[:, 0] % 2)).astype(np.int32)
  return {'category': category, 'numbers': numbers}, labels


def make_port() -> port_lib.Port:
  return port_lib.Port(build_model=build_model, make_optimizer=make_optimizer,
                       trainer_class=custom_loop.Trainer)
