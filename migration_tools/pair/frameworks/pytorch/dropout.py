"""Dropout on PyTorch: the legacy step's masks handed to the port's dropout
calls (pair/masks.py), and the dropout calls that draw while it predicts.

PyTorch draws its masks from its own generator, which cannot be made to draw
TF 1's. So while the port takes a step of the dropout check, a
``TorchFunctionMode`` answers each dropout call that draws
(``F.dropout``, which ``nn.Dropout`` calls, ``F.dropout1d/2d/3d`` and
``torch.dropout``, in training and at a rate above 0) with its input scaled
by 1 / (1 - rate), as TF 1 scales it, times the next legacy mask: no change
to the port's code, and every call's place known.

Its other random functions (``torch.rand``, ``Tensor.bernoulli_``, ...) take
no mask: where the masks and the calls do not pair, they are named. The same
watch, while the deterministic checks take the port's steps (dropout built
off), names a step that draws anew (pair/port_draws.py).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
from torch.nn import functional
from torch.overrides import TorchFunctionMode

from migration_tools.pair import masks as masks_lib
from migration_tools.pair import port_draws

# {function: the names of (rate, training, in place) after the input}, as
# each is called.
_DROPOUTS = {
    functional.dropout: ('p', 'training', 'inplace'),
    functional.dropout1d: ('p', 'training', 'inplace'),
    functional.dropout2d: ('p', 'training', 'inplace'),
    functional.dropout3d: ('p', 'training', 'inplace'),
    torch.dropout: ('p', 'train', None),
}
_DEFAULTS = {'p': 0.5, 'training': True, 'inplace': False}

# The random functions a step may draw with besides its dropout: {function:
# its name in a line}.
_RANDOM = {f: f'torch.{f.__name__}' for f in (
    torch.rand, torch.rand_like, torch.randn, torch.randn_like, torch.randint,
    torch.randint_like, torch.randperm, torch.bernoulli, torch.normal,
    torch.poisson, torch.multinomial, functional.alpha_dropout,
    functional.feature_alpha_dropout)}
_RANDOM.update({getattr(torch.Tensor, name): f'Tensor.{name}' for name in (
    'bernoulli', 'bernoulli_', 'uniform_', 'normal_', 'random_',
    'exponential_', 'geometric_', 'log_normal_', 'cauchy_', 'multinomial')})

# What a port whose step draws otherwise does (port_draws' remedy).
REMEDY = ('Draw a dropout with F.dropout or nn.Dropout, following the '
          'module\'s training flag (the dropout check hands them the legacy '
          'masks); leave every draw out when make(params, replicas, dropout) '
          'is given dropout=False')
def _where() -> str:
  """'file.py:12': the innermost frame of the port's code."""
  return masks_lib.calling_site(('torch',))


def _read(func, args: tuple, kwargs: dict):
  """(input, rate, training, in place) of a dropout call; None if func is
  not one."""
  names = _DROPOUTS.get(func)
  if names is None:
    return None
  values = dict(zip([n for n in names if n], args[1:]))
  for name in names:
    if name and name in kwargs:
      values[name] = kwargs[name]
  rate = float(values.get(names[0], _DEFAULTS['p']))
  training = bool(values.get(names[1], True))
  inplace = bool(values.get(names[2], False)) if names[2] else False
  return args[0], rate, training, inplace


class _Given(TorchFunctionMode):
  """Each dropout call that draws takes the next of handed's masks."""

  def __init__(self, handed: masks_lib.Handed):
    super().__init__()
    self.handed = handed

  def __torch_function__(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    read = _read(func, args, kwargs)
    if read is None or not read[2] or read[1] == 0:
      return func(*args, **kwargs)
    x, rate, _, inplace = read
    # A copy: the bundle's arrays are read-only.
    mask = torch.as_tensor(np.array(self.handed.take(tuple(x.shape),
                                                     _where())),
                           dtype=x.dtype, device=x.device)
    scale = 1.0 / (1.0 - rate)
    if inplace:
      return x.mul_(scale).mul_(mask)
    return x * scale * mask


class _Watched(TorchFunctionMode):
  """Records where a dropout call draws; each runs as written."""

  def __init__(self):
    super().__init__()
    self.drawing: list[str] = []

  def __torch_function__(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    read = _read(func, args, kwargs)
    if read is not None and read[2] and read[1] > 0:
      self.drawing.append(_where())
    return func(*args, **kwargs)


class _Draws(TorchFunctionMode):
  """Tells port_draws of each random function the step calls (and of
  each dropout that draws, where dropouts); each runs as written."""

  def __init__(self, dropouts: bool):
    super().__init__()
    self.dropouts = dropouts

  def __torch_function__(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    label = _RANDOM.get(func) if _hashable(func) else None
    if label is None and self.dropouts:
      read = _read(func, args, kwargs)
      if read is not None and read[2] and read[1] > 0:
        label = f'{getattr(func, "__module__", "torch")}.{func.__name__}'
    if label is not None:
      port_draws.drew(_where(), label)
    return func(*args, **kwargs)


def _hashable(func) -> bool:
  try:
    hash(func)
  except TypeError:
    return False
  return True


def watching(dropouts: bool = True) -> contextlib.AbstractContextManager:
  """A scope in which the port's random draws are told to port_draws."""
  return _Draws(dropouts)


@contextlib.contextmanager
def given(masks: list, names: list[str]) -> Iterator[masks_lib.Handed]:
  """The block's dropout calls take masks in order; on leaving, every mask
  must have been taken (masks_lib.Handed.finish). Its other draws take none,
  and are named where the masks and the calls do not pair."""
  handed = masks_lib.Handed(masks, names)
  # The runner's step_as_trained watches (port_draws.stepping), inside this
  # mode: its dropout calls reach _Given.
  with port_draws.recording(lambda: watching(dropouts=False),
                            REMEDY) as draws:
    with masks_lib.naming(draws, REMEDY), _Given(handed):
      yield handed
      handed.finish()


@contextlib.contextmanager
def watched() -> Iterator[list[str]]:
  """The places of the block's dropout calls that draw."""
  mode = _Watched()
  with mode:
    yield mode.drawing
