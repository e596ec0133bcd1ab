"""The team's port of albert_legacy to PyTorch: the factorised embedding, one
transformer block every layer calls, run_classifier's dropout on the pooled
output, LAMB as a torch.optim.Optimizer, the warmup and polynomial decay as
a LambdaLR, and each replica clipping the gradients of its own mean loss by
their global norm before the replicas' are summed, as each TPU core did.

The modules are named as the model_fn's variable scopes, so every weight is
handed over under its TF name (pytorch.LAYOUTS):
albert.encoder.transformer.layer_shared.attention.query.weight is
albert/encoder/transformer/layer_shared/attention/query/kernel.

It imports nothing of TensorFlow or of albert_legacy (which needs it): the
constants are written again here, as a team's PyTorch code has its own
config. Checked against the bundle TF 2.15 recorded of albert_legacy:

  migration-compare --bundle=albert.npz --port=albert_torch_port:make_port

Below it, four deliberate bugs, one Config field each: two that clip
otherwise than TF (they pass every check whose states leave the clip idle),
two that get the classifier's dropout wrong (they pass every check taken
with dropout off).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re

import numpy as np
import torch
from torch import nn
from torch.nn import functional

# The first batch of examples.tfrecord read without TensorFlow, as the BERT
# JAX port reads the same file.
from bert_jax_port import input_batch
from migration_tools.pair.frameworks import pytorch as torch_port

VOCAB, SEQ, LABELS = 40, 8, 3
EMBED, HIDDEN, HEADS, LAYERS, INTERMEDIATE = 8, 16, 2, 3, 32
CLIP_NORM = 1.0
CLASSIFIER_DROPOUT = 0.1
WEIGHT_DECAY = 0.01
EXCLUDED = ('LayerNorm', 'layer_norm', 'bias')
INPUTS = ('input_ids', 'input_mask', 'segment_ids')
SEED = 0


@dataclasses.dataclass(frozen=True)
class Config:
  """What the port's code decides; each bug below changes one field."""
  clip: bool = True
  # Clip with torch.nn.utils.clip_grad_norm_: the embedding tables' dense
  # gradients in the norm, where TF's counts each lookup (IndexedSlices).
  dense_norm: bool = False
  # How the classifier's dropout is written: 'module' (nn.Dropout, off in
  # eval()), 'functional' (F.dropout, whose training defaults to True), or
  # 'none'.
  dropout: str = 'module'
  # Whether the attention's query multiplies by its weight as nn.Linear
  # does (x @ W.T), or by the weight as stored (x @ W: a square kernel
  # loaded untransposed, which no shape check sees).
  query_as_stored: bool = False


def _initialised(module: nn.Module) -> nn.Module:
  for name, tensor in module.named_parameters(recurse=False):
    if name == 'bias':
      nn.init.zeros_(tensor)
    else:  # ALBERT's truncated normal, stddev 0.02.
      nn.init.trunc_normal_(tensor, std=0.02, a=-0.04, b=0.04)
  return module


def _linear(units_in: int, units: int) -> nn.Linear:
  return _initialised(nn.Linear(units_in, units))


def _norm() -> nn.LayerNorm:
  return nn.LayerNorm(HIDDEN, eps=1e-12)


def _table(rows: int) -> nn.Parameter:
  return nn.Parameter(nn.init.trunc_normal_(torch.empty(rows, EMBED),
                                            std=0.02, a=-0.04, b=0.04))


class Embeddings(nn.Module):
  """The EMBED-wide tables and their layer norm (albert/embeddings)."""

  def __init__(self):
    super().__init__()
    self.word_embeddings = _table(VOCAB)
    self.token_type_embeddings = _table(2)
    self.position_embeddings = _table(SEQ)
    self.LayerNorm = nn.LayerNorm(EMBED, eps=1e-12)  # pylint: disable=invalid-name


class Attention(nn.Module):

  def __init__(self):
    super().__init__()
    self.query, self.key, self.value, self.output = (
        _linear(HIDDEN, HIDDEN) for _ in range(4))
    self.LayerNorm = _norm()  # pylint: disable=invalid-name

  def forward(self, x, additive):
    size = HIDDEN // HEADS

    def heads(t):
      return t.reshape(-1, SEQ, HEADS, size).permute(0, 2, 1, 3)

    query, key, value = (heads(self.query(x)), heads(self.key(x)),
                         heads(self.value(x)))
    scores = query @ key.transpose(-1, -2) / math.sqrt(size) + additive
    context = (torch.softmax(scores, -1) @ value).permute(0, 2, 1, 3)
    return self.LayerNorm(self.output(context.reshape(-1, SEQ, HIDDEN)) + x)


