"""An ALBERT-style TPUEstimator classifier, written for the tests: what sets
ALBERT apart from BERT, in a small model.

- A factorised embedding: tokens embedded in EMBED < HIDDEN dimensions, then
  projected (embedding_hidden_mapping_in).
- One transformer block whose variables every layer shares (LAYERS calls of
  the same variable scope, reuse=tf.compat.v1.AUTO_REUSE).
- A tanh-approximated GELU.
- Its own LAMB optimizer, a tf.compat.v1.train.Optimizer subclass: Adam's
  moments without bias correction, the weight decay added to the update, and
  the update scaled per variable by the trust ratio ||w|| / ||update||;
  LayerNorm and bias excluded from both the decay and the layer adaptation.
- Gradients taken in the model_fn (tf.gradients), clipped by global norm.
- params['init_range']: the initializers' standard deviation (0.02 as
  ALBERT's; the tests also start from 0.3, weights of a trained scale).
- No dropout in the encoder (ALBERT v2's configurations train without it),
  but run_classifier's on the pooled output before the classifier (rate
  0.1), in training only.

The examples and the input_fn are the BERT-shaped pair's (bert_legacy).
"""
# migration-scan: skip-file (legacy code, kept as the team wrote it)
import math

import tensorflow as tf

import bert_legacy
from bert_legacy import input_fn  # pylint: disable=unused-import
from bert_legacy import serving_input_receiver_fn  # pylint: disable=unused-import
from bert_legacy import write_data as _write_data

v1 = tf.compat.v1

VOCAB, SEQ, LABELS = bert_legacy.VOCAB, bert_legacy.SEQ, bert_legacy.LABELS
EMBED, HIDDEN, HEADS, LAYERS, INTERMEDIATE = 8, 16, 2, 3, 32
CLIP_NORM = 1.0
CLASSIFIER_DROPOUT = 0.1
WEIGHT_DECAY = 0.01
EXCLUDED = ('LayerNorm', 'layer_norm', 'bias')


def write_data(data_dir: str, examples: int = 256, seed: int = 0) -> None:
  _write_data(data_dir, examples, seed, pretrained=False)


def _initializer(params):
  return v1.truncated_normal_initializer(stddev=params.get('init_range',
                                                           0.02))


def gelu(x):
  return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * tf.pow(x, 3))))


def layer_norm(x, name='LayerNorm'):
  size = x.shape[-1]
  with v1.variable_scope(name):
    gamma = v1.get_variable('gamma', [size], initializer=v1.ones_initializer())
    beta = v1.get_variable('beta', [size], initializer=v1.zeros_initializer())
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-12)


def dense(x, units, name, params, activation=None):
  return v1.layers.dense(x, units, activation=activation, name=name,
                         kernel_initializer=_initializer(params))


def embeddings(features, params):
  """The factorised embedding: EMBED-wide tables, a layer norm, then the
  projection to HIDDEN."""
  with v1.variable_scope('embeddings'):
    tables = [v1.get_variable(name, [rows, EMBED],
                              initializer=_initializer(params))
              for name, rows in (('word_embeddings', VOCAB),
                                 ('token_type_embeddings', 2),
                                 ('position_embeddings', SEQ))]
    x = (tf.gather(tables[0], features['input_ids']) +
         tf.gather(tables[1], features['segment_ids']) + tables[2][None])
    x = layer_norm(x)
  with v1.variable_scope('encoder'):
    return dense(x, HIDDEN, 'embedding_hidden_mapping_in', params)


def shared_block(x, mask, params):
  """One layer; every call reads the same variables."""
  size = HIDDEN // HEADS

  def heads(t):
    return tf.transpose(tf.reshape(t, [-1, SEQ, HEADS, size]), [0, 2, 1, 3])

  with v1.variable_scope('transformer/layer_shared', reuse=v1.AUTO_REUSE):
    with v1.variable_scope('attention'):
      query, key, value = (heads(dense(x, HIDDEN, part, params))
                           for part in ('query', 'key', 'value'))
      scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(size)
      scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
      context = tf.reshape(tf.transpose(
          tf.matmul(tf.nn.softmax(scores), value), [0, 2, 1, 3]),
                           [-1, SEQ, HIDDEN])
      x = layer_norm(dense(context, HIDDEN, 'output', params) + x)
    inner = dense(x, INTERMEDIATE, 'ffn', params, activation=gelu)
    return layer_norm(dense(inner, HIDDEN, 'ffn_output', params) + x,
                      'output_LayerNorm')


def classifier(features, params, training=False):
  with v1.variable_scope('albert'):
    x = embeddings(features, params)
    with v1.variable_scope('encoder'):
      for _ in range(LAYERS):
        x = shared_block(x, features['input_mask'], params)
    pooled = dense(x[:, 0], HIDDEN, 'pooler', params, activation=tf.tanh)
  if training:
    pooled = tf.nn.dropout(pooled, rate=CLASSIFIER_DROPOUT)
  weights = v1.get_variable('output_weights', [LABELS, HIDDEN],
                            initializer=_initializer(params))
  bias = v1.get_variable('output_bias', [LABELS],
                         initializer=v1.zeros_initializer())
  return tf.nn.bias_add(tf.matmul(pooled, weights, transpose_b=True), bias)


class LAMBOptimizer(bert_legacy.AdamWeightDecayOptimizer):
  """LAMB as ALBERT's code applies it: BERT's Adam (moments without bias
  correction, the weight decay added to the update), then the update of
  each variable scaled by ||w|| / ||update|| (1 where either is 0); the
  excluded variables take neither the decay nor the ratio."""

  def __init__(self, learning_rate, name='LAMBOptimizer'):
    super().__init__(learning_rate, weight_decay_rate=WEIGHT_DECAY,
                     exclude=EXCLUDED, name=name)

  def _scaled(self, update, param):
    if not self._decays(param.op.name):  # Excluded from both.
      return update
    w_norm, u_norm = tf.norm(param), tf.norm(update)
    return update * tf.where(w_norm > 0.0,
                             tf.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)


def model_fn(features, labels, mode, params):
  del labels  # In the features, as BERT's input_fn yields them.
  logits = classifier(features, params,
                      training=mode == v1.estimator.ModeKeys.TRAIN)
  spec = v1.estimator.tpu.TPUEstimatorSpec
  if mode == v1.estimator.ModeKeys.PREDICT:
    return spec(mode, predictions={
        'probabilities': tf.nn.softmax(logits),
        'label': tf.argmax(logits, -1, tf.int32)})
  one_hot = tf.one_hot(features['label_ids'], LABELS)
  loss = tf.reduce_mean(-tf.reduce_sum(one_hot * tf.nn.log_softmax(logits),
                                       -1))
  if mode == v1.estimator.ModeKeys.EVAL:
    return spec(mode, loss=loss, eval_metrics=(
        bert_legacy.metric_fn, [features['label_ids'], logits]))
  return spec(mode, loss=loss, train_op=bert_legacy.train_op_of(
      loss, params, LAMBOptimizer, CLIP_NORM))
