"""Legacy pair (d): a BERT-shaped TPUEstimator classifier, written here for the
tests in the style of the TPU-era fine-tuning code (not copied from it).

- A small transformer encoder: word, segment and position embeddings made
  with get_variable, a hand-written layer norm (epsilon 1e-12, variables
  LayerNorm/gamma and LayerNorm/beta), self-attention with an additive mask,
  a tanh-approximated GELU, a pooler on the first token, a classifier head.
- int32 dict features with the labels inside them (the input_fn yields no
  labels): input_ids, input_mask, segment_ids, label_ids.
- Its own optimizer, a tf.compat.v1.train.Optimizer subclass: Adam without
  bias correction, decoupled weight decay that skips LayerNorm and bias
  variables, slots named <variable>/adam_m and <variable>/adam_v, a linear
  warmup then a polynomial decay.
- Gradients taken in the model_fn (tf.gradients) and clipped by their global
  norm before the optimizer applies them (at 0.05, not BERT's 1.0: this
  small model's gradients, about 0.07, must exceed it); the global step
  advanced by hand.
- A warm start from params['init_checkpoint'] in a scaffold_fn, as on TPU.
"""
# migration-scan: skip-file (legacy code on purpose)
import math
import os
import re

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1

VOCAB, SEQ, HIDDEN, HEADS, LAYERS, INTERMEDIATE, LABELS = 40, 8, 16, 2, 2, 32, 3
INIT_RANGE = 0.02
DROPOUT = 0.1
CLIP_NORM = 0.05
WEIGHT_DECAY = 0.01
NO_DECAY = ('LayerNorm', 'layer_norm', 'bias')
FEATURES = ('input_ids', 'input_mask', 'segment_ids', 'label_ids')


def write_data(data_dir: str, examples: int = 256, seed: int = 0,
               pretrained: bool = True) -> None:
  """examples.tfrecord: token sequences padded to SEQ, a label that depends
  on the tokens (so training moves the loss); and, if pretrained,
  pretrained/model.ckpt, the encoder's 'pretrained' weights the classifier
  warm-starts from (written with tf.compat.v1.layers: not on Keras 3)."""
  if pretrained:
    os.makedirs(os.path.join(data_dir, 'pretrained'), exist_ok=True)
    write_pretrained(os.path.join(data_dir, 'pretrained', 'model.ckpt'))
  rng = np.random.default_rng(seed)
  with tf.io.TFRecordWriter(os.path.join(data_dir,
                                         'examples.tfrecord')) as writer:
    for _ in range(examples):
      length = int(rng.integers(3, SEQ + 1))
      ids = [1] + [int(t) for t in rng.integers(3, VOCAB, length - 1)]
      mask = [1] * length + [0] * (SEQ - length)
      ids += [0] * (SEQ - length)
      segments = [0] * (length // 2) + [1] * (SEQ - length // 2)
      values = {'input_ids': ids, 'input_mask': mask, 'segment_ids': segments,
                'label_ids': [sum(ids) % LABELS]}
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                 for k, v in values.items()}
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def _parse(record):
  parsed = tf.io.parse_single_example(record, {
      'input_ids': tf.io.FixedLenFeature([SEQ], tf.int64),
      'input_mask': tf.io.FixedLenFeature([SEQ], tf.int64),
      'segment_ids': tf.io.FixedLenFeature([SEQ], tf.int64),
      'label_ids': tf.io.FixedLenFeature([], tf.int64)})
  # int32 on TPU: it has no int64 ops.
  return {k: tf.cast(v, tf.int32) for k, v in parsed.items()}


def input_fn(params):
  dataset = tf.data.TFRecordDataset(os.path.join(params['data_dir'],
                                                 'examples.tfrecord'))
  return dataset.map(_parse).batch(params['batch_size'], drop_remainder=True)


def _initializer():
  return v1.truncated_normal_initializer(stddev=INIT_RANGE)


def layer_norm(x, epsilon=1e-12, name='LayerNorm'):
  with v1.variable_scope(name):
    gamma = v1.get_variable('gamma', [HIDDEN], initializer=v1.ones_initializer())
    beta = v1.get_variable('beta', [HIDDEN], initializer=v1.zeros_initializer())
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


def dropout(x, training):
  return v1.nn.dropout(x, rate=DROPOUT) if training else x


def gelu(x):
  return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * tf.pow(x, 3))))