class Block(nn.Module):
  """The one transformer layer (albert/encoder/transformer/layer_shared)."""

  def __init__(self):
    super().__init__()
    self.attention = Attention()
    self.ffn = _linear(HIDDEN, INTERMEDIATE)
    self.ffn_output = _linear(INTERMEDIATE, HIDDEN)
    self.output_LayerNorm = _norm()  # pylint: disable=invalid-name

  def forward(self, x, additive):
    x = self.attention(x, additive)
    inner = functional.gelu(self.ffn(x), approximate='tanh')
    return self.output_LayerNorm(self.ffn_output(inner) + x)


class Transformer(nn.Module):

  def __init__(self):
    super().__init__()
    self.layer_shared = Block()


class Encoder(nn.Module):

  def __init__(self):
    super().__init__()
    self.embedding_hidden_mapping_in = _linear(EMBED, HIDDEN)
    self.transformer = Transformer()


class Albert(nn.Module):

  def __init__(self):
    super().__init__()
    self.embeddings = Embeddings()
    self.encoder = Encoder()
    self.pooler = _linear(HIDDEN, HIDDEN)


class Classifier(nn.Module):
  """The int32 features -> (logits, the rows looked up in the two tables
  that are gathered: their gradients are TF's IndexedSlices)."""

  def __init__(self, config: Config, dropout: bool):
    super().__init__()
    self.albert = Albert()
    self.output_weights = nn.Parameter(nn.init.trunc_normal_(
        torch.empty(LABELS, HIDDEN), std=0.02, a=-0.04, b=0.04))
    self.output_bias = nn.Parameter(torch.zeros(LABELS))
    self.rate = CLASSIFIER_DROPOUT if dropout else 0.0
    self.dropout = nn.Dropout(self.rate)
    self.config = config
    if config.query_as_stored:  # The bug: still an nn.Linear, by its name.
      query = self.albert.encoder.transformer.layer_shared.attention.query
      query.forward = lambda x: functional.linear(x, query.weight.T,
                                                  query.bias)

  def _classifier_dropout(self, pooled):
    if self.config.dropout == 'functional':  # The bug: on at inference.
      return functional.dropout(pooled, self.rate)
    if self.config.dropout == 'none':  # The bug: left out.
      return pooled
    return self.dropout(pooled)

  def forward(self, features):
    embeddings = self.albert.embeddings
    words = functional.embedding(features['input_ids'].long(),
                                 embeddings.word_embeddings)
    segments = functional.embedding(features['segment_ids'].long(),
                                    embeddings.token_type_embeddings)
    x = embeddings.LayerNorm(words + segments +
                             embeddings.position_embeddings[None])
    encoder = self.albert.encoder
    x = encoder.embedding_hidden_mapping_in(x)
    mask = features['input_mask'].to(torch.float32)
    additive = (1.0 - mask[:, None, None, :]) * -10000.0
    for _ in range(LAYERS):  # One block, called LAYERS times.
      x = encoder.transformer.layer_shared(x, additive)
    pooled = torch.tanh(self.albert.pooler(x[:, 0]))
    logits = (self._classifier_dropout(pooled) @ self.output_weights.T +
              self.output_bias)
    return logits, (words, segments)


class LAMB(torch.optim.Optimizer):
  """ALBERT's LAMB: Adam's moments without bias correction (slots adam_m
  and adam_v, made with the optimizer), the weight decay added to the
  update, and the update scaled by ||w|| / ||update|| (1 where either is
  0); a group with decay False takes neither the decay nor the ratio."""

  def __init__(self, groups, lr: float, weight_decay: float = WEIGHT_DECAY,
               betas=(0.9, 0.999), eps: float = 1e-6):
    super().__init__(groups, {'lr': lr, 'weight_decay': weight_decay,
                              'betas': betas, 'eps': eps, 'decay': True})
    for group in self.param_groups:
      for p in group['params']:
        self.state[p] = {'adam_m': torch.zeros_like(p),
                         'adam_v': torch.zeros_like(p)}

  @torch.no_grad()
  def step(self, closure=None):
    del closure
    for group in self.param_groups:
      beta_1, beta_2 = group['betas']
      for p in group['params']:
        if p.grad is None:
          continue
        state = self.state[p]
        m = state['adam_m'].mul_(beta_1).add_(p.grad, alpha=1.0 - beta_1)
        v = state['adam_v'].mul_(beta_2).addcmul_(p.grad, p.grad,
                                                  value=1.0 - beta_2)
        update = m / (v.sqrt() + group['eps'])
        if group['decay']:
          update = update + group['weight_decay'] * p
          w_norm, u_norm = p.norm(), update.norm()
          one = torch.ones_like(w_norm)
          update = update * torch.where(
              w_norm > 0, torch.where(u_norm > 0, w_norm / u_norm, one), one)
        p.sub_(group['lr'] * update)


