"""The random numbers a Keras port's own step draws, outside Keras's Dropout:
put at their expectation as the legacy graph's are, or named.

The kit switches Keras's Dropout and ``tf.nn.dropout`` off while the
deterministic checks build the port's step (runner.dropout_disabled). A port
written as tensorflow/tpu's TF 2 EfficientNet writes drop connect draws
otherwise: ``x / keep * tf.floor(keep + tf.random.uniform([batch, 1, 1,
1]))``; stochastic depth and dropout by hand compare a uniform with a rate.
The legacy graph's masks of those forms are put at their expectation
(pair/random_ops.py), so the port's must be too, or the first step differs
by a random mask and fails under another check's hint.

A port's step is traced by its own ``tf.function``, which the kit cannot
rewrite after the fact. So while it is traced, ``tf.floor`` and ``tf.cast``
read what they are given: ``floor(c + u)`` of a uniform u of width 1 gives
its expectation ``c + low``, and ``cast(u >= r)`` (or ``u < k``, either
operand first) the share of the uniform's range on the kept side, as
random_ops.MASKS reads the legacy graph. Every stateful draw the port's
traced step makes through ``tf.random.*`` and ``tf.compat.v1.random_*`` is
recorded with its call site; those no rule switched off are left, for
one_step to name rather than fail under its own hint. Only graphs of
functions are read: the legacy graph (a TF 1 ``tf.Graph``) is random_ops'.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import traceback
from typing import Iterator

import tensorflow as tf

from migration_tools.pair import masks as masks_lib
from migration_tools.pair import random_ops

# The draws recorded: tf.random.<name> and tf.compat.v1.<name>.
_DRAWS = {'random': ('uniform', 'normal', 'truncated_normal'),
          'v1': ('random_uniform', 'random_normal', 'truncated_normal')}
_ADD = ('Add', 'AddV2')
_ABOVE, _BELOW = ('GreaterEqual', 'Greater'), ('LessEqual', 'Less')


@dataclasses.dataclass
class Draws:
  """What the port's traced steps drew: {call site: the rule that put it at
  its expectation}, and {call site: the draw} of those left drawing."""
  switched_off: dict = dataclasses.field(default_factory=dict)
  drawn: dict = dataclasses.field(default_factory=dict)  # {tensor: site}

  @property
  def left(self) -> dict[str, str]:
    switched = set(self.switched_off)
    return {site: what for site, what in self.drawn.values()
            if site not in switched}

  def to_json(self) -> dict:
    return {'switched_off': dict(self.switched_off), 'left': self.left,
            'remedy': REMEDY}


# What a port whose step draws otherwise does, in the line that names it.
REMEDY = ('Draw them as a Keras Dropout layer (which the kit switches off), '
          'or as a mask it reads: tf.floor(keep + tf.random.uniform(...)), or '
          'tf.cast(tf.random.uniform(...) >= rate, dtype)')

# The record of the current deterministic phase (off()); None outside it.
CURRENT: Draws | None = None
# While the dropout check hands the legacy masks (handed()): mask_like(x,
# where, dtype), the next mask in a mask's place.
_HANDING = None


# The libraries whose frames are not the port's: TensorFlow's (autograph
# calls the port's code through its own) and Keras's.
_LIBRARIES = ('tensorflow', 'keras', 'tf_keras')


def _site(op=None) -> str:
  """'file.py:12': the innermost frame of the port's code that made op
  (its traceback, which maps autograph's generated code back to the port's
  source), or that called in."""
  frames = [(f.filename, f.lineno) for f in op.traceback] if op else [
      (f.filename, f.lineno) for f in traceback.extract_stack()]
  # Autograph's generated modules live in a temporary folder.
  frames = [(f, n) for f, n in frames
            if '__autograph_generated' not in os.path.basename(f)]
  return masks_lib.port_site(frames, _LIBRARIES)


def _uniform_behind(tensor) -> tuple | None:
  """(the RandomUniform's output, low, width) where tensor is that draw
  scaled and shifted by constants (width * u + low); else None."""
  scale, shift = 1.0, 0.0
  for _ in range(4):
    op = tensor.op
    if op.type == 'RandomUniform':
      return op.outputs[0], shift, scale
    if op.type not in _ADD + ('Mul',) or len(op.inputs) != 2:
      return None
    constants = [random_ops.constant(t) for t in op.inputs]
    if constants.count(None) != 1:
      return None
    value = next(c for c in constants if c is not None)
    tensor = op.inputs[constants.index(None)]
    if op.type == 'Mul':
      scale *= value
    else:
      shift += scale * value
  return None


def _floor_expectation(x):
  """floor(c + u) of a uniform of width 1: its expectation c + low."""
  if x.op.type not in _ADD:
    return None
  for i, t in enumerate(x.op.inputs):
    found = _uniform_behind(t)
    if found and found[2] == 1.0:
      c = x.op.inputs[1 - i]
      return found[0], c + tf.cast(found[1], c.dtype)
  return None


def _cast_expectation(x):
  """cast(u >= r) (or u < k, either operand first): the share of the
  uniform's range on the kept side."""
  if x.op.type not in _ABOVE + _BELOW:
    return None
  for i, t in enumerate(x.op.inputs):
    found = _uniform_behind(t)
    if found:
      draw, low, width = found
      bound = tf.cast(x.op.inputs[1 - i], tf.float32)
      below = tf.clip_by_value((bound - low) / width, 0.0, 1.0)
      kept_above = (x.op.type in _ABOVE) == (i == 0)
      return draw, 1.0 - below if kept_above else below
  return None


def site(op=None) -> str:
  """'file.py:12': the innermost frame of the port's code that made op,
  or (None) calling in."""
  return _site(op)


def _put(x, matched, rule: str, dtype=None):
  """The expectation in x's place, x's shape, the draw recorded off; or,
  while masks are handed (handed()), the next legacy mask."""
  draw, expectation = matched
  where = CURRENT.drawn.get(draw.name, (_site(), ''))[0]
  CURRENT.switched_off[where] = rule
  if _HANDING is not None:
    return _HANDING(x, where, dtype or x.dtype)
  return tf.broadcast_to(tf.cast(expectation, dtype or x.dtype), tf.shape(x))


def _floor(original):
  def floor(x, name=None):
    # Only a graph tensor of a traced function is read: anything else (a
    # Keras 2 functional model's KerasTensor, which TF dispatches to a
    # layer) goes to TF's own as it came.
    matched = (isinstance(x, tf.Tensor) and tf.inside_function() and
               _floor_expectation(x))
    if matched:
      return _put(x, matched, random_ops.MASKS[0].name)
    return original(x, name=name)
  return floor


def _cast(original):
  def cast(x, dtype, name=None):
    tensor = x if isinstance(x, tf.Tensor) else None
    matched = (tensor is not None and tf.inside_function() and
               _cast_expectation(tensor))
    if matched:
      return _put(tensor, matched, random_ops.MASKS[1].name, dtype)
    return original(x, dtype, name=name)
  return cast


def _stateful_behind(tensor):
  """The stateful random op whose draw tensor scales and shifts (through
  tf.random.*'s mean, stddev, minval and maxval), or None."""
  op = tensor.op
  for _ in range(4):
    if op.type in random_ops.STATEFUL:
      return op
    if not op.inputs:
      return None
    op = op.inputs[0].op
  return None


def _draw(original, label: str):
  def draw(*args, **kwargs):
    result = original(*args, **kwargs)
    op = (_stateful_behind(result) if CURRENT is not None and
          tf.inside_function() else None)
    if op is not None:
      CURRENT.drawn[op.outputs[0].name] = (_site(op), label)
    return result
  return draw


@contextlib.contextmanager
def handed(mask_like) -> Iterator[Draws]:
  """off(), but each mask read takes mask_like(x, where, dtype) (the
  dropout check's legacy masks) in place of its expectation."""
  global _HANDING
  previous, _HANDING = _HANDING, mask_like
  try:
    with off() as draws:
      yield draws
  finally:
    _HANDING = previous


@contextlib.contextmanager
def off() -> Iterator[Draws]:
  """While the block runs, the masks of the port's traced steps are put at
  their expectation and every draw is recorded (CURRENT)."""
  global CURRENT
  real = importlib.import_module('tensorflow')
  modules = {'tf': real, 'math': real.math, 'dtypes': real.dtypes,
             'random': real.random, 'v1': real.compat.v1}
  wrapped = [(modules[m], 'floor', _floor) for m in ('tf', 'math')]
  wrapped += [(modules[m], 'cast', _cast) for m in ('tf', 'dtypes')]
  for where, names in _DRAWS.items():
    prefix = 'tf.random.' if where == 'random' else 'tf.compat.v1.'
    wrapped += [(modules[where], name,
                 lambda o, label=f'{prefix}{name}': _draw(o, label))
                for name in names]
  saved = [(module, name, getattr(module, name)) for module, name, _ in
           wrapped]
  previous, CURRENT = CURRENT, Draws()
  for (module, name, wrap), (_, _, original) in zip(wrapped, saved):
    setattr(module, name, wrap(original))
  try:
    yield CURRENT
  finally:
    for module, name, original in saved:
      setattr(module, name, original)
    CURRENT = previous
