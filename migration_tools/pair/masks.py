"""The legacy step's dropout masks handed to a port's dropout calls, in order,
where its framework's random numbers cannot be aligned with TF 1's (PyTorch):
what every framework's handing shares.

The legacy graph of the dropout check draws; each step answers its masks
(pair/random_ops.masks: 1 where it keeps, 0 where it drops), in the order
the graph made them. The port's k-th dropout call in a step takes the k-th
mask, fitted to its input (``fit``), in place of a draw of its own, and
scales by 1 / (1 - rate) as dropout does. A port whose calls do not pair
with the masks fails with the place named (``DropoutMismatch``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Iterator

import numpy as np

from kit_core.errors import KitError

# Where a dropout is missing, extra or misplaced, in the line's words.
CAUSES = ('a dropout missing, extra or at another place in the port (e.g. the '
          'classifier\'s dropout left out)')


# The kit's own folder: its frames are never the port's.
_KIT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _roots(packages: tuple[str, ...]) -> list[str]:
  """The folders of the packages (those imported) and of the kit."""
  found = [_KIT]
  for name in ('kit_core', *packages):
    module = sys.modules.get(name)
    if module is not None and getattr(module, '__file__', None):
      found.append(os.path.dirname(os.path.abspath(module.__file__)))
  return found


def port_site(frames, packages: tuple[str, ...]) -> str:
  """'file.py:12': the innermost of frames ((filename, line), outermost
  first) in the port's code: not in the packages' folders (the framework
  and its libraries, found by where they are installed, not by a word in a
  path) nor the kit's, nor Python's own (<frozen ...>)."""
  roots = _roots(packages)
  for filename, line in reversed(list(frames)):
    path = os.path.abspath(filename) if not filename.startswith('<') else ''
    if path and not any(path.startswith(root + os.sep) for root in roots):
      return f'{os.path.basename(filename)}:{line}'
  return 'an unknown place'


def calling_site(packages: tuple[str, ...]) -> str:
  """port_site of the current stack."""
  return port_site(((f.filename, f.lineno) for f in traceback.extract_stack()),
                   packages)


class DropoutMismatch(KitError):
  """The port's dropout calls do not pair with the legacy step's masks: the
  line says which call, which mask, and why."""


def draws_text(left: dict[str, str]) -> str:
  """'jax.random.uniform at model.py:12, ...': {call site: draw}."""
  sites = sorted(left)
  return ', '.join(f'{left[s]} at {s}' for s in sites[:3]) + (
      f' and {len(sites) - 3} more' if len(sites) > 3 else '')


@contextlib.contextmanager
def naming(draws, remedy: str) -> Iterator[None]:
  """A DropoutMismatch raised in the block also names the draws of the
  port's step that took no mask (draws.left: {call site: draw}, read as it
  is raised), and what to do (remedy): a mask drawn as uniform < keep is a
  dropout the kit did not see."""
  try:
    yield
  except DropoutMismatch as e:
    if not draws.left:
      raise
    raise DropoutMismatch(
        f'{e}; the step also drew with {draws_text(draws.left)}, which takes '
        f'no mask. {remedy}') from None


def fit(mask: np.ndarray, shape: tuple) -> np.ndarray | None:
  """mask laid out for an input of shape: as it is, broadcast (a noise
  shape such as [batch, 1, 1, 1]), or channels last to channels first (a
  convolution's NHWC mask for an NCHW input); None if none fits."""
  candidates = [mask]
  if mask.ndim == 4:
    candidates.append(np.transpose(mask, (0, 3, 1, 2)))
  for candidate in candidates:
    try:
      return np.broadcast_to(candidate, shape)
    except ValueError:
      continue
  return None


class Handed:
  """One step's masks, taken in order by the port's dropout calls."""

  def __init__(self, masks: list, names: list[str]):
    self.masks, self.names, self.taken = list(masks), list(names), 0

  def _name(self, index: int) -> str:
    return (self.names[index] if index < len(self.names)
            else f'mask {index + 1}')

  def take(self, shape: tuple, where: str) -> np.ndarray:
    """The next mask, fitted to an input of shape, for the dropout call at
    where ('file.py:12').

    Raises:
      DropoutMismatch: no mask is left, or the next does not fit.
    """
    index = self.taken
    if index >= len(self.masks):
      raise DropoutMismatch(
          f'the port\'s dropout at {where} is call {index + 1} of its step, '
          f'where the legacy step drew {len(self.masks)} dropout mask'
          f'{"s" if len(self.masks) != 1 else ""}: {CAUSES}')
    fitted = fit(np.asarray(self.masks[index]), tuple(shape))
    if fitted is None:
      raise DropoutMismatch(
          f'the port\'s dropout call {index + 1} (at {where}) takes a tensor '
          f'of shape {list(shape)}, where the legacy\'s mask {index + 1} '
          f'({self._name(index)}) is {list(np.shape(self.masks[index]))}: '
          f'{CAUSES}')
    self.taken += 1
    return fitted

  def finish(self) -> None:
    """After the port's step: every mask taken.

    Raises:
      DropoutMismatch: the port's step made fewer dropout calls.
    """
    if self.taken < len(self.masks):
      left = [self._name(i) for i in range(self.taken, len(self.masks))]
      raise DropoutMismatch(
          f'the port\'s step made {self.taken} dropout call'
          f'{"s" if self.taken != 1 else ""} where the legacy step drew '
          f'{len(self.masks)} mask{"s" if len(self.masks) != 1 else ""}; '
          f'none took {", ".join(left[:3])}'
          f'{" and more" if len(left) > 3 else ""}: {CAUSES}')
