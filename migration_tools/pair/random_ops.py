"""Every random number a legacy training step draws: switched off where the
kit can, named where it cannot.

The deterministic checks (one_step, updates, stepwise, trajectory) take one
step at identical state on both sides, so neither side may draw. The kit
switches Dropout and ``tf.nn.dropout`` off while the graphs are built
(``frameworks/keras_tf/runner.dropout_disabled``); a model_fn draws in other
ways too. Drop connect, as EfficientNet, MnasNet and ResNet-RS write it, is
``x / keep * floor(keep + tf.random_uniform(...))``; stochastic depth and
home-made dropout compare a uniform with a rate.

Such a mask is switched off here by putting its expectation in its place:
``floor(c + U[0,1))`` has expectation exactly ``c`` and ``U >= r`` has
``1 - r``, so ``x / keep * keep`` is the input again, as inference computes
it and as a port computes with its dropout off. Each rule of ``MASKS`` is one
such pattern. Every other stateful random op that the loss or the train_op
depends on (Gaussian noise, gradient noise, sampling, a shuffle) is named,
with the reason, for ``inventory`` to report: a step that draws anew at each
run cannot be compared at identical state, and must not fail another check
under another check's hint. Initializers draw too, but no step depends on
them, so they are never named.
"""
# migration-scan: skip-file (it reads legacy graphs on purpose)
from __future__ import annotations

import dataclasses
import operator
from typing import Callable

from kit_core.lazy import tensorflow as tf

# The op types that draw from a state that moves at each run (tf.random.*,
# tf.compat.v1.random_*, tf.random.Generator, tf.random.shuffle, ...).
# Stateless ops given a fixed seed draw the same numbers each run.
STATEFUL = frozenset({
    'RandomUniform', 'RandomUniformInt', 'RandomStandardNormal',
    'TruncatedNormal', 'ParameterizedTruncatedNormal', 'Multinomial',
    'RandomShuffle', 'RandomGamma', 'RandomPoisson', 'RandomPoissonV2',
    'RandomCrop', 'StatefulUniform', 'StatefulUniformInt',
    'StatefulUniformFullInt', 'StatefulStandardNormal',
    'StatefulStandardNormalV2', 'StatefulTruncatedNormal',
    'StatefulRandomBinomial', 'RngReadAndSkip', 'RngSkip',
})


@dataclasses.dataclass(frozen=True)
class Uniform:
  """A uniform draw: tensor u in [low, low + width), made of a RandomUniform
  op scaled and shifted by constants (tf.random.uniform's minval, maxval)."""
  tensor: tf.Tensor
  low: float
  width: float


@dataclasses.dataclass(frozen=True)
class Mask:
  """One pattern of a random mask and its expectation.

  expected: (uniform) -> (the tensor whose every consumer then reads the
    expectation instead, the expectation, a tensor that broadcasts to it),
    or None where the uniform is not used so. It is called in the graph.
  """
  name: str
  example: str
  expected: Callable[[Uniform], tuple[tf.Tensor, tf.Tensor] | None]


@dataclasses.dataclass(frozen=True)
class Found:
  """What switch_off did: the masks switched off ({op: rule}) and the ops
  left drawing ({op: why}), by op name."""
  switched_off: dict[str, str]
  left: dict[str, str]

  def to_json(self) -> dict:
    return {'switched_off': dict(self.switched_off), 'left': dict(self.left)}


def _only_consumer(tensor: tf.Tensor, types: tuple[str, ...]
                   ) -> tf.Operation | None:
  """The one op that reads tensor, if it is of one of these types."""
  consumers = tensor.consumers()
  if len(consumers) == 1 and consumers[0].type in types:
    return consumers[0]
  return None


def _other_input(op: tf.Operation | None, tensor: tf.Tensor
                 ) -> tf.Tensor | None:
  """The input of a two-input op that is not tensor."""
  if op is None or len(op.inputs) != 2:
    return None
  others = [t for t in op.inputs if t is not tensor]
  return others[0] if len(others) == 1 else None


# tf.random.uniform's minval and maxval reach its scale as Sub(max, min).
_FOLDED = {'Sub': operator.sub, 'Add': operator.add, 'AddV2': operator.add,
           'Mul': operator.mul}


