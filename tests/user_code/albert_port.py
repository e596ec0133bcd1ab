"""The team's port of albert_legacy: a subclassed Keras model whose one
transformer block every layer calls, the factorised embedding, LAMB as a
Keras optimizer (the BERT port's AdamWeightDecay with the trust ratio), and
the BERT port's trainer, pipeline and export. It runs on Keras 2 (TF 2.15)
and Keras 3. Below it, the deliberate bugs of an ALBERT port, one function
each.
"""
import dataclasses
import math
import re

import tensorflow as tf

import albert_legacy as legacy
import bert_port
from migration_tools.pair import port as port_lib

layers = tf.keras.layers


def _dense(units, name, params, activation=None):
  return layers.Dense(units, activation=activation, name=name,
                      kernel_initializer=tf.keras.initializers.TruncatedNormal(
                          stddev=params.get('init_range', 0.02)))


def _norm(name):
  return layers.LayerNormalization(epsilon=1e-12, name=name)


class Embeddings(layers.Layer):
  """EMBED-wide tables, a layer norm, the projection to HIDDEN."""

  def __init__(self, params, **kwargs):
    super().__init__(**kwargs)
    self.params = params
    self.norm = _norm('LayerNorm')
    self.mapping = _dense(legacy.HIDDEN, 'embedding_hidden_mapping_in',
                          params)

  def build(self, input_shape):
    initializer = tf.keras.initializers.TruncatedNormal(
        stddev=self.params.get('init_range', 0.02))
    self.tables = [self.add_weight(name=name, shape=(rows, legacy.EMBED),
                                   initializer=initializer)
                   for name, rows in (('word_embeddings', legacy.VOCAB),
                                      ('token_type_embeddings', 2),
                                      ('position_embeddings', legacy.SEQ))]
    super().build(input_shape)

  def call(self, features):
    words, segments, positions = self.tables
    x = (tf.gather(words, features['input_ids']) +
         tf.gather(segments, features['segment_ids']) + positions[None])
    return self.mapping(self.norm(x))


class Block(layers.Layer):
  """The transformer layer; the model calls one instance LAYERS times."""

  def __init__(self, params, activation=bert_port.gelu, transposed=False,
               **kwargs):
    super().__init__(**kwargs)
    self.query, self.key, self.value = (
        _dense(legacy.HIDDEN, part, params)
        for part in ('query', 'key', 'value'))
    self.attention_output = _dense(legacy.HIDDEN, 'output', params)
    self.attention_norm = _norm('attention_LayerNorm')
    self.ffn = _dense(legacy.INTERMEDIATE, 'ffn', params,
                      activation=activation)
    self.ffn_output = _dense(legacy.HIDDEN, 'ffn_output', params)
    self.output_norm = _norm('output_LayerNorm')
    self.transposed = transposed

  def _heads(self, t):
    size = legacy.HIDDEN // legacy.HEADS
    return tf.transpose(tf.reshape(t, [-1, legacy.SEQ, legacy.HEADS, size]),
                        [0, 2, 1, 3])

  def _project(self, context):
    if not self.transposed:
      return self.attention_output(context)
    dense = self.attention_output  # The bug: its kernel read transposed.
    if not dense.built:
      dense.build(context.shape)
    return tf.matmul(context, dense.kernel, transpose_b=True) + dense.bias

  def call(self, x, mask):
    size = legacy.HIDDEN // legacy.HEADS
    query, key, value = (self._heads(self.query(x)), self._heads(self.key(x)),
                         self._heads(self.value(x)))
    scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(size)
    scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
    context = tf.reshape(
        tf.transpose(tf.matmul(tf.nn.softmax(scores), value), [0, 2, 1, 3]),
        [-1, legacy.SEQ, legacy.HIDDEN])
    x = self.attention_norm(self._project(context) + x)
    return self.output_norm(self.ffn_output(self.ffn(x)) + x)


class Classifier(tf.keras.Model):
  """The embedding, the shared block LAYERS times, the pooler on the first
  token and the BERT port's head; takes the input_fn's dict, gives logits."""

  def __init__(self, params, shared=True, **block_options):
    super().__init__(name='albert_classifier')
    self.embeddings = Embeddings(params, name='embeddings')
    if shared:
      self.blocks = [Block(params, name='layer_shared', **block_options)
                     ] * legacy.LAYERS
    else:
      self.blocks = [Block(params, name=f'layer_{i}', **block_options)
                     for i in range(legacy.LAYERS)]
    self.pooler = _dense(legacy.HIDDEN, 'pooler', params, activation='tanh')
    # None of the encoder's: only the classifier's dropout, as the legacy.
    self.dropout = layers.Dropout(legacy.CLASSIFIER_DROPOUT)
    self.head = bert_port.Head(name='classifier')

  def call(self, features, training=False):
    x = self.embeddings(features)
    for block in self.blocks:
      x = block(x, features['input_mask'])
    return self.head(self.dropout(self.pooler(x[:, 0]), training=training))


