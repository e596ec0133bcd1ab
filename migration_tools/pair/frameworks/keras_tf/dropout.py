"""Dropout on Keras 3 (TensorFlow): the legacy step's masks handed to the
port's dropout calls (pair/masks.py), and the draws it makes while it
predicts.

Keras 3 draws its masks from its own seed generator (stateless ops), which
cannot be made to draw TF 1's. While the dropout check's port is traced and
stepped, its dropout calls take the legacy masks in order instead:

- Keras 3's ``Dropout`` (every Keras 3 dropout goes through the TensorFlow
  backend's ``random.dropout``) and ``tf.nn.dropout``: the input times the
  mask over the keep probability;
- drop connect and dropout written by hand, ``tf.floor(keep +
  tf.random.uniform(...))`` and ``tf.cast(tf.random.uniform(...) >= rate)``
  (own_draws reads them): the mask in the floor's or the cast's place.

The port's step is a ``tf.function`` traced once: each call becomes a
``tf.numpy_function`` that takes the next mask of the step being run when
it runs (stateful, so a step's calls run in the order its code makes them),
and one trace serves every step. Such a step cannot be compiled with XLA
(``jit_compile=True``); the dropout check's line then says so.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

import numpy as np
import tensorflow as tf

from migration_tools.pair import masks as masks_lib
from migration_tools.pair.frameworks.keras_tf import own_draws


class _Step:
  """The masks of the step being run, and what went wrong taking them (a
  numpy_function's error reaches TensorFlow's caller only as its text)."""
  handed: masks_lib.Handed | None = None
  error: Exception | None = None


def _take(shape, where: str, dtype) -> np.ndarray:
  handed = _Step.handed
  if handed is None:
    _Step.error = masks_lib.DropoutMismatch(
        f'the port\'s dropout at {where} ran outside the dropout check\'s '
        'steps (a step traced with the legacy masks, run again later)')
    raise _Step.error
  try:
    return np.asarray(handed.take(tuple(int(d) for d in shape), where),
                      dtype=dtype)
  except masks_lib.DropoutMismatch as e:
    _Step.error = e
    raise


def mask_like(x, where: str | None = None, dtype=None):
  """The next legacy mask, laid out for x (1 kept, 0 dropped), in dtype
  (x's by default): taken when the op runs. where: the call's place; None:
  read from the op's traceback, which maps autograph's code back to the
  port's."""
  dtype = tf.as_dtype(dtype or x.dtype)
  place = {'where': where}
  mask = tf.numpy_function(
      lambda shape: _take(shape, place['where'], dtype.as_numpy_dtype),
      [tf.shape(x)], dtype, stateful=True, name='kit_legacy_dropout_mask')
  if place['where'] is None:
    place['where'] = own_draws.site(
        mask.op if tf.inside_function() else None)
  mask.set_shape(x.shape)
  return mask


def _keras_backend_random():
  """Keras 3's TensorFlow backend's random module (where every Keras 3
  dropout draws), or None on Keras 2."""
  try:
    return importlib.import_module('keras.src.backend.tensorflow.random')
  except ImportError:
    return None


@contextlib.contextmanager
def _dropouts(replacement) -> Iterator[None]:
  """Keras 3's backend dropout and tf.nn.dropout are replacement(original,
  inputs, rate) in the block."""
  backend = _keras_backend_random()
  nn = importlib.import_module('tensorflow').nn
  saved = [(nn, 'dropout', nn.dropout)]
  if backend is not None:
    saved.append((backend, 'dropout', backend.dropout))
  for module, name, original in saved:
    setattr(module, name, _wrapped(original, replacement))
  try:
    yield
  finally:
    for module, name, original in saved:
      setattr(module, name, original)


def _wrapped(original, replacement):
  def dropout(inputs, rate=None, **kwargs):
    if rate is None:  # tf.nn.dropout(x, keep_prob=...) is TF 1's.
      return original(inputs, **kwargs)
    return replacement(original, inputs, rate, kwargs)
  return dropout


@contextlib.contextmanager
def given(masks: list, names: list[str]) -> Iterator[masks_lib.Handed]:
  """The block's dropout calls (and those of a step traced in an earlier
  block) take masks in order; on leaving, every mask must have been taken
  (masks_lib.Handed.finish).

  Raises:
    masks_lib.DropoutMismatch: a call with no mask left, a mask that fits
      no input, or masks no call took.
  """
  handed = masks_lib.Handed(masks, names)

  def taken(original, inputs, rate, kwargs):
    del original, kwargs  # The mask is laid out for the input.
    if isinstance(rate, (int, float)) and rate == 0:
      return inputs
    mask = mask_like(inputs)
    return inputs * mask / tf.cast(1 - rate, inputs.dtype)

  _Step.handed, _Step.error = handed, None
  try:
    with _dropouts(taken), own_draws.handed(mask_like) as draws:
      # Its other draws (own_draws' left) are named beside a mismatch.
      with masks_lib.naming(draws, own_draws.REMEDY):
        with _the_mismatch_raised():
          yield handed
        handed.finish()
  finally:
    _Step.handed = None


@contextlib.contextmanager
def _the_mismatch_raised() -> Iterator[None]:
  """The DropoutMismatch a mask's numpy_function raised, raised as itself
  (TensorFlow hands on its text only); XLA's refusal of a numpy_function
  said as such."""
  try:
    yield
  except masks_lib.DropoutMismatch:
    raise
  except Exception as e:  # pylint: disable=broad-except
    if _Step.error is not None:
      raise _Step.error from None
    if 'XlaCompile' in str(e) or 'numpy_function' in str(e).lower():
      raise masks_lib.DropoutMismatch(
          'the port\'s step is compiled with XLA (jit_compile=True), where '
          'the legacy masks cannot be handed to its dropout calls: compare '
          'with jit_compile off') from e
    raise


def _keras2_generator():
  """Keras 2's RandomGenerator (every Keras 2 dropout draws through its
  dropout method), or None on Keras 3."""
  try:
    backend = importlib.import_module('keras.src.backend')
  except ImportError:
    return None
  return getattr(backend, 'RandomGenerator', None)


@contextlib.contextmanager
def watched() -> Iterator[list[str]]:
  """The places of the block's dropout draws (each drawn as written), on
  Keras 3 and on Keras 2."""
  drawing: list[str] = []

  def recorded(original, inputs, rate, kwargs):
    if not (isinstance(rate, (int, float)) and rate == 0):
      drawing.append(own_draws.site())
    return original(inputs, rate, **kwargs)

  generator = _keras2_generator()
  saved = generator.dropout if generator is not None else None
  if generator is not None:
    generator.dropout = lambda self, inputs, rate, *args, **kwargs: (
        recorded(lambda x, r, **k: saved(self, x, r, *args, **k), inputs,
                 rate, kwargs))
  try:
    with _dropouts(recorded):
      yield drawing
  finally:
    if generator is not None:
      generator.dropout = saved
