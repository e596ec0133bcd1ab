"""The team's port of bert_legacy: a subclassed Keras model, its own Keras
optimizer (Adam without bias correction, decoupled weight decay with
exclusions, warmup then polynomial decay) and a trainer that clips each
replica's gradients as each TPU core did. It runs on Keras 2 (TF 2.15) and
Keras 3. Below it, the deliberate bugs of a BERT port, one function each.
"""
import contextlib
import dataclasses
import io
import math
import os
import re
import tempfile

import tensorflow as tf

import bert_legacy as legacy
import team_trainer
from migration_tools.pair import port as port_lib

layers = tf.keras.layers


def _initializer():
  return tf.keras.initializers.TruncatedNormal(stddev=legacy.INIT_RANGE)


def _dense(units, name, activation=None):
  return layers.Dense(units, activation=activation, name=name,
                      kernel_initializer=_initializer())


def gelu(x):
  return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * tf.pow(x, 3))))


class Embeddings(layers.Layer):
  """Word, segment and position embeddings, layer norm, dropout."""

  def __init__(self, epsilon, **kwargs):
    super().__init__(**kwargs)
    self.norm = layers.LayerNormalization(epsilon=epsilon, name='LayerNorm')
    self.dropout = layers.Dropout(legacy.DROPOUT)

  def build(self, input_shape):
    self.words = self.add_weight(name='word_embeddings',
                                 shape=(legacy.VOCAB, legacy.HIDDEN),
                                 initializer=_initializer())
    self.segments = self.add_weight(name='token_type_embeddings',
                                    shape=(2, legacy.HIDDEN),
                                    initializer=_initializer())
    self.positions = self.add_weight(name='position_embeddings',
                                     shape=(legacy.SEQ, legacy.HIDDEN),
                                     initializer=_initializer())
    super().build(input_shape)

  def call(self, features, training=False):
    x = (tf.gather(self.words, features['input_ids']) +
         tf.gather(self.segments, features['segment_ids']) +
         self.positions[None])
    return self.dropout(self.norm(x), training=training)


class EncoderLayer(layers.Layer):
  """Self-attention and a feed-forward block, each with a residual and a
  layer norm."""

  def __init__(self, epsilon, **kwargs):
    super().__init__(**kwargs)
    self.query = _dense(legacy.HIDDEN, 'query')
    self.key = _dense(legacy.HIDDEN, 'key')
    self.value = _dense(legacy.HIDDEN, 'value')
    self.attention_output = _dense(legacy.HIDDEN, 'attention_output')
    self.attention_norm = layers.LayerNormalization(
        epsilon=epsilon, name='attention_LayerNorm')
    self.intermediate = _dense(legacy.INTERMEDIATE, 'intermediate',
                               activation=gelu)
    self.output_dense = _dense(legacy.HIDDEN, 'output_dense')
    self.output_norm = layers.LayerNormalization(epsilon=epsilon,
                                                 name='output_LayerNorm')
    self.dropouts = [layers.Dropout(legacy.DROPOUT) for _ in range(3)]

  def _heads(self, t):
    size = legacy.HIDDEN // legacy.HEADS
    return tf.transpose(tf.reshape(t, [-1, legacy.SEQ, legacy.HEADS, size]),
                        [0, 2, 1, 3])

  def call(self, x, mask, training=False):
    query, key, value = (self._heads(self.query(x)), self._heads(self.key(x)),
                         self._heads(self.value(x)))
    size = legacy.HIDDEN // legacy.HEADS
    scores = tf.matmul(query, key, transpose_b=True) / math.sqrt(size)
    scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
    probabilities = self.dropouts[0](tf.nn.softmax(scores), training=training)
    context = tf.reshape(
        tf.transpose(tf.matmul(probabilities, value), [0, 2, 1, 3]),
        [-1, legacy.SEQ, legacy.HIDDEN])
    x = self.attention_norm(self.dropouts[1](
        self.attention_output(context), training=training) + x)
    inner = self.intermediate(x)
    return self.output_norm(self.dropouts[2](
        self.output_dense(inner), training=training) + x)


class Head(layers.Layer):
  """The legacy head's weights as they were, [LABELS, HIDDEN], used
  transposed: a Dense kernel would be their transpose, which no variable
  map can pair."""

  def build(self, input_shape):
    self.output_weights = self.add_weight(
        name='output_weights', shape=(legacy.LABELS, legacy.HIDDEN),
        initializer=_initializer())
    self.output_bias = self.add_weight(name='output_bias',
                                       shape=(legacy.LABELS,),
                                       initializer='zeros')
    super().build(input_shape)

  def call(self, pooled):
    return tf.nn.bias_add(tf.matmul(pooled, self.output_weights,
                                    transpose_b=True), self.output_bias)