def dense(x, units, name, activation=None):
  return v1.layers.dense(x, units, activation=activation, name=name,
                         kernel_initializer=_initializer())


def embeddings(features, training, epsilon):
  with v1.variable_scope('embeddings'):
    words = v1.get_variable('word_embeddings', [VOCAB, HIDDEN],
                            initializer=_initializer())
    segments = v1.get_variable('token_type_embeddings', [2, HIDDEN],
                               initializer=_initializer())
    positions = v1.get_variable('position_embeddings', [SEQ, HIDDEN],
                                initializer=_initializer())
    x = (tf.gather(words, features['input_ids']) +
         tf.gather(segments, features['segment_ids']) + positions[None])
    return dropout(layer_norm(x, epsilon), training)


def attention(x, mask, training):
  """Self-attention over [batch, SEQ, HIDDEN], heads split by reshaping."""
  size = HIDDEN // HEADS

  def heads(t):
    return tf.transpose(tf.reshape(t, [-1, SEQ, HEADS, size]), [0, 2, 1, 3])

  with v1.variable_scope('self'):
    query = heads(dense(x, HIDDEN, 'query'))
    key = heads(dense(x, HIDDEN, 'key'))
    value = heads(dense(x, HIDDEN, 'value'))
  scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(size)
  scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
  probabilities = dropout(tf.nn.softmax(scores), training)
  context = tf.transpose(tf.matmul(probabilities, value), [0, 2, 1, 3])
  return tf.reshape(context, [-1, SEQ, HIDDEN])


def encoder_layer(x, mask, training, epsilon):
  with v1.variable_scope('attention'):
    context = attention(x, mask, training)
    with v1.variable_scope('output'):
      x = layer_norm(dropout(dense(context, HIDDEN, 'dense'), training) + x,
                     epsilon)
  with v1.variable_scope('intermediate'):
    inner = dense(x, INTERMEDIATE, 'dense', activation=gelu)
  with v1.variable_scope('output'):
    return layer_norm(dropout(dense(inner, HIDDEN, 'dense'), training) + x,
                      epsilon)


def encoder(features, training, epsilon=1e-12):
  """The pooled output [batch, HIDDEN]."""
  with v1.variable_scope('bert'):
    x = embeddings(features, training, epsilon)
    with v1.variable_scope('encoder'):
      for index in range(LAYERS):
        with v1.variable_scope(f'layer_{index}'):
          x = encoder_layer(x, features['input_mask'], training, epsilon)
    with v1.variable_scope('pooler'):
      return dense(x[:, 0], HIDDEN, 'dense', activation=tf.tanh)


def classifier(pooled, training):
  weights = v1.get_variable('output_weights', [LABELS, HIDDEN],
                            initializer=_initializer())
  bias = v1.get_variable('output_bias', [LABELS],
                         initializer=v1.zeros_initializer())
  return tf.nn.bias_add(tf.matmul(dropout(pooled, training), weights,
                                  transpose_b=True), bias)


class AdamWeightDecayOptimizer(v1.train.Optimizer):
  """Adam without bias correction, with weight decay added to the update
  (not to the loss), skipped for variables whose name matches exclude."""

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude=(),
               name='AdamWeightDecayOptimizer'):
    super().__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.exclude = exclude

  def _decays(self, name):
    return self.weight_decay_rate and not any(
        re.search(pattern, name) for pattern in self.exclude)

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    updates = []
    for grad, param in grads_and_vars:
      if grad is None:
        continue
      name_ = param.op.name
      grad = tf.convert_to_tensor(grad)  # An embedding's is IndexedSlices.
      m = v1.get_variable(f'{name_}/adam_m', param.shape, tf.float32,
                          trainable=False, initializer=v1.zeros_initializer())
      v = v1.get_variable(f'{name_}/adam_v', param.shape, tf.float32,
                          trainable=False, initializer=v1.zeros_initializer())
      next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
      next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
      update = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self._decays(name_):
        update += self.weight_decay_rate * param
      updates += [param.assign(param - self.learning_rate * self._scaled(
          update, param)), m.assign(next_m), v.assign(next_v)]
    return tf.group(*updates, name=name)

  def _scaled(self, update, param):
    """The update as applied, before the rate (LAMB scales it)."""
    del param
    return update