def rate_factor(params: dict, step: int) -> float:
  """The legacy learning_rate() over the peak: a linear warmup, then a
  linear decay to 0 at num_train_steps."""
  warmup = params.get('num_warmup_steps', 0)
  if step < warmup:
    return step / warmup
  return 1.0 - min(step, params['num_train_steps']) / params['num_train_steps']


class AlbertTorch(torch_port.TorchModel):
  """The classifier on `replicas` shares of each batch, under LAMB."""

  def __init__(self, params: dict, replicas: int, dropout: bool,
               config: Config = Config()):
    torch.manual_seed(SEED)  # The same initial state on every make.
    self.replicas, self.config = replicas, config
    self.module = Classifier(config, dropout)
    named = list(self.module.named_parameters())
    excluded = [p for n, p in named
                if any(re.search(e, n) for e in EXCLUDED)]
    ids = {id(p) for p in excluded}
    self.optimizer = LAMB(
        [{'params': [p for _, p in named if id(p) not in ids]},
         {'params': excluded, 'decay': False}], lr=params['learning_rate'])
    self.scheduler = torch.optim.lr_scheduler.LambdaLR(
        self.optimizer, functools.partial(rate_factor, params))

  def describe_optimizer(self):
    return None  # Its own optimizer: compared by what it does.

  def all_reduce(self, gradients):
    # The replicas' clipped gradients summed, as CrossShardOptimizer
    # summed the TPU cores'.
    return sum(gradients)

  def _loss(self, features):
    logits, lookups = self.module(features)
    labels = features['label_ids'].long()
    return functional.cross_entropy(logits, labels), lookups

  def _clip_scale(self, parameters, lookups) -> torch.Tensor | float:
    """TF's clip_by_global_norm: the norm over every gradient, the tables
    gathered from counted per lookup (their IndexedSlices' values)."""
    if self.config.dense_norm:  # The bug: clip_grad_norm_'s dense norm.
      torch.nn.utils.clip_grad_norm_(parameters, CLIP_NORM)
      return 1.0
    tables = {id(self.module.albert.embeddings.word_embeddings),
              id(self.module.albert.embeddings.token_type_embeddings)}
    squares = [p.grad.square().sum() for p in parameters
               if id(p) not in tables]
    squares += [rows.grad.square().sum() for rows in lookups]
    norm = torch.sqrt(sum(squares))
    return CLIP_NORM * torch.minimum(1.0 / norm,
                                     torch.tensor(1.0 / CLIP_NORM))

  def train_step(self, features, labels):
    del labels  # In the features, as the legacy input_fn yields them.
    self.module.train()
    entries = [e for e in self._entries() if e.trainable]
    parameters = [e.tensor for e in entries]
    losses, raw, clipped = [], [], []
    for share in self.shares(features):
      self.optimizer.zero_grad(set_to_none=True)
      loss, lookups = self._loss(self.tensor(share))
      for rows in lookups:
        rows.retain_grad()
      loss.backward()
      losses.append(float(loss.detach()))
      raw.append([p.grad.detach().clone() for p in parameters])
      scale = (self._clip_scale(parameters, lookups) if self.config.clip
               else 1.0)
      clipped.append([p.grad.detach() * scale for p in parameters])
    for index, p in enumerate(parameters):
      p.grad = self.all_reduce([share[index] for share in clipped])
    self._rate = float(self.optimizer.param_groups[0]['lr'])
    reported = {e.name: e.layout.to_tf(
        (sum(share[i] for share in raw) / len(raw)).cpu().numpy())
                for i, e in enumerate(entries)}
    self.optimizer.step()
    self.scheduler.step()
    self._steps = self.step_count() + 1
    return {'loss': float(np.mean(losses)), 'gradients': reported,
            'examples': len(np.asarray(features['label_ids']))}

  def logits(self, features) -> np.ndarray:
    self.module.eval()
    with torch.no_grad():
      return self.module(self.tensor(features))[0].cpu().numpy()

  def predict(self, features) -> dict[str, np.ndarray]:
    logits = self.logits(features)
    return {'probabilities': torch.softmax(torch.as_tensor(logits),
                                           -1).numpy(),
            'label': logits.argmax(-1).astype(np.int32)}

  def evaluate(self, batches: list) -> dict[str, float]:
    losses, correct, count = [], 0, 0
    for features, _ in batches:
      logits = self.logits(features)
      labels = np.asarray(features['label_ids'])
      losses.append(float(functional.cross_entropy(
          torch.as_tensor(logits), torch.as_tensor(labels).long())))
      correct += int((logits.argmax(-1) == labels).sum())
      count += len(labels)
    return {'loss': float(np.mean(losses)), 'eval_accuracy': correct / count}