class Classifier(tf.keras.Model):
  """The encoder, the pooler on the first token and the classifier head;
  takes the legacy input_fn's dict and returns the logits."""

  def __init__(self, epsilon=1e-12, **kwargs):
    super().__init__(**kwargs)
    self.embeddings = Embeddings(epsilon, name='embeddings')
    self.encoder_layers = [EncoderLayer(epsilon, name=f'layer_{i}')
                           for i in range(legacy.LAYERS)]
    self.pooler = _dense(legacy.HIDDEN, 'pooler', activation='tanh')
    self.head_dropout = layers.Dropout(legacy.DROPOUT)
    self.head = Head(name='classifier')

  def call(self, features, training=False):
    x = self.embeddings(features, training=training)
    for layer in self.encoder_layers:
      x = layer(x, features['input_mask'], training=training)
    pooled = self.pooler(x[:, 0])
    return self.head(self.head_dropout(pooled, training=training))


def build_model(params, epsilon=1e-12):
  del params
  model = Classifier(epsilon, name='bert_classifier')
  model({name: tf.zeros([1, legacy.SEQ], tf.int32)
         for name in legacy.FEATURES}, training=False)
  return model


class AdamWeightDecay(tf.keras.optimizers.Optimizer):
  """The legacy optimizer in Keras: Adam without bias correction, with the
  weight decay added to the update, skipped for variables whose name matches
  an exclude pattern. Works on Keras 2.15 and Keras 3."""

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude=(), bias_correction=False,
               name='AdamWeightDecay', **kwargs):
    if hasattr(self, '_build_learning_rate'):  # Keras 2
      super().__init__(name=name, **kwargs)
      self._learning_rate = self._build_learning_rate(learning_rate)
    else:
      super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.exclude, self.bias_correction = tuple(exclude), bias_correction

  def build(self, var_list):
    super().build(var_list)
    if getattr(self, '_slots_built', False):
      return
    self._slots_built = True
    self.adam_m = [self.add_variable_from_reference(v, 'adam_m')
                   for v in var_list]
    self.adam_v = [self.add_variable_from_reference(v, 'adam_v')
                   for v in var_list]
    self.decays = [bool(self.weight_decay_rate) and not any(
        re.search(p, getattr(v, 'path', v.name)) for p in self.exclude)
                   for v in var_list]

  def _index(self, variable):
    if hasattr(self, '_get_variable_index'):  # Keras 3
      return self._get_variable_index(variable)
    return self._index_dict[self._var_key(variable)]  # Keras 2

  def update_step(self, gradient, variable, learning_rate=None):
    if learning_rate is None:  # Keras 2 passes none.
      learning_rate = self.learning_rate
    rate = tf.cast(learning_rate, variable.dtype)
    index = self._index(variable)
    m, v = self.adam_m[index], self.adam_v[index]
    gradient = tf.convert_to_tensor(gradient)
    m.assign(self.beta_1 * tf.convert_to_tensor(m) +
             (1.0 - self.beta_1) * gradient)
    v.assign(self.beta_2 * tf.convert_to_tensor(v) +
             (1.0 - self.beta_2) * tf.square(gradient))
    m_hat, v_hat = tf.convert_to_tensor(m), tf.convert_to_tensor(v)
    if self.bias_correction:
      step = tf.cast(self.iterations + 1, variable.dtype)
      m_hat /= 1.0 - self.beta_1 ** step
      v_hat /= 1.0 - self.beta_2 ** step
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if self.decays[index]:
      update += self.weight_decay_rate * tf.convert_to_tensor(variable)
    variable.assign_sub(rate * self.scaled(update, variable, index))

  def scaled(self, update, variable, index):
    """The update as applied, before the rate: as it is here (a LAMB
    subclass scales it by its trust ratio)."""
    del variable, index
    return update

  def get_config(self):
    return {**super().get_config(), 'weight_decay_rate':
            self.weight_decay_rate, 'beta_1': self.beta_1,
            'beta_2': self.beta_2, 'epsilon': self.epsilon,
            'exclude': list(self.exclude),
            'bias_correction': self.bias_correction}


class WarmupPolynomialDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup to peak over warmup_steps, then the linear decay to 0 at
  train_steps (the legacy learning_rate())."""

  def __init__(self, peak, train_steps, warmup_steps):
    self.peak, self.train_steps, self.warmup_steps = (peak, train_steps,
                                                      warmup_steps)
    self.decay = tf.keras.optimizers.schedules.PolynomialDecay(
        peak, train_steps, end_learning_rate=0.0, power=1.0)

  def __call__(self, step):
    rate = self.decay(step)
    if self.warmup_steps:
      step = tf.cast(step, tf.float32)
      in_warmup = tf.cast(step < self.warmup_steps, tf.float32)
      rate = (1.0 - in_warmup) * rate + in_warmup * (
          self.peak * step / self.warmup_steps)
    return rate

  def get_config(self):
    return {'peak': self.peak, 'train_steps': self.train_steps,
            'warmup_steps': self.warmup_steps}


class DecayAfterTheWarmup(WarmupPolynomialDecay):
  """HF's get_linear_schedule_with_warmup: the linear decay over the steps
  after the warmup, where the legacy one runs over every step from 0 (a
  bug below)."""

  def __init__(self, peak, train_steps, warmup_steps):
    super().__init__(peak, train_steps, warmup_steps)
    self.decay = lambda step: peak * tf.maximum(
        0.0, (train_steps - tf.cast(step, tf.float32)) /
        (train_steps - warmup_steps))


def make_optimizer(params, weight_decay=legacy.WEIGHT_DECAY,
                   exclude=legacy.NO_DECAY, warmup=True,
                   bias_correction=False, schedule_class=WarmupPolynomialDecay):
  schedule = schedule_class(
      params['learning_rate'], params['num_train_steps'],
      params.get('num_warmup_steps', 0) if warmup else 0)
  return AdamWeightDecay(schedule, weight_decay_rate=weight_decay,
                         exclude=exclude, bias_correction=bias_correction)


class Trainer(team_trainer.Trainer):
  """The labels ride in the features; each replica clips the gradients of
  its own mean loss, and the optimizer sums the replicas', as TPU cores and
  CrossShardOptimizer did."""

  clip = True
  clip_norm = legacy.CLIP_NORM
  # A bug when True: an embedding's gradient made dense before the norm, its
  # rows summing their lookups where TF's norm counts each lookup.
  dense_norm = False

  def make_metrics(self):
    return {'eval_accuracy': tf.keras.metrics.SparseCategoricalAccuracy()}

  def per_example_loss(self, labels, outputs):
    return tf.keras.losses.sparse_categorical_crossentropy(
        labels, outputs, from_logits=True)

  def loss_and_gradients(self, features, labels=None):
    del labels  # The input_fn yields none: they are features['label_ids'].
    return super().loss_and_gradients(features, features['label_ids'])

  def train_step(self, features, labels=None):
    per_example, _, gradients = self.loss_and_gradients(features, labels)
    # Of the loss / global batch: times the replicas, of this replica's mean.
    # An embedding's stays IndexedSlices, as in the legacy graph: the global
    # norm counts a repeated token's rows apart, and so must the port's.
    replicas = float(self.strategy.num_replicas_in_sync)
    gradients = [tf.IndexedSlices(g.values * replicas, g.indices,
                                  g.dense_shape)
                 if isinstance(g, tf.IndexedSlices) else g * replicas
                 for g in gradients]
    if self.dense_norm:
      gradients = [tf.convert_to_tensor(g) for g in gradients]
    if self.clip:
      gradients, _ = tf.clip_by_global_norm(gradients, self.clip_norm)
    self.optimizer.apply_gradients(
        zip(gradients, self.model.trainable_variables))
    self.loss.update_state(per_example)

  def eval_step(self, features, labels=None):
    del labels
    super().eval_step(features, features['label_ids'])


def input_pipeline(strategy, params):
  return team_trainer.distribute_records(
      strategy, params['batch_size'],
      os.path.join(params['data_dir'], 'examples.tfrecord'),
      legacy._parse)  # pylint: disable=protected-access


def predict(model, features):
  logits = model(features, training=False)
  return {'probabilities': tf.nn.softmax(logits),
          'label': tf.argmax(logits, -1, output_type=tf.int32)}


_SERVING_SIGNATURE = [tf.TensorSpec([None, legacy.SEQ], tf.int32, name=name)
                      for name in legacy.FEATURES[:3]]


def export(model, base_dir, strategy):
  """A SavedModel whose serving_default takes the legacy receiver's three
  int32 inputs by name. Through ExportArchive (Keras 2.13+ and Keras 3): a
  subclassed Keras 3 model saved with tf.saved_model.save traces a default
  signature of float32 inputs of its own, which its int32 ids refuse."""
  del strategy
  archive = tf.keras.export.ExportArchive()
  archive.track(model)

  def serve(input_ids, input_mask, segment_ids):
    return predict(model, {'input_ids': input_ids, 'input_mask': input_mask,
                           'segment_ids': segment_ids})

  archive.add_endpoint('serving_default', serve, _SERVING_SIGNATURE)
  os.makedirs(base_dir, exist_ok=True)
  path = tempfile.mkdtemp(dir=base_dir)
  with contextlib.redirect_stdout(io.StringIO()):  # It lists the endpoint.
    archive.write_out(path)
  return path


def make_port() -> port_lib.Port:
  return port_lib.Port(
      build_model=build_model, make_optimizer=make_optimizer,
      trainer_class=Trainer, input_pipeline=input_pipeline, export=export,
      predict=predict)


class _PerReplicaMean(Trainer):
  """Correct too, written as a team would from BERT's own code: each
  replica's loss is the mean over its own examples, and the optimizer takes
  the replicas' sum of their clipped gradients as they are (2x the mean
  gradient on 2 replicas, as on 2 TPU cores)."""

  def scaled_loss(self, per_example):
    return tf.reduce_mean(per_example)

  def train_step(self, features, labels=None):
    per_example, _, gradients = self.loss_and_gradients(features, labels)
    if self.clip:
      gradients, _ = tf.clip_by_global_norm(gradients, self.clip_norm)
    self.optimizer.apply_gradients(
        zip(gradients, self.model.trainable_variables))
    self.loss.update_state(per_example)


def per_replica_mean() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_PerReplicaMean)


# The deliberate bugs, each one line away from the correct port.
def no_weight_decay() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, weight_decay=0.0)))


def decay_on_layer_norm_and_bias() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, exclude=())))


class _Unclipped(Trainer):
  clip = False


def no_clipping() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_Unclipped)


def layer_norm_epsilon_1e_6() -> port_lib.Port:
  return dataclasses.replace(make_port(), build_model=lambda params: (
      build_model(params, epsilon=1e-6)))


def no_warmup() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, warmup=False)))


def decay_after_the_warmup() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, schedule_class=DecayAfterTheWarmup)))


def _erf_gelu(x):
  return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def erf_gelu() -> port_lib.Port:
  """The exact GELU in place of the model's tanh approximation: the two part
  by 3e-8 at |x| = 0.1, 2.5e-6 at 0.3, and up to 4.7e-4 near 2.7."""
  def build(params):
    model = build_model(params)
    for layer in model.encoder_layers:
      layer.intermediate.activation = _erf_gelu
    return model
  return dataclasses.replace(make_port(), build_model=build)


def bias_corrected_adam() -> port_lib.Port:
  return dataclasses.replace(make_port(), make_optimizer=lambda params: (
      make_optimizer(params, bias_correction=True)))


# What a TPU refuses (the tpu_ready check), one function each: ports that
# train and match on a CPU, and would not compile for a TPU.
def remainder_kept() -> port_lib.Port:
  """The last, smaller batch is kept: the batch dimension is unknown."""
  def input_pipeline_with_remainder(strategy, params):
    def dataset_fn(context):
      batch = context.get_per_replica_batch_size(params['batch_size'])
      return tf.data.TFRecordDataset(
          os.path.join(params['data_dir'], 'examples.tfrecord')).map(
              legacy._parse).batch(batch)  # pylint: disable=protected-access
    return strategy.distribute_datasets_from_function(dataset_fn)
  return dataclasses.replace(make_port(),
                             input_pipeline=input_pipeline_with_remainder)


class _IdsCleanedInPython(Trainer):
  """Out-of-vocabulary ids mapped to 0 by numpy, inside the step."""

  def outputs(self, features, training):
    def clean(ids):
      ids = ids.numpy()
      return ids * (ids < legacy.VOCAB)
    with tf.name_scope('clean_ids'):
      ids = tf.py_function(clean, [features['input_ids']], tf.int32)
    ids.set_shape(features['input_ids'].shape)
    return super().outputs({**features, 'input_ids': ids}, training)


def py_function_in_the_step() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_IdsCleanedInPython)


class _HashedSegments(Trainer):
  """Segment ids hashed from their text form (feature hashing), in the
  step."""

  def outputs(self, features, training):
    with tf.name_scope('hash_segments'):
      segments = tf.strings.to_hash_bucket_fast(
          tf.strings.as_string(features['segment_ids']), 2)
    return super().outputs(
        {**features, 'segment_ids': tf.cast(segments, tf.int32)}, training)


def string_op_in_the_step() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_HashedSegments)


class _LossOverLabelledOnly(Trainer):
  """Examples whose label is negative (unlabelled) dropped from the loss."""

  def per_example_loss(self, labels, outputs):
    labelled = labels >= 0
    return super().per_example_loss(tf.boolean_mask(labels, labelled),
                                    tf.boolean_mask(outputs, labelled))


def boolean_mask_in_the_step() -> port_lib.Port:
  return dataclasses.replace(make_port(), trainer_class=_LossOverLabelledOnly)