def build_model(params, **options):
  model = Classifier(params, **options)
  model({name: tf.zeros([1, legacy.SEQ], tf.int32)
         for name in legacy.bert_legacy.FEATURES}, training=False)
  return model


class LAMB(bert_port.AdamWeightDecay):
  """LAMB: the BERT port's Adam with decoupled decay, each update scaled by
  ||w|| / ||update|| (1 where either is 0), except for the variables that
  match adapt_exclude. decay_outside: the decay added after the ratio (a
  bug below)."""

  def __init__(self, learning_rate, adapt_exclude=legacy.EXCLUDED,
               decay_outside=False, name='LAMB'):
    super().__init__(learning_rate, weight_decay_rate=legacy.WEIGHT_DECAY,
                     exclude=legacy.EXCLUDED, name=name)
    self.adapt_exclude = tuple(adapt_exclude)
    self.decay_outside = decay_outside

  def build(self, var_list):
    super().build(var_list)
    if getattr(self, 'adapts', None) is None:
      self.adapts = [not any(re.search(p, getattr(v, 'path', v.name))
                             for p in self.adapt_exclude) for v in var_list]

  def scaled(self, update, variable, index):
    if not self.adapts[index]:
      return update
    weights = tf.convert_to_tensor(variable)
    decay = (self.weight_decay_rate * weights
             if self.decay_outside and self.decays[index] else 0.0)
    direction = update - decay
    w_norm, u_norm = tf.norm(weights), tf.norm(direction)
    ratio = tf.where(w_norm > 0.0,
                     tf.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
    return ratio * direction + decay

  def get_config(self):
    return {**super().get_config(), 'adapt_exclude': list(self.adapt_exclude),
            'decay_outside': self.decay_outside}


def _schedule(params):
  return bert_port.WarmupPolynomialDecay(
      params['learning_rate'], params['num_train_steps'],
      params.get('num_warmup_steps', 0))


def make_optimizer(params, **options):
  return LAMB(_schedule(params), **options)


class Trainer(bert_port.Trainer):
  clip_norm = legacy.CLIP_NORM


def make_port() -> port_lib.Port:
  return port_lib.Port(
      build_model=build_model, make_optimizer=make_optimizer,
      trainer_class=Trainer, input_pipeline=bert_port.input_pipeline,
      export=bert_port.export, predict=bert_port.predict)


def _with(build=None, optimizer=None, trainer=None) -> port_lib.Port:
  port = make_port()
  if trainer is not None:
    port = dataclasses.replace(port, trainer_class=type(
        'BuggyTrainer', (Trainer,), trainer))
  if build is not None:
    port = dataclasses.replace(port, build_model=lambda params: build_model(
        params, **build))
  if optimizer is not None:
    port = dataclasses.replace(port, make_optimizer=optimizer)
  return port


# The deliberate bugs, each one line away from the correct port.
def erf_gelu() -> port_lib.Port:
  return _with(build={'activation': bert_port._erf_gelu})  # pylint: disable=protected-access


def adamw_in_lamb_place() -> port_lib.Port:
  return _with(optimizer=lambda params: bert_port.AdamWeightDecay(
      _schedule(params), weight_decay_rate=legacy.WEIGHT_DECAY,
      exclude=legacy.EXCLUDED))


def trust_ratio_on_layer_norm_and_bias() -> port_lib.Port:
  return _with(optimizer=lambda params: make_optimizer(params,
                                                       adapt_exclude=()))


def decay_outside_the_trust_ratio() -> port_lib.Port:
  return _with(optimizer=lambda params: make_optimizer(params,
                                                       decay_outside=True))


def unshared_layers() -> port_lib.Port:
  return _with(build={'shared': False})


def transposed_projection() -> port_lib.Port:
  return _with(build={'transposed': True})


# Clipping engages at no recorded step of the pair (weights of 0.02): the
# clipping check makes a state where it does.
def no_clipping() -> port_lib.Port:
  return _with(trainer={'clip': False})


def clipping_by_the_dense_norm() -> port_lib.Port:
  return _with(trainer={'dense_norm': True})
