"""What a legacy TRAIN graph says of its optimizer, whatever the optimizer.

Two readings, the first that applies:

- **By its ops**: a TF 1 GradientDescent, Momentum (Nesterov too), Adam,
  RMSProp (centered too), Adagrad, Adadelta or Ftrl leaves one apply op per
  variable (``optimizers.LEGACY_APPLY_OPS``); their inputs hold the rate, the
  hyper-parameters and the slots, compared one by one with the Keras
  optimizer of the same kind.
- **By what it does**: any other ``tf.compat.v1.train.Optimizer`` subclass
  (BERT's AdamWeightDecayOptimizer, and those of ALBERT, ELECTRA, XLNet), a
  TF 1 optimizer no Keras optimizer reproduces (ProximalAdagrad,
  ProximalGradientDescent, AdagradDA), or a model_fn that applies its own
  gradients. ``watch()`` wraps each
  optimizer made while the model_fn builds its graph and records the
  gradients its ``apply_gradients`` takes (after any clipping in the
  model_fn) and its learning-rate attribute. Its slots are the variables
  named after a trainable one (``<variable>/<slot>``).

Off a TPU, ``watch(shards=n)`` also scales the loss that the optimizer's own
``compute_gradients`` (or ``minimize``) differentiates by 1/n, as
``CrossShardOptimizer`` did, so that summing what each core applied gives
what the TPU cores' ``cross_replica_sum`` gave (dense, as it made an
embedding's IndexedSlices): the mean gradient for
``minimize``, the sum of each core's clipped gradients for a model_fn that
takes its own (``tf.gradients``, ``clip_by_global_norm``).
"""
# migration-scan: skip-file (it reads legacy optimizers on purpose)
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers

# Where TF 1 optimizers and their subclasses keep the rate, in the order
# read: TF 1's own after _prepare, then the names subclasses use.
RATE_ATTRIBUTES = ('_learning_rate_tensor', 'learning_rate', '_learning_rate',
                   '_lr', 'lr')


@dataclasses.dataclass
class Watched:
  """What watch() saw: the optimizers made, per variable the gradient
  tensor (or IndexedSlices) the model_fn handed to apply_gradients, and the
  variables whose gradient came from a compute_gradients whose loss it
  scaled by 1/shards."""
  optimizers: list = dataclasses.field(default_factory=list)
  applied: dict = dataclasses.field(default_factory=dict)
  scaled: set = dataclasses.field(default_factory=set)


@contextlib.contextmanager
def watch(shards: int = 1):
  """While a model_fn builds its TRAIN graph: records every
  tf.compat.v1.train.Optimizer made and what its apply_gradients takes; with
  shards > 1, scales the loss its compute_gradients takes by 1/shards (see
  module)."""
  watched = Watched()
  base = tf.compat.v1.train.Optimizer
  original_init = base.__init__
  depth = {'apply': 0, 'compute': 0}

  def wrapped_init(optimizer, *args, **kwargs):
    original_init(optimizer, *args, **kwargs)
    if any(o is optimizer for o in watched.optimizers):
      return
    watched.optimizers.append(optimizer)
    apply, compute = optimizer.apply_gradients, optimizer.compute_gradients

    def apply_gradients(grads_and_vars, *args, **kwargs):
      grads_and_vars = list(grads_and_vars)
      if shards > 1 and not depth['apply']:
        # Dense, as cross_replica_sum made them (and so fed in any shape).
        grads_and_vars = [(None if g is None else tf.convert_to_tensor(g), v)
                          for g, v in grads_and_vars]
      if not depth['apply']:  # What the model_fn passed, not a wrapper.
        watched.applied.update((v.op.name, g) for g, v in grads_and_vars
                               if g is not None)
      depth['apply'] += 1
      try:
        return apply(grads_and_vars, *args, **kwargs)
      finally:
        depth['apply'] -= 1

    def compute_gradients(loss, *args, **kwargs):
      scale = shards > 1 and not depth['compute'] and not callable(loss)
      if scale:
        loss = loss * (1.0 / shards)
      depth['compute'] += 1
      try:
        grads_and_vars = compute(loss, *args, **kwargs)
      finally:
        depth['compute'] -= 1
      if scale:
        watched.scaled.update(v.op.name for g, v in grads_and_vars
                              if g is not None)
      return grads_and_vars

    optimizer.apply_gradients = apply_gradients
    optimizer.compute_gradients = compute_gradients

  base.__init__ = wrapped_init
  try:
    yield watched
  finally:
    base.__init__ = original_init