def constant(tensor: tf.Tensor | None) -> float | None:
  """A scalar constant's value (Python numbers baked into the graph, and
  arithmetic between them); None if tensor is not one."""
  if tensor is None:
    return None
  value = tf.get_static_value(tensor)
  if value is None and tensor.op.type in _FOLDED:
    a, b = (constant(t) for t in tensor.op.inputs)
    value = None if a is None or b is None else _FOLDED[tensor.op.type](a, b)
  if value is None or getattr(value, 'size', 1) != 1:
    return None
  return float(value.reshape(()) if hasattr(value, 'reshape') else value)


def _floor_of_sum(u: Uniform):
  """floor(c + u), u of width 1: its expectation is c + low, for any c
  (floor(n + f + U[0, 1)) is n + 1 exactly when U >= 1 - f)."""
  add = _only_consumer(u.tensor, ('Add', 'AddV2'))
  floor = add and _only_consumer(add.outputs[0], ('Floor',))
  if u.width != 1 or not floor:
    return None
  c = _other_input(add, u.tensor)
  return floor.outputs[0], c + tf.cast(u.low, c.dtype) if u.low else c


# Comparisons with the uniform as the first operand that keep the draws
# above the bound; the others keep those below.
_ABOVE = ('GreaterEqual', 'Greater')
_BELOW = ('LessEqual', 'Less')


def _compared(u: Uniform):
  """cast(u >= r) or cast(u < k), either operand first: its expectation is
  the share of [low, low + width) on the kept side."""
  compare = _only_consumer(u.tensor, _ABOVE + _BELOW)
  cast = compare and _only_consumer(compare.outputs[0], ('Cast',))
  if not cast:
    return None
  return cast.outputs[0], _kept_share(u, compare)


def _kept_share(u: Uniform, compare: tf.Operation) -> tf.Tensor:
  """The share of [low, low + width) the comparison keeps."""
  bound = _other_input(compare, u.tensor)
  below = tf.clip_by_value((bound - u.low) / u.width, 0.0, 1.0)
  kept_above = (compare.type in _ABOVE) == (compare.inputs[0] is u.tensor)
  return 1.0 - below if kept_above else below


def _mask_of(u: Uniform) -> tuple[str, tf.Tensor] | None:
  """(kind, the mask) a uniform draw makes: floor(c + u), or u compared
  with a rate (which TF 2's tf.nn.dropout then selects with, and its
  gradient again: a mask read but not put at its expectation)."""
  add = _only_consumer(u.tensor, ('Add', 'AddV2'))
  floor = add and _only_consumer(add.outputs[0], ('Floor',))
  if floor and u.width == 1:
    return MASKS[0].name, floor.outputs[0]
  compare = _only_consumer(u.tensor, _ABOVE + _BELOW)
  if compare:
    return MASKS[1].name, compare.outputs[0]
  return None


MASKS = (
    Mask('floor of keep + uniform', 'EfficientNet\'s drop connect: '
         'x / keep * floor(keep + tf.random_uniform([batch, 1, 1, 1]))',
         _floor_of_sum),
    Mask('uniform against a rate', 'stochastic depth or dropout by hand: '
         'x * tf.cast(tf.random.uniform(shape) >= rate, x.dtype) / (1 - rate)',
         _compared),
)


def _uniform(op: tf.Operation) -> Uniform | None:
  """The uniform draw a RandomUniform op makes, through tf.random.uniform's
  constant scale (Mul) and shift (Add) of it."""
  if op.type != 'RandomUniform':
    return None
  tensor, low, width = op.outputs[0], 0.0, 1.0
  scale = _only_consumer(tensor, ('Mul',))
  factor = constant(_other_input(scale, tensor))
  if factor is not None:
    tensor, width = scale.outputs[0], factor
    shift = _only_consumer(tensor, ('Add', 'AddV2'))
    offset = constant(_other_input(shift, tensor))
    if offset is not None:
      tensor, low = shift.outputs[0], offset
  return Uniform(tensor, low, width)


def ancestors(roots) -> list[tf.Operation]:
  """Every op the roots (tensors or ops) depend on, through data and
  control inputs, in no set order."""
  seen, stack = {}, [getattr(r, 'op', r) for r in roots if r is not None]
  while stack:
    op = stack.pop()
    if op.name in seen:
      continue
    seen[op.name] = op
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  return list(seen.values())


