"""Gradient clipping in a legacy model_fn: each ``clip_by_global_norm`` and
``clip_by_norm`` call its TRAIN graph makes, with the norm it measures and
its threshold, so that every step says whether clipping engaged.

A clip that never engages is never compared: at a fresh initialisation
(BERT's standard deviation of 0.02) a gradient's global norm often stays
below 1.0 for every recorded step, and a port with no clipping, or one that
measures another norm (an embedding's gradient made dense, where TF counts
each lookup), computes the same steps there. The clipping check
(compare/checks/clipping.py) reads these norms to find a step where the clip
engages, or makes one.

Clipping by value (``tf.clip_by_value``) is not read: the op clips
activations and probabilities as often as gradients, and nothing in its call
says which (``LIMITS``).
"""
# migration-scan: skip-file (it reads legacy graphs on purpose)
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys

from kit_core.lazy import tensorflow as tf

# What the kit does not read as clipping, said where the report lists the
# behaviours of a step.
LIMITS = ('tf.clip_by_value on gradients is not read as clipping (the op '
          'clips activations as often); a clip made by hand (a norm and a '
          'tf.minimum) neither')


@dataclasses.dataclass(frozen=True)
class Clip:
  """One clipping call of the model_fn.

  kind: 'global norm' (clip_by_global_norm) or 'norm' (clip_by_norm of one
    tensor; its largest slice's norm where it clips along axes).
  where: the call's file (its base name) and line.
  tensors: how many tensors it clips.
  norm, threshold: the graph's tensors: the norm it measured, its clip_norm.
  """
  kind: str
  where: str
  tensors: int
  norm: object
  threshold: object

  def to_json(self) -> dict:
    return {'kind': self.kind, 'where': self.where, 'tensors': self.tensors}


def _caller() -> str:
  """'file.py:123' of the call into the wrapped clip (two frames up)."""
  frame = sys._getframe(2)  # pylint: disable=protected-access
  return f'{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}'


def _values(tensor):
  """A gradient's values: an IndexedSlices' rows, each lookup counted, as
  TF's norms count them."""
  if isinstance(tensor, tf.IndexedSlices):
    return tensor.values
  return tf.convert_to_tensor(tensor)


def _global_norm_clip(original, seen: list):
  def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    clipped, norm = original(t_list, clip_norm, use_norm=use_norm, name=name)
    seen.append(Clip('global norm', _caller(),
                     sum(t is not None for t in t_list), norm,
                     tf.cast(clip_norm, norm.dtype)))
    return clipped, norm
  return clip_by_global_norm


def _norm_clip(original, seen: list):
  def clip_by_norm(t, clip_norm, axes=None, name=None):
    clipped = original(t, clip_norm, axes=axes, name=name)
    values = _values(t)
    squares = tf.reduce_sum(tf.square(values), axes, keepdims=False)
    norm = tf.sqrt(tf.reduce_max(squares))
    seen.append(Clip('norm', _caller(), 1, norm,
                     tf.cast(clip_norm, norm.dtype)))
    return clipped
  return clip_by_norm


@contextlib.contextmanager
def watch():
  """While a model_fn builds its graph: records each clip_by_global_norm and
  clip_by_norm call (tf.* and tf.compat.v1.*), in call order."""
  seen: list[Clip] = []
  # The modules themselves (the lazy proxy would take the attribute).
  real = importlib.import_module('tensorflow')
  modules = (real, real.compat.v1)
  wrappers = {'clip_by_global_norm': _global_norm_clip,
              'clip_by_norm': _norm_clip}
  saved = [(module, name, getattr(module, name)) for module in modules
           for name in wrappers]
  for module, name, original in saved:
    setattr(module, name, wrappers[name](original, seen))
  try:
    yield seen
  finally:
    for module, name, original in saved:
      setattr(module, name, original)


def engaged(norms: list) -> list[bool]:
  """Per clip, whether it engaged: [norm, threshold] pairs as a step
  answers them (its norm above its threshold)."""
  return [float(norm) > float(threshold) for norm, threshold in norms]
