"""The team's port of bert_legacy to plain JAX: the encoder as functions of a
dict of arrays named as the model_fn names its variables, its own
AdamWeightDecay (no bias correction, decoupled weight decay that skips
LayerNorm and bias), the warmup and polynomial decay, and each replica
clipping the gradients of its own mean loss by their global norm before the
replicas' are summed, as each TPU core did under CrossShardOptimizer.

It imports nothing of TensorFlow or of bert_legacy (which needs it): the
constants are written again here, as a team's JAX code has its own config.
Checked against the bundle TF 2.15 recorded of bert_legacy:

  migration-compare --bundle=bert.npz --port=bert_jax_port:make_port

Below it, the seven deliberate bugs of bert_port.py, on JAX.
"""
import dataclasses
import functools
import json
import math
import os
import re
import tempfile

import numpy as np

from migration_tools.pair import array_port

VOCAB, SEQ, HIDDEN, HEADS, LAYERS, INTERMEDIATE, LABELS = 40, 8, 16, 2, 2, 32, 3
CLIP_NORM = 0.05
WEIGHT_DECAY = 0.01
DROPOUT = 0.1
NO_DECAY = ('LayerNorm', 'layer_norm', 'bias')
INPUTS = ('input_ids', 'input_mask', 'segment_ids')
WORDS = 'bert/embeddings/word_embeddings'
SEGMENTS = 'bert/embeddings/token_type_embeddings'


def _names() -> list[tuple[str, tuple]]:
  """The model_fn's trainable variables, in its order, with their shapes."""
  def dense(scope, units_in, units):
    return [(f'{scope}/kernel', (units_in, units)), (f'{scope}/bias', (units,))]

  def norm(scope):
    return [(f'{scope}/gamma', (HIDDEN,)), (f'{scope}/beta', (HIDDEN,))]

  names = [(WORDS, (VOCAB, HIDDEN)), (SEGMENTS, (2, HIDDEN)),
           ('bert/embeddings/position_embeddings', (SEQ, HIDDEN)),
           *norm('bert/embeddings/LayerNorm')]
  for index in range(LAYERS):
    layer = f'bert/encoder/layer_{index}'
    for part in ('query', 'key', 'value'):
      names += dense(f'{layer}/attention/self/{part}', HIDDEN, HIDDEN)
    names += dense(f'{layer}/attention/output/dense', HIDDEN, HIDDEN)
    names += norm(f'{layer}/attention/output/LayerNorm')
    names += dense(f'{layer}/intermediate/dense', HIDDEN, INTERMEDIATE)
    names += dense(f'{layer}/output/dense', INTERMEDIATE, HIDDEN)
    names += norm(f'{layer}/output/LayerNorm')
  names += dense('bert/pooler/dense', HIDDEN, HIDDEN)
  return names + [('output_weights', (LABELS, HIDDEN)),
                  ('output_bias', (LABELS,))]


NAMES = _names()


@dataclasses.dataclass(frozen=True)
class Config:
  """What the port's code decides; the bugs below change one field each."""
  epsilon: float = 1e-12
  weight_decay: float = WEIGHT_DECAY
  exclude: tuple = NO_DECAY
  clip: bool = True
  warmup: bool = True
  bias_correction: bool = False
  beta_1: float = 0.9
  beta_2: float = 0.999
  adam_epsilon: float = 1e-6
  exact_gelu: bool = False


def _layer_norm(jnp, x, params, scope, epsilon, taps):
  """tf.nn.moments and tf.nn.batch_normalization's arithmetic."""
  mean = jnp.mean(x, -1, keepdims=True)
  variance = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
  inverse = (1.0 / jnp.sqrt(variance + epsilon)) * params[f'{scope}/gamma']
  y = x * inverse + (params[f'{scope}/beta'] - mean * inverse)
  taps[scope] = y
  return y


def _dense(jnp, x, params, scope, taps, activation=None):
  y = x @ params[f'{scope}/kernel'] + params[f'{scope}/bias']
  y = activation(y) if activation else y
  taps[scope] = y
  return y


def _gelu(jnp, x, exact=False):
  if exact:  # The erf form: the bug below.
    import jax  # pylint: disable=g-import-not-at-top
    return 0.5 * x * (1.0 + jax.scipy.special.erf(x / math.sqrt(2.0)))
  return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2 / math.pi) *
                                   (x + 0.044715 * jnp.power(x, 3))))


