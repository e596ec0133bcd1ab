"""The team's port of albert_legacy to plain JAX, on the BERT JAX port's
pieces (its layer norm, dense, GELU, dropout, loss, input reading) as
albert_port.py is on bert_port.py: the factorised embedding, one block every
layer calls, run_classifier's dropout on the pooled output, LAMB, and each
replica clipping the gradients of its own mean loss by their global norm
(the embedding rows counted per lookup) before the replicas' are summed.

It imports nothing of TensorFlow. Checked against the bundle TF 2.15
recorded of albert_legacy:

  migration-compare --bundle=albert.npz --port=albert_jax_port:make_port

Below it, the two dropout bugs of albert_torch_port.py, on JAX.
"""
import dataclasses
import functools
import math
import re

import numpy as np

import bert_jax_port as bert
from migration_tools.pair import array_port

VOCAB, SEQ, LABELS = bert.VOCAB, bert.SEQ, bert.LABELS
EMBED, HIDDEN, HEADS, LAYERS, INTERMEDIATE = 8, 16, 2, 3, 32
CLIP_NORM = 1.0
CLASSIFIER_DROPOUT = 0.1
WEIGHT_DECAY = 0.01
EXCLUDED = ('LayerNorm', 'layer_norm', 'bias')
WORDS = 'albert/embeddings/word_embeddings'
SEGMENTS = 'albert/embeddings/token_type_embeddings'
BLOCK = 'albert/encoder/transformer/layer_shared'


def _names() -> list[tuple[str, tuple]]:
  """The model_fn's trainable variables, in its order, with their shapes."""
  def dense(scope, units_in, units):
    return [(f'{scope}/kernel', (units_in, units)), (f'{scope}/bias', (units,))]

  def norm(scope, size=HIDDEN):
    return [(f'{scope}/gamma', (size,)), (f'{scope}/beta', (size,))]

  names = [(WORDS, (VOCAB, EMBED)), (SEGMENTS, (2, EMBED)),
           ('albert/embeddings/position_embeddings', (SEQ, EMBED)),
           *norm('albert/embeddings/LayerNorm', EMBED),
           *dense('albert/encoder/embedding_hidden_mapping_in', EMBED, HIDDEN)]
  for part in ('query', 'key', 'value', 'output'):
    names += dense(f'{BLOCK}/attention/{part}', HIDDEN, HIDDEN)
  names += norm(f'{BLOCK}/attention/LayerNorm')
  names += dense(f'{BLOCK}/ffn', HIDDEN, INTERMEDIATE)
  names += dense(f'{BLOCK}/ffn_output', INTERMEDIATE, HIDDEN)
  names += norm(f'{BLOCK}/output_LayerNorm')
  names += dense('albert/pooler', HIDDEN, HIDDEN)
  return names + [('output_weights', (LABELS, HIDDEN)),
                  ('output_bias', (LABELS,))]


NAMES = _names()
# Whether LAMB decays and adapts a variable: not LayerNorm's, not a bias.
ADAPTS = {name: not any(re.search(p, name) for p in EXCLUDED)
          for name, _ in NAMES}


@dataclasses.dataclass(frozen=True)
class Config:
  """What the port's code decides; each bug below changes one field.
  dropout: 'training' (drawn in the step only), 'always' (in predict too),
  or 'none' (left out)."""
  dropout: str = 'training'