@dataclasses.dataclass(frozen=True)
class Reading:
  """What the training graph says of the optimizer.

  kind: one of optimizers.KERAS_KINDS if read by its ops, else None.
  name: the optimizer's class (e.g. 'AdamWeightDecayOptimizer'), or a
    description when none was made.
  rate: the learning-rate tensor applied, or None if it cannot be read.
  rate_source: where the rate was read, for the report.
  hyper: {name: a tensor, or a bool read from an attribute} (by its ops).
  slots: {(variable name, slot): slot variable name}; the slot is the
    canonical name when read by its ops, else the variable's own suffix.
  applied: {variable name: the gradient its update takes}.
  """
  kind: str | None
  name: str
  rate: Any
  rate_source: str
  hyper: dict
  slots: dict
  applied: dict


def variable_name(tensor) -> str:
  """The name of the variable a tensor reads (through Identity ops)."""
  op = tensor.op
  while op.type == 'Identity':
    op = op.inputs[0].op
  return op.name


def read(graph: tf.Graph, variables: dict, watched: Watched) -> Reading:
  """The optimizer of a TRAIN graph.

  Args:
    graph: the graph.
    variables: {name: variable} of its global variables.
    watched: what watch() saw while the model_fn built it.
  """
  trainable = {v.op.name for v in graph.get_collection(
      tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
  by_ops = _read_apply_ops(graph, variables, trainable)
  if by_ops is not None:
    # What apply_gradients took covers sparse updates too (an embedding's
    # has no dense apply op); the apply ops' inputs, a model_fn that
    # bypassed apply_gradients.
    return dataclasses.replace(by_ops, applied={**by_ops.applied,
                                                **watched.applied})
  rate, source = _watched_rate(graph, watched)
  names = sorted({type(o).__name__ for o in watched.optimizers
                  if not hasattr(o, '_opt')})  # Not CrossShardOptimizer.
  return Reading(None, ', '.join(names) or 'no tf.compat.v1.train.Optimizer',
                 rate, source, {}, optimizers.generic_slots(
                     {k: v.shape for k, v in variables.items()}, trainable),
                 dict(watched.applied))


# The TF 1 training ops, dense and sparse (an embedding's), each a variable.
_APPLY_PREFIXES = ('Apply', 'ResourceApply', 'SparseApply',
                   'ResourceSparseApply')


def _read_apply_ops(graph, variables, trainable) -> Reading | None:
  """The optimizer by its apply ops, if they are all of one kind a Keras
  optimizer reproduces (optimizers.KERAS_KINDS); else None."""
  ops = [op for op in graph.get_operations()
         if op.type.startswith(_APPLY_PREFIXES)]
  rules = [(op, optimizers.LEGACY_APPLY_OPS.get(op.type)) for op in ops]
  kinds = {rule.kind for _, rule in rules if rule}
  if not rules or any(rule is None for _, rule in rules) or len(kinds) != 1:
    return None
  kind = kinds.pop()
  if kind not in optimizers.KERAS_KINDS:
    return None
  rates = {op.inputs[rule.rate].ref() for op, rule in rules}
  first_op, rule = rules[0]
  hyper = {k: first_op.inputs[i] for k, i in rule.hyper.items()}
  hyper.update(rule.fixed)
  for key, attr in rule.attrs.items():
    hyper[key] = bool(first_op.get_attr(attr))
  # The apply ops' own inputs first (a centered RMSProp's 'mg' is second);
  # then by name: a sparse Adam update (an embedding's) has no apply op.
  slots = {}
  for op, op_rule in rules:
    owner = variable_name(op.inputs[0])
    for index, slot in op_rule.slots.items():
      slots[(owner, slot)] = variable_name(op.inputs[index])
  for name in variables:
    found = optimizers.legacy_slot(name, trainable, variables)
    if found and found[1] == kind:
      slots.setdefault((found[0], found[2]), name)
  applied = {variable_name(op.inputs[0]): op.inputs[rule.grad]
             for op, rule in rules}
  rate = rates.pop().deref() if len(rates) == 1 else None
  return Reading(kind, kind, rate, f'the {first_op.type} ops', hyper, slots,
                 applied)


def _watched_rate(graph: tf.Graph, watched: Watched) -> tuple[Any, str]:
  """(rate tensor, 'Class.attribute') of the one optimizer that applied
  gradients, or (None, why not)."""
  inner = [o for o in watched.optimizers if not hasattr(o, '_opt')]
  if len(inner) != 1:
    return None, (f'{len(inner)} optimizers were made' if inner else
                  'the model_fn made no tf.compat.v1.train.Optimizer')
  optimizer = inner[0]
  for attribute in RATE_ATTRIBUTES:
    value = getattr(optimizer, attribute, None)
    if callable(value) and not isinstance(value, (tf.Tensor, tf.Variable)):
      with graph.as_default():
        value = value()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      with graph.as_default():
        value = tf.constant(value, tf.float32)
    if isinstance(value, (tf.Tensor, tf.Variable)) and value.graph is graph:
      return value, f'{type(optimizer).__name__}.{attribute}'
  return None, (f'{type(optimizer).__name__} keeps no rate under '
                f'{", ".join(RATE_ATTRIBUTES)}')
