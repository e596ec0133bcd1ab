"""The random numbers a port's own steps draw, on frameworks whose runs are
ArrayRunners (JAX, PyTorch): recorded with their call sites while the steps
of the deterministic checks run, so that a step that draws anew is named by
``one_step`` (the report's ``port_draws``) instead of failing under another
check's hint; and, in the dropout check, a draw that took no legacy mask is
named beside the mismatch it caused.

A port is built with its dropout off for those checks (``make(...,
dropout=False)``); a draw left in its step (a dropout that does not follow
that flag, noise added to the inputs, a mask drawn with ``uniform < keep``)
gives a step that cannot be compared at identical state. Only the port's
steps are watched: its initialisation draws as it likes.

Each framework says how it watches (``recording(watch)``): JAX records the
``jax.random`` draws its step makes while it is traced (arrays/dropout.py),
PyTorch the random functions its step dispatches (pytorch/dropout.py).
``keras_tf/own_draws.py`` does the same for a Keras port's traced graph, and
puts the mask forms TF 1 uses at their expectation.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator


@dataclasses.dataclass
class Draws:
  """{call site ('file.py:12'): the draw ('jax.random.uniform')}, and what a
  port whose step draws so does instead (its framework's words)."""
  remedy: str
  drawn: dict = dataclasses.field(default_factory=dict)

  @property
  def left(self) -> dict[str, str]:
    # Nothing is put at its expectation here: every draw is left.
    return dict(self.drawn)

  def to_json(self) -> dict:
    # The fields of keras_tf/own_draws.Draws: one_step reads either.
    return {'switched_off': {}, 'left': self.left, 'remedy': self.remedy}


class _Scope:
  """The record of the current scope and its watch; None outside one."""
  draws: Draws | None = None
  watch: Callable[[], contextlib.AbstractContextManager] | None = None


@contextlib.contextmanager
def recording(watch: Callable[[], contextlib.AbstractContextManager],
              remedy: str) -> Iterator[Draws]:
  """A scope in which each step (stepping()) is taken inside watch(), which
  calls drew() for each draw it sees."""
  previous = (_Scope.draws, _Scope.watch)
  _Scope.draws, _Scope.watch = Draws(remedy), watch
  try:
    yield _Scope.draws
  finally:
    _Scope.draws, _Scope.watch = previous


@contextlib.contextmanager
def stepping() -> Iterator[None]:
  """Around a port's step: watched where a scope records."""
  if _Scope.watch is None:
    yield
    return
  with _Scope.watch():
    yield


def drew(site: str, what: str) -> None:
  """A watch saw the port's step draw: what, at site."""
  if _Scope.draws is not None:
    _Scope.draws.drawn.setdefault(site, what)


def current() -> dict | None:
  """What the current scope recorded (Draws.to_json), or None outside one."""
  return None if _Scope.draws is None else _Scope.draws.to_json()