def forward(params: dict, words, segments, mask, dropout=None):
  """The logits from the rows already looked up in the two gathered tables
  (words, segments: [batch, SEQ, EMBED]); dropout: a bert.Dropout for the
  classifier's, or None."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  taps, epsilon = {}, 1e-12
  x = words + segments + params['albert/embeddings/position_embeddings'][None]
  x = bert._layer_norm(jnp, x, params, 'albert/embeddings/LayerNorm',  # pylint: disable=protected-access
                       epsilon, taps)
  x = bert._dense(jnp, x, params,  # pylint: disable=protected-access
                  'albert/encoder/embedding_hidden_mapping_in', taps)
  size = HIDDEN // HEADS
  additive = (1.0 - mask[:, None, None, :].astype(jnp.float32)) * -10000.0

  def heads(t):
    return jnp.transpose(t.reshape(-1, SEQ, HEADS, size), (0, 2, 1, 3))

  for _ in range(LAYERS):  # One block, called LAYERS times.
    query, key, value = (heads(bert._dense(  # pylint: disable=protected-access
        jnp, x, params, f'{BLOCK}/attention/{part}', taps))
                         for part in ('query', 'key', 'value'))
    scores = query @ jnp.swapaxes(key, -1, -2) / math.sqrt(size) + additive
    probabilities = jnp.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    context = jnp.transpose(probabilities @ value, (0, 2, 1, 3)).reshape(
        -1, SEQ, HIDDEN)
    attended = bert._dense(jnp, context, params,  # pylint: disable=protected-access
                           f'{BLOCK}/attention/output', taps)
    x = bert._layer_norm(jnp, attended + x, params,  # pylint: disable=protected-access
                         f'{BLOCK}/attention/LayerNorm', epsilon, taps)
    inner = bert._dense(jnp, x, params, f'{BLOCK}/ffn', taps,  # pylint: disable=protected-access
                        functools.partial(bert._gelu, jnp))  # pylint: disable=protected-access
    out = bert._dense(jnp, inner, params, f'{BLOCK}/ffn_output', taps)  # pylint: disable=protected-access
    x = bert._layer_norm(jnp, out + x, params,  # pylint: disable=protected-access
                         f'{BLOCK}/output_LayerNorm', epsilon, taps)
  pooled = bert._dense(jnp, x[:, 0], params, 'albert/pooler', taps,  # pylint: disable=protected-access
                       jnp.tanh)
  if dropout is not None:
    pooled = dropout(pooled)
  return pooled @ params['output_weights'].T + params['output_bias']


def _dropout(rate: float, config: Config, key):
  """The classifier's dropout in training, or None (off, or left out)."""
  if config.dropout == 'none' or not rate:
    return None
  return bert.Dropout(key, rate)


def _replica_gradients(rate: float, config: Config, weights, batch, key):
  """One replica's loss, the gradients of its own mean loss, and those
  clipped by their global norm, the looked-up rows counted per lookup, as
  TF's IndexedSlices count them."""
  import jax  # pylint: disable=g-import-not-at-top
  jnp = jax.numpy
  ids, segment_ids = batch['input_ids'], batch['segment_ids']
  rest = {k: v for k, v in weights.items() if k not in (WORDS, SEGMENTS)}

  def loss_of(rest, words, segments):
    logits = forward(rest, words, segments, batch['input_mask'],
                     _dropout(rate, config, key))
    return jnp.mean(bert.per_example_loss(logits, batch['label_ids']))

  loss, (grads, words, segments) = jax.value_and_grad(
      loss_of, argnums=(0, 1, 2))(rest, weights[WORDS][ids],
                                  weights[SEGMENTS][segment_ids])
  grads[WORDS] = jnp.zeros_like(weights[WORDS]).at[ids].add(words)
  grads[SEGMENTS] = jnp.zeros_like(weights[SEGMENTS]).at[segment_ids].add(
      segments)
  squares = [jnp.sum(jnp.square(g)) for k, g in grads.items()
             if k not in (WORDS, SEGMENTS)]
  norm = jnp.sqrt(sum(squares) + jnp.sum(jnp.square(words)) +
                  jnp.sum(jnp.square(segments)))
  scale = CLIP_NORM * jnp.minimum(1.0 / norm, 1.0 / CLIP_NORM)
  return loss, grads, {k: g * scale for k, g in grads.items()}


