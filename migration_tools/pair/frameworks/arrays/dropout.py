"""Dropout on JAX: the legacy step's masks handed to the port's dropout
draws (pair/masks.py), and the draws it makes while it predicts.

JAX's random numbers cannot be made to draw TF 1's. Keras 3's Dropout on
JAX, Flax's ``nn.Dropout`` and a dropout written by hand draw their masks
with ``jax.random.bernoulli(key, keep, shape)``; while the port takes a step
of the dropout check, that function answers the next legacy mask, fitted to
the shape asked. The port's jit-compiled step is traced again for each step
(``jax.clear_caches``): a mask is a constant of the trace that takes it.
A draw in another form (``jax.random.uniform(key, shape) < keep``) takes no
mask: the check says which the legacy drew that no call took, and names the
draw. The same watch of ``jax.random``'s draws, while the deterministic
checks take the port's steps (dropout built off), names a step that draws
anew (pair/port_draws.py): it is recorded as the step is traced.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from migration_tools.pair import masks as masks_lib
from migration_tools.pair import port_draws

# The libraries a port's dropout is drawn through: never the port's frames.
_LIBRARIES = ('jax', 'jaxlib', 'keras', 'flax', 'optax')

# The jax.random functions that draw (split, fold_in and key make none).
_DRAWS = ('uniform', 'normal', 'bernoulli', 'randint', 'truncated_normal',
          'categorical', 'gumbel', 'choice', 'permutation', 'exponential',
          'rademacher', 'bits', 'laplace', 'logistic', 'gamma', 'beta',
          'poisson', 'cauchy', 'dirichlet', 'multivariate_normal')

# What a port whose step draws otherwise does (port_draws' remedy).
REMEDY = ('Draw a dropout with jax.random.bernoulli(key, keep, shape) (or '
          'Keras\'s or Flax\'s Dropout), which the dropout check hands the '
          'legacy masks; leave every draw out when make(params, replicas, '
          'dropout) is given dropout=False')


def _where() -> str:
  """'file.py:12': the innermost frame of the port's code."""
  return masks_lib.calling_site(_LIBRARIES)


def _shape(args: tuple, kwargs: dict) -> tuple:
  """The shape a bernoulli(key, p, shape) call asks for."""
  shape = kwargs.get('shape', args[2] if len(args) > 2 else None)
  if shape is None:
    p = kwargs.get('p', args[1] if len(args) > 1 else 0.5)
    shape = np.shape(p)
  return tuple(int(d) for d in shape)


@contextlib.contextmanager
def _bernoulli(replacement) -> Iterator[None]:
  """jax.random.bernoulli is replacement(original, args, kwargs) in the
  block, every jit-compiled function traced again on its next call."""
  import jax  # pylint: disable=g-import-not-at-top
  original = jax.random.bernoulli
  jax.clear_caches()
  jax.random.bernoulli = lambda *args, **kwargs: replacement(
      original, args, kwargs)
  try:
    yield
  finally:
    jax.random.bernoulli = original
    # The traces that took these masks as constants go with them.
    jax.clear_caches()


@contextlib.contextmanager
def watching(but: tuple[str, ...] = ()) -> Iterator[None]:
  """In the block, each jax.random draw (_DRAWS, but those named) the
  port's code makes is told to port_draws.drew, and then drawn."""
  import jax  # pylint: disable=g-import-not-at-top
  saved = {name: getattr(jax.random, name) for name in _DRAWS
           if name not in but and hasattr(jax.random, name)}

  def told(original, label):
    def draw(*args, **kwargs):
      port_draws.drew(_where(), label)
      return original(*args, **kwargs)
    return draw

  for name, original in saved.items():
    setattr(jax.random, name, told(original, f'jax.random.{name}'))
  try:
    yield
  finally:
    for name, original in saved.items():
      setattr(jax.random, name, original)


@contextlib.contextmanager
def given(masks: list, names: list[str]) -> Iterator[masks_lib.Handed]:
  """The block's bernoulli draws take masks in order; on leaving, every
  mask must have been taken (masks_lib.Handed.finish). Its other draws take
  none, and are named where the masks and the calls do not pair."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  handed = masks_lib.Handed(masks, names)

  def taken(original, args, kwargs):
    del original
    return jnp.asarray(handed.take(_shape(args, kwargs), _where()))

  with port_draws.recording(lambda: watching(but=('bernoulli',)),
                            REMEDY) as draws:
    # The runner's step_as_trained watches (port_draws.stepping).
    with masks_lib.naming(draws, REMEDY), _bernoulli(taken):
      yield handed
      handed.finish()


@contextlib.contextmanager
def watched() -> Iterator[list[str]]:
  """The places of the block's bernoulli draws (each drawn as written)."""
  drawing: list[str] = []

  def recorded(original, args, kwargs):
    drawing.append(_where())
    return original(*args, **kwargs)

  with _bernoulli(recorded):
    yield drawing