class Dropout:
  """BERT's dropout in training: each call draws its own mask of kept
  units (jax.random.bernoulli, a key folded per call) and scales the kept
  by 1 / keep."""

  def __init__(self, key, rate: float = DROPOUT):
    self.key, self.rate, self.calls = key, rate, 0

  def __call__(self, x):
    import jax  # pylint: disable=g-import-not-at-top
    self.calls += 1
    keep = 1.0 - self.rate
    kept = jax.random.bernoulli(jax.random.fold_in(self.key, self.calls),
                                keep, x.shape)
    return jax.numpy.where(kept, x / keep, 0.0)


def forward(params: dict, words, segments, mask, epsilon: float,
            taps: dict | None = None, exact_gelu: bool = False,
            dropout=None):
  """The logits from the rows of the two embedding tables already looked
  up (words, segments: [batch, SEQ, HIDDEN]); taps gets each layer's
  output by its variables' scope; dropout: a Dropout in training, None
  at inference."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  taps = {} if taps is None else taps
  drop = dropout or (lambda x: x)
  x = words + segments + params['bert/embeddings/position_embeddings'][None]
  x = _layer_norm(jnp, x, params, 'bert/embeddings/LayerNorm', epsilon, taps)
  x = drop(x)
  taps['bert/embeddings'] = x  # Its dropout's output.
  size = HIDDEN // HEADS
  additive = (1.0 - mask[:, None, None, :].astype(jnp.float32)) * -10000.0
  for index in range(LAYERS):
    layer = f'bert/encoder/layer_{index}'

    def heads(t):
      return jnp.transpose(t.reshape(-1, SEQ, HEADS, size), (0, 2, 1, 3))

    query, key, value = (heads(_dense(
        jnp, x, params, f'{layer}/attention/self/{part}', taps))
                         for part in ('query', 'key', 'value'))
    scores = query @ jnp.swapaxes(key, -1, -2) / math.sqrt(size) + additive
    probabilities = jnp.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    probabilities = drop(probabilities)
    context = jnp.transpose(probabilities @ value, (0, 2, 1, 3)).reshape(
        -1, SEQ, HIDDEN)
    attended = drop(_dense(jnp, context, params,
                           f'{layer}/attention/output/dense', taps))
    x = _layer_norm(jnp, attended + x, params,
                    f'{layer}/attention/output/LayerNorm', epsilon, taps)
    inner = _dense(jnp, x, params, f'{layer}/intermediate/dense', taps,
                   functools.partial(_gelu, jnp, exact=exact_gelu))
    out = drop(_dense(jnp, inner, params, f'{layer}/output/dense', taps))
    x = _layer_norm(jnp, out + x, params, f'{layer}/output/LayerNorm',
                    epsilon, taps)
  pooled = _dense(jnp, x[:, 0], params, 'bert/pooler/dense', taps, jnp.tanh)
  return drop(pooled) @ params['output_weights'].T + params['output_bias']


def per_example_loss(logits, labels):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  one_hot = jax.nn.one_hot(labels, LABELS)
  return -jnp.sum(one_hot * jax.nn.log_softmax(logits), -1)


def learning_rate(params: dict, step: int, warmup: bool) -> np.float32:
  """The legacy learning_rate() in float32, as TF computes it."""
  f32 = np.float32
  peak, decay_steps = f32(params['learning_rate']), f32(
      params['num_train_steps'])
  done = f32(min(step, params['num_train_steps'])) / decay_steps
  rate = (peak - f32(0)) * (f32(1) - done) ** f32(1) + f32(0)
  steps = params.get('num_warmup_steps', 0) if warmup else 0
  if steps:
    in_warmup = f32(step < steps)
    rate = (f32(1) - in_warmup) * rate + in_warmup * (
        peak * f32(step) / f32(steps))
  return f32(rate)


class NamedArrays:
  """The arrays side of an ArrayModel whose weights are {name: array} and
  whose Adam-style slots are {(name, 'adam_m' or 'adam_v'): array}, in the
  order of `names` ([(name, shape)]); its own optimizer, compared by what it
  does."""

  names: list = []

  def _start(self) -> None:
    """Weights of stddev 0.02 (seed 0), zero slots, no step taken."""
    rng = np.random.default_rng(0)
    self.weights = {name: (0.02 * rng.standard_normal(shape)).astype(
        np.float32) for name, shape in self.names}
    self.adam = {(name, slot): np.zeros(shape, np.float32)
                 for slot in ('adam_m', 'adam_v')
                 for name, shape in self.names}
    self.steps, self._rate = 0, 0.0

  def variables(self) -> dict[str, np.ndarray]:
    return {name: np.asarray(self.weights[name]) for name, _ in self.names}

  def trainable(self) -> list[str]:
    return [name for name, _ in self.names]

  def set_variables(self, values: dict[str, np.ndarray]) -> None:
    self.weights.update({k: np.asarray(v, np.float32)
                         for k, v in values.items()})

  def slots(self) -> dict:
    return {k: np.asarray(v) for k, v in self.adam.items()}

  def set_slots(self, values: dict) -> None:
    self.adam.update({k: np.asarray(v, np.float32) for k, v in values.items()})

  def step_count(self) -> int:
    return self.steps

  def set_step_count(self, step: int) -> None:
    self.steps = step

  def describe_optimizer(self):
    return None  # Its own optimizer: compared by what it does.

  def learning_rate(self) -> float:
    return self._rate


class BertJaxModel(NamedArrays):
  """The port on `replicas` devices, as an ArrayModel."""

  names = NAMES

  def __init__(self, params: dict, replicas: int, dropout: bool,
               config: Config = Config()):
    import jax  # pylint: disable=g-import-not-at-top
    # The harness asks for dropout off but in its dropout check.
    self.dropout = dropout
    self._jax, self.config, self.params = jax, config, params
    self.replicas = replicas
    self._mesh = jax.sharding.Mesh(np.array(array_port.replica_devices(replicas)),
                                   ('batch',))
    self._batch = jax.sharding.NamedSharding(
        self._mesh, jax.sharding.PartitionSpec('batch'))
    self._start()
    self._decays = {name: bool(config.weight_decay) and not any(
        re.search(p, name) for p in config.exclude) for name, _ in NAMES}

  def learning_rate_at(self, step: int) -> float:
    return float(learning_rate(self.params, step, self.config.warmup))

  # The step --------------------------------------------------------------

  def _replica_gradients(self, weights, batch, key):
    """One replica's loss, the gradients of its own mean loss, and those
    clipped by their global norm, the embedding rows' gradients counted per
    occurrence in it, as TF's IndexedSlices are."""
    jax, jnp = self._jax, self._jax.numpy
    ids, segment_ids = batch['input_ids'], batch['segment_ids']
    rest = {k: v for k, v in weights.items() if k not in (WORDS, SEGMENTS)}

    def loss_of(rest, words, segments):
      # The step keeps tanh GELU: erf inside its shard_map raises on JAX
      # 0.12 ("Primitive polynomial requires varying manual axes to
      # match"); the bug shows in the predictions, where beyond_init sees it.
      logits = forward(rest, words, segments, batch['input_mask'],
                       self.config.epsilon,
                       dropout=Dropout(key) if self.dropout else None)
      return jnp.mean(per_example_loss(logits, batch['label_ids']))

    loss, (grads, words, segments) = jax.value_and_grad(
        loss_of, argnums=(0, 1, 2))(rest, weights[WORDS][ids],
                                    weights[SEGMENTS][segment_ids])
    grads[WORDS] = jnp.zeros_like(weights[WORDS]).at[ids].add(words)
    grads[SEGMENTS] = jnp.zeros_like(weights[SEGMENTS]).at[segment_ids].add(
        segments)
    scale = 1.0
    if self.config.clip:
      squares = [jnp.sum(jnp.square(g)) for k, g in grads.items()
                 if k not in (WORDS, SEGMENTS)]
      norm = jnp.sqrt(sum(squares) + jnp.sum(jnp.square(words)) +
                      jnp.sum(jnp.square(segments)))
      scale = CLIP_NORM * jnp.minimum(1.0 / norm, 1.0 / CLIP_NORM)
    return loss, grads, {k: g * scale for k, g in grads.items()}

  def _apply(self, weights, adam, gradients, rate, step):
    """The legacy AdamWeightDecayOptimizer's update, variable by variable."""
    jnp, c = self._jax.numpy, self.config
    new_weights, new_adam = {}, {}
    for name, _ in NAMES:
      g = gradients[name]
      m = c.beta_1 * adam[(name, 'adam_m')] + (1.0 - c.beta_1) * g
      v = c.beta_2 * adam[(name, 'adam_v')] + (1.0 - c.beta_2) * jnp.square(g)
      m_hat, v_hat = m, v
      if c.bias_correction:
        m_hat = m / (1.0 - c.beta_1 ** (step + 1.0))
        v_hat = v / (1.0 - c.beta_2 ** (step + 1.0))
      update = m_hat / (jnp.sqrt(v_hat) + c.adam_epsilon)
      if self._decays[name]:
        update += c.weight_decay * weights[name]
      new_weights[name] = weights[name] - rate * update
      new_adam[(name, 'adam_m')], new_adam[(name, 'adam_v')] = m, v
    return new_weights, new_adam

  @functools.cached_property
  def _step(self):
    jax = self._jax
    spec = jax.sharding.PartitionSpec

    def replicas(weights, batch, key):
      # Varying over the replicas: each one's own gradients (of weights left
      # replicated, JAX would hand back their sum over the replicas).
      weights = jax.lax.pcast(weights, 'batch', to='varying')
      key = jax.random.fold_in(key, jax.lax.axis_index('batch'))
      loss, gradients, clipped = self._replica_gradients(weights, batch, key)
      # The clipped ones summed, as CrossShardOptimizer summed the cores';
      # the others averaged: the gradients of the global batch's mean loss.
      return (jax.lax.pmean(loss, 'batch'), jax.lax.pmean(gradients, 'batch'),
              jax.lax.psum(clipped, 'batch'))

    summed = jax.shard_map(replicas, mesh=self._mesh,
                           in_specs=(spec(), spec('batch'), spec()),
                           out_specs=(spec(), spec(), spec()))

    def step(weights, adam, batch, rate, count, key):
      loss, gradients, clipped = summed(weights, batch, key)
      weights, adam = self._apply(weights, adam, clipped, rate, count)
      return loss, gradients, weights, adam

    return jax.jit(step)

  def _batch_of(self, features) -> dict:
    return {k: self._jax.device_put(np.asarray(v), self._batch)
            for k, v in features.items()}

  def train_step(self, features, labels) -> dict:
    del labels  # In the features, as the legacy input_fn yields them.
    rate = learning_rate(self.params, self.steps, self.config.warmup)
    loss, gradients, self.weights, self.adam = self._step(
        self.weights, self.adam, self._batch_of(features), rate,
        np.float32(self.steps), self._key())
    self._rate = float(rate)
    self.steps += 1
    return {'loss': float(loss), 'examples': len(features['label_ids']),
            'gradients': {k: np.asarray(v) for k, v in gradients.items()}}

  def _key(self):
    """This step's dropout key: the step folded into a seed."""
    return self._jax.random.fold_in(self._jax.random.PRNGKey(1), self.steps)

  # Inference -------------------------------------------------------------

  def logits(self, features, taps: dict | None = None) -> np.ndarray:
    w = {k: np.asarray(v) for k, v in self.weights.items()}
    return np.asarray(forward(w, w[WORDS][features['input_ids']],
                              w[SEGMENTS][features['segment_ids']],
                              np.asarray(features['input_mask']),
                              self.config.epsilon, taps,
                              self.config.exact_gelu))

  def predict(self, features) -> dict[str, np.ndarray]:
    logits = self.logits(features)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return {'probabilities': exp / exp.sum(-1, keepdims=True),
            'label': logits.argmax(-1).astype(np.int32)}

  def evaluate(self, batches: list) -> dict[str, float]:
    losses, correct, count = [], 0, 0
    for features, _ in batches:
      logits = self.logits(features)
      losses.append(float(np.mean(per_example_loss(
          logits, features['label_ids']))))
      correct += int((logits.argmax(-1) == features['label_ids']).sum())
      count += len(features['label_ids'])
    return {'loss': float(np.mean(losses)), 'eval_accuracy': correct / count}

  def programs(self, features, labels) -> dict:
    del labels
    batch = {k: np.asarray(v) for k, v in features.items()}
    serve = self._jax.jit(functools.partial(
        _served, self.config.epsilon, self.config.exact_gelu))
    return {'the training step': (self._step, (
        self.weights, self.adam, batch, np.float32(0), np.float32(0),
        self._key())),
            'predict': (serve, (self.weights, {k: batch[k] for k in INPUTS}))}