class _Serving(nn.Module):
  """The legacy receiver's three int32 inputs -> the PREDICT outputs."""

  def __init__(self, classifier: Classifier):
    super().__init__()
    self.classifier = classifier

  def forward(self, input_ids, input_mask, segment_ids):
    logits = self.classifier({'input_ids': input_ids,
                              'input_mask': input_mask,
                              'segment_ids': segment_ids})[0]
    return torch.softmax(logits, -1), logits.argmax(-1).to(torch.int32)


def export(model: AlbertTorch, base_dir: str) -> str:
  """torch.export's program of the serving module, one .pt2 file."""
  model.module.eval()
  example = tuple(torch.zeros((2, SEQ), dtype=torch.int32) for _ in INPUTS)
  batch = torch.export.Dim('batch', min=1)
  program = torch.export.export(
      _Serving(model.module), example,
      dynamic_shapes=tuple({0: batch} for _ in INPUTS))
  os.makedirs(base_dir, exist_ok=True)
  path = os.path.join(base_dir, 'albert.pt2')
  torch.export.save(program, path)
  return path


def serve(path: str, inputs: dict) -> dict:
  """The exported program, loaded without the model's code."""
  program = torch.export.load(path).module()
  with torch.no_grad():
    probabilities, label = program(*(torch.as_tensor(
        np.asarray(inputs[k], np.int32)) for k in INPUTS))
  return {'probabilities': probabilities.numpy(), 'label': label.numpy()}


def layer_outputs(model: AlbertTorch, features) -> dict[str, np.ndarray]:
  """Each module that owns weights: its output on the first example, by
  its weights' TF scope, at its last call (the shared block is called
  LAYERS times)."""
  taps, hooks = {}, []
  for path, sub in model.module.named_modules():
    if path and any(True for _ in sub.parameters(recurse=False)):
      def tap(_, __, output, scope=path.replace('.', '/')):
        taps[scope] = output[0] if isinstance(output, tuple) else output
      hooks.append(sub.register_forward_hook(tap))
  model.module.eval()
  try:
    with torch.no_grad():
      model.module(model.tensor(features))
  finally:
    for hook in hooks:
      hook.remove()
  batch = len(np.asarray(features['input_ids']))
  flat = {scope: output.cpu().numpy().ravel() for scope, output in taps.items()}
  return {scope: value[:value.size // batch] for scope, value in flat.items()}


def make_port(config: Config = Config()) -> torch_port.TorchPort:
  return torch_port.TorchPort(
      make=functools.partial(AlbertTorch, config=config),
      framework=f'PyTorch {torch.__version__}', export=export, serve=serve,
      input_batch=input_batch, layer_outputs=layer_outputs)


# The deliberate bugs, each one Config field away from the port.
def no_clipping() -> torch_port.TorchPort:
  return make_port(Config(clip=False))


def clipping_by_the_dense_norm() -> torch_port.TorchPort:
  return make_port(Config(dense_norm=True))


def dropout_at_inference() -> torch_port.TorchPort:
  return make_port(Config(dropout='functional'))


def classifier_dropout_left_out() -> torch_port.TorchPort:
  return make_port(Config(dropout='none'))


def query_kernel_as_stored() -> torch_port.TorchPort:
  return make_port(Config(query_as_stored=True))