def _put_in_place(target: tf.Tensor, expectation: tf.Tensor) -> None:
  """Every op that reads target reads the expectation instead, broadcast to
  target's shape (those ops listed before the broadcast, which reads
  target's shape, is made)."""
  consumers = [(op, i) for op in target.consumers()
               for i, t in enumerate(op.inputs) if t is target]
  with tf.name_scope(target.op.name + '_expectation'):
    filled = tf.broadcast_to(tf.cast(expectation, target.dtype),
                             tf.shape(target))
  for op, index in consumers:
    op._update_input(index, filled)  # pylint: disable=protected-access


def _called(attrs) -> list[str]:
  """The functions an op's or a function node's attributes name (an If's
  branches, a While's body, a call's f)."""
  names = []
  for value in attrs.values():
    if value.HasField('func'):
      names.append(value.func.name)
    names.extend(f.name for f in value.list.func)
  return names


def _drawing_functions(graph: tf.Graph) -> dict[str, set[str]]:
  """{function: the stateful random op types it or a function it calls
  runs}, over the graph's function library (tf.cond, tf.while_loop and
  tf.function bodies in a TF 2 graph)."""
  library = {f.signature.name: f for f in graph.as_graph_def().library.function}
  memo: dict[str, set[str]] = {}

  def draws(name: str) -> set[str]:
    if name not in memo:
      memo[name] = set()  # A recursive call adds nothing new.
      found = set()
      for node in library[name].node_def if name in library else ():
        if node.op in STATEFUL:
          found.add(node.op)
        for callee in _called(node.attr):
          found |= draws(callee)
      memo[name] = found
    return memo[name]

  return {name: draws(name) for name in library}


def switch_off(roots) -> Found:
  """Puts each random mask the roots (the loss, the train_op) depend on at
  its expectation, in their graph; names every other op that draws.

  Call it once the graph holds every op that reads a mask (the forward pass
  and the gradients of the train_op), before any other gradient is taken.
  """
  switched_off, left = {}, {}
  ops = sorted(ancestors(roots), key=lambda o: o.name)
  functions = None
  for op in ops:
    callees = _called(op.node_def.attr)
    if callees:
      functions = functions or _drawing_functions(op.graph)
      types = set().union(*(functions.get(f, set()) for f in callees))
      if types:
        left[op.name] = (f'{", ".join(sorted(types))} in the body of this '
                         f'{op.type} op (a tf.cond, tf.while_loop or '
                         'tf.function), where the kit puts no constant')
      continue
    if op.type not in STATEFUL:
      continue
    if op._control_flow_context is not None:  # pylint: disable=protected-access
      left[op.name] = (f'{op.type} in the body of a TF 1 tf.cond or '
                       'tf.while_loop, where the kit puts no constant')
      continue
    with op.graph.as_default():
      rule, matched = _matched(op)
      if matched is not None:
        _put_in_place(*matched)
        switched_off[op.name] = rule
        continue
    left[op.name] = (f'{op.type}, used otherwise than as a mask the kit '
                     'knows (' + '; '.join(m.example for m in MASKS) + ')')
  return Found(switched_off, left)


def masks(roots) -> list[tuple[str, str, tf.Tensor]]:
  """(op name, rule, mask) of each random mask of MASKS the roots depend
  on, in the order the graph made them, left drawing: the masks a step that
  draws answers, for a port on another framework to take in its dropout's
  place (the dropout check). Each mask is 0 or False where it drops, 1 or
  True where it keeps (_mask_of)."""
  found = []
  ops = sorted(ancestors(roots), key=lambda o: o._id)  # pylint: disable=protected-access
  for op in ops:
    if op.type not in STATEFUL or op._control_flow_context is not None:  # pylint: disable=protected-access
      continue
    u = _uniform(op)
    mask = u and _mask_of(u)
    if mask:
      found.append((op.name, *mask))
  return found


def drawing(roots) -> list[str]:
  """The names of the stateful random ops the roots depend on (outside
  function bodies), sorted: what a step that draws draws from."""
  return sorted(op.name for op in ancestors(roots) if op.type in STATEFUL)


def _matched(op: tf.Operation) -> tuple[str, tuple | None]:
  """The first rule of MASKS that op's draw matches, and its answer."""
  u = _uniform(op)
  for mask in MASKS if u is not None else ():
    matched = mask.expected(u)
    if matched is not None:
      return mask.name, matched
  return '', None