def _served(epsilon, exact_gelu, weights, inputs):
  import jax  # pylint: disable=g-import-not-at-top
  take = jax.numpy.take
  logits = forward(weights, take(weights[WORDS], inputs['input_ids'], axis=0),
                   take(weights[SEGMENTS], inputs['segment_ids'], axis=0),
                   inputs['input_mask'], epsilon, exact_gelu=exact_gelu)
  return {'probabilities': jax.nn.softmax(logits),
          'label': logits.argmax(-1).astype('int32')}


def layer_outputs(model: BertJaxModel, features) -> dict[str, np.ndarray]:
  taps = {}
  model.logits({k: np.asarray(v)[:1] for k, v in features.items()}, taps)
  return {k: np.asarray(v).ravel() for k, v in taps.items()}


def export(model: BertJaxModel, base_dir: str) -> str:
  """The predict function lowered with the weights inside (jax.export),
  taking the legacy receiver's three int32 inputs."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax import export as jax_export  # pylint: disable=g-import-not-at-top
  weights = {k: np.asarray(v) for k, v in model.weights.items()}
  batch = jax_export.symbolic_shape('batch')[0]
  spec = {k: jax.ShapeDtypeStruct((batch, SEQ), np.int32) for k in INPUTS}
  program = jax_export.export(jax.jit(lambda inputs: _served(
      model.config.epsilon, model.config.exact_gelu, weights, inputs)))(spec)
  os.makedirs(base_dir, exist_ok=True)
  path = tempfile.mkdtemp(dir=base_dir)
  with open(os.path.join(path, 'serving.jaxexport'), 'wb') as f:
    f.write(program.serialize())
  with open(os.path.join(path, 'inputs.json'), 'w', encoding='utf-8') as f:
    json.dump(list(INPUTS), f)
  return path


def serve(path: str, inputs: dict) -> dict:
  from jax import export as jax_export  # pylint: disable=g-import-not-at-top
  with open(os.path.join(path, 'serving.jaxexport'), 'rb') as f:
    program = jax_export.deserialize(bytearray(f.read()))
  return {k: np.asarray(v) for k, v in program.call(
      {k: np.asarray(inputs[k], np.int32) for k in INPUTS}).items()}


def input_batch(params: dict) -> tuple[dict, None]:
  """The first global batch of examples.tfrecord, in file order, as int32:
  the port's own reading of the file the legacy input_fn reads (the
  TFRecord and Example formats without TensorFlow, mnist_common.records)."""
  from mnist_common import records  # pylint: disable=g-import-not-at-top
  rows = []
  for record in records.read(os.path.join(params['data_dir'],
                                          'examples.tfrecord')):
    rows.append({k: v for k, (_, v) in records.decode_example(record).items()})
    if len(rows) == params['batch_size']:
      break
  features = {k: np.array([row[k] for row in rows], np.int32)
              for k in ('input_ids', 'input_mask', 'segment_ids')}
  features['label_ids'] = np.array([row['label_ids'][0] for row in rows],
                                   np.int32)
  return features, None


def make_port(config: Config = Config()) -> array_port.ArrayPort:
  import jax  # pylint: disable=g-import-not-at-top
  return array_port.ArrayPort(
      make=functools.partial(BertJaxModel, config=config),
      framework=f'JAX {jax.__version__}, no Keras',
      export=export, serve=serve, layer_outputs=layer_outputs,
      input_batch=input_batch,
      programs=lambda model, features, labels: model.programs(features,
                                                              labels))


# The deliberate bugs of bert_port.py, each one field away from the port.
def no_weight_decay() -> array_port.ArrayPort:
  return make_port(Config(weight_decay=0.0))


def decay_on_layer_norm_and_bias() -> array_port.ArrayPort:
  return make_port(Config(exclude=()))


def no_clipping() -> array_port.ArrayPort:
  return make_port(Config(clip=False))


def layer_norm_epsilon_1e_6() -> array_port.ArrayPort:
  return make_port(Config(epsilon=1e-6))


def no_warmup() -> array_port.ArrayPort:
  return make_port(Config(warmup=False))


def bias_corrected_adam() -> array_port.ArrayPort:
  return make_port(Config(bias_correction=True))


def erf_gelu() -> array_port.ArrayPort:
  """erf GELU in the predictions (see the step's comment)."""
  return make_port(Config(exact_gelu=True))