def learning_rate(params, global_step):
  """Linear warmup to params['learning_rate'] over num_warmup_steps, then a
  linear decay to 0 at num_train_steps."""
  peak = params['learning_rate']
  rate = v1.train.polynomial_decay(peak, global_step,
                                   params['num_train_steps'],
                                   end_learning_rate=0.0, power=1.0)
  warmup = params.get('num_warmup_steps', 0)
  if warmup:
    step = tf.cast(global_step, tf.float32)
    in_warmup = tf.cast(step < warmup, tf.float32)
    rate = (1.0 - in_warmup) * rate + in_warmup * (peak * step / warmup)
  return rate


def _adam_weight_decay(rate):
  return AdamWeightDecayOptimizer(rate, weight_decay_rate=WEIGHT_DECAY,
                                  exclude=NO_DECAY)


def train_op_of(loss, params, make_optimizer=_adam_weight_decay,
                clip_norm=CLIP_NORM):
  """BERT's: the gradients taken and clipped here, then applied by the
  optimizer make_optimizer(rate) makes (on a TPU, CrossShardOptimizer's)."""
  global_step = v1.train.get_or_create_global_step()
  optimizer = make_optimizer(learning_rate(params, global_step))
  if params['use_tpu']:
    optimizer = v1.tpu.CrossShardOptimizer(optimizer)
  variables = v1.trainable_variables()
  grads, _ = tf.clip_by_global_norm(tf.gradients(loss, variables),
                                    clip_norm=clip_norm)
  apply = optimizer.apply_gradients(zip(grads, variables), global_step)
  with tf.control_dependencies([apply]):
    return global_step.assign_add(1)


def warm_start(init_checkpoint):
  """{checkpoint name: variable} of the trainable variables the checkpoint
  holds, loaded by init_from_checkpoint."""
  names = {name for name, _ in tf.train.list_variables(init_checkpoint)}
  assignment = {v.op.name: v.op.name for v in v1.trainable_variables()
                if v.op.name in names}
  v1.train.init_from_checkpoint(init_checkpoint, assignment)


def metric_fn(label_ids, logits):
  return {'eval_accuracy': v1.metrics.accuracy(label_ids,
                                               tf.argmax(logits, -1))}


def model_fn_builder(epsilon=1e-12):
  """The model_fn, as BERT's builder makes it from its configuration."""

  def model_fn(features, labels, mode, params):
    del labels  # In the features, as BERT's input_fn yields them.
    training = mode == v1.estimator.ModeKeys.TRAIN
    logits = classifier(encoder(features, training, epsilon), training)
    def tpu_scaffold():
      warm_start(params['init_checkpoint'])
      return v1.train.Scaffold()

    # On TPU the warm start runs in the scaffold_fn, on the host.
    scaffold_fn = tpu_scaffold if params.get('init_checkpoint') else None
    if mode == v1.estimator.ModeKeys.PREDICT:
      return v1.estimator.tpu.TPUEstimatorSpec(
          mode, predictions={'probabilities': tf.nn.softmax(logits),
                             'label': tf.argmax(logits, -1, tf.int32)},
          scaffold_fn=scaffold_fn)
    one_hot = tf.one_hot(features['label_ids'], LABELS)
    per_example = -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits), -1)
    loss = tf.reduce_mean(per_example)
    if mode == v1.estimator.ModeKeys.EVAL:
      return v1.estimator.tpu.TPUEstimatorSpec(
          mode, loss=loss, scaffold_fn=scaffold_fn,
          eval_metrics=(metric_fn, [features['label_ids'], logits]))
    return v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=train_op_of(loss, params),
        scaffold_fn=scaffold_fn)

  return model_fn


model_fn = model_fn_builder()


def serving_input_receiver_fn():
  inputs = {name: v1.placeholder(tf.int32, [None, SEQ], name=name)
            for name in FEATURES[:3]}
  return v1.estimator.export.ServingInputReceiver(inputs, inputs)


def write_pretrained(path: str, seed: int = 1) -> str:
  """A 'pretrained' checkpoint of the encoder alone (no classifier), as a
  team's init_checkpoint; returns its prefix."""
  with tf.Graph().as_default():
    v1.set_random_seed(seed)
    features = {name: v1.placeholder(tf.int32, [None, SEQ])
                for name in FEATURES[:3]}
    encoder(features, training=False)
    saver = v1.train.Saver()
    with v1.Session() as session:
      session.run(v1.global_variables_initializer())
      return saver.save(session, path)