def _apply(weights, adam, gradients, rate):
  """The legacy LAMBOptimizer's update, variable by variable."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  new_weights, new_adam = {}, {}
  for name, _ in NAMES:
    g = gradients[name]
    m = 0.9 * adam[(name, 'adam_m')] + 0.1 * g
    v = 0.999 * adam[(name, 'adam_v')] + 0.001 * jnp.square(g)
    update = m / (jnp.sqrt(v) + 1e-6)
    if ADAPTS[name]:  # Excluded from both the decay and the ratio.
      update += WEIGHT_DECAY * weights[name]
      w_norm, u_norm = jnp.linalg.norm(weights[name]), jnp.linalg.norm(update)
      update *= jnp.where(w_norm > 0.0,
                          jnp.where(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
    new_weights[name] = weights[name] - rate * update
    new_adam[(name, 'adam_m')], new_adam[(name, 'adam_v')] = m, v
  return new_weights, new_adam


@functools.lru_cache(maxsize=None)
def _compiled_step(replicas: int, rate: float, config: Config):
  """The jit-compiled step on `replicas` devices, made once for every
  model of those settings (a model is made afresh for each pass)."""
  import jax  # pylint: disable=g-import-not-at-top
  spec = jax.sharding.PartitionSpec
  mesh = jax.sharding.Mesh(np.array(array_port.replica_devices(replicas)),
                           ('batch',))

  def per_replica(weights, batch, key):
    weights = jax.lax.pcast(weights, 'batch', to='varying')
    key = jax.random.fold_in(key, jax.lax.axis_index('batch'))
    loss, gradients, clipped = _replica_gradients(rate, config, weights,
                                                  batch, key)
    # The clipped ones summed, as CrossShardOptimizer summed the cores'.
    return (jax.lax.pmean(loss, 'batch'), jax.lax.pmean(gradients, 'batch'),
            jax.lax.psum(clipped, 'batch'))

  summed = jax.shard_map(per_replica, mesh=mesh,
                         in_specs=(spec(), spec('batch'), spec()),
                         out_specs=(spec(), spec(), spec()))

  def step(weights, adam, batch, learning_rate, key):
    loss, gradients, clipped = summed(weights, batch, key)
    weights, adam = _apply(weights, adam, clipped, learning_rate)
    return loss, gradients, weights, adam

  return jax.jit(step)


@functools.lru_cache(maxsize=None)
def _compiled_logits(rate: float, config: Config):
  """The jit-compiled logits of predict and evaluate."""
  import jax  # pylint: disable=g-import-not-at-top

  def logits(weights, input_ids, input_mask, segment_ids, key):
    # The bug 'always': the training dropout in predict too.
    dropout = (_dropout(rate, config, key) if config.dropout == 'always'
               else None)
    return forward(weights, weights[WORDS][input_ids],
                   weights[SEGMENTS][segment_ids], input_mask, dropout)

  return jax.jit(logits)


class AlbertJaxModel(bert.NamedArrays):
  """The port on `replicas` devices, as an ArrayModel."""

  names = NAMES

  def __init__(self, params: dict, replicas: int, dropout: bool,
               config: Config = Config()):
    import jax  # pylint: disable=g-import-not-at-top
    self._jax, self.config, self.params = jax, config, params
    # The harness asks for dropout off but in its dropout check.
    self.rate = CLASSIFIER_DROPOUT if dropout else 0.0
    self.replicas = replicas
    self._batch = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(array_port.replica_devices(replicas)),
                          ('batch',)), jax.sharding.PartitionSpec('batch'))
    self._start()

  def learning_rate_at(self, step: int) -> float:
    return float(bert.learning_rate(self.params, step, warmup=True))

  # The step --------------------------------------------------------------

  @property
  def _step(self):
    return _compiled_step(self.replicas, self.rate, self.config)

  def _key(self):
    return self._jax.random.fold_in(self._jax.random.PRNGKey(1), self.steps)

  def train_step(self, features, labels) -> dict:
    del labels  # In the features, as the legacy input_fn yields them.
    rate = bert.learning_rate(self.params, self.steps, warmup=True)
    batch = {k: self._jax.device_put(np.asarray(v), self._batch)
             for k, v in features.items()}
    loss, gradients, self.weights, self.adam = self._step(
        self.weights, self.adam, batch, rate, self._key())
    self._rate = float(rate)
    self.steps += 1
    return {'loss': float(loss), 'examples': len(features['label_ids']),
            'gradients': {k: np.asarray(v) for k, v in gradients.items()}}

  # Inference -------------------------------------------------------------

  def logits(self, features) -> np.ndarray:
    return np.asarray(_compiled_logits(self.rate, self.config)(
        self.weights, *(np.asarray(features[k]) for k in bert.INPUTS),
        self._key()))

  def predict(self, features) -> dict[str, np.ndarray]:
    logits = self.logits(features)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return {'probabilities': exp / exp.sum(-1, keepdims=True),
            'label': logits.argmax(-1).astype(np.int32)}

  def evaluate(self, batches: list) -> dict[str, float]:
    losses, correct, count = [], 0, 0
    for features, _ in batches:
      logits = self.logits(features)
      losses.append(float(np.mean(bert.per_example_loss(
          logits, features['label_ids']))))
      correct += int((logits.argmax(-1) == features['label_ids']).sum())
      count += len(features['label_ids'])
    return {'loss': float(np.mean(losses)), 'eval_accuracy': correct / count}


def make_port(config: Config = Config()) -> array_port.ArrayPort:
  import jax  # pylint: disable=g-import-not-at-top
  return array_port.ArrayPort(
      make=functools.partial(AlbertJaxModel, config=config),
      framework=f'JAX {jax.__version__}, no Keras',
      input_batch=bert.input_batch)


# The dropout bugs, each hidden from every check but dropout.
def dropout_at_inference() -> array_port.ArrayPort:
  return make_port(Config(dropout='always'))


def classifier_dropout_left_out() -> array_port.ArrayPort:
  return make_port(Config(dropout='none'))
