"""The signals an interruptible block (exits.interruptible) received.

Raising from a signal handler is not enough: the exception is lost where
Python cannot raise it (a weakref callback prints "Exception ignored in"
and goes on), or turned into another error (TensorFlow wraps what a Python
callback raised), or swallowed by a broad except. So each signal is also
remembered here until its block ends, and the points after which something
would stand as finished (a check's result, a renamed output, a report)
call raise_if_signalled.
"""
from kit_core.errors import Interrupted

_RECEIVED: list[str] = []
_CONSEQUENCE: list[str] = []


def received(name: str) -> None:
  _RECEIVED.append(name)


def first() -> str | None:
  """The first signal the blocks around received, or None."""
  return _RECEIVED[0] if _RECEIVED else None


def enter(consequence: str) -> None:
  _CONSEQUENCE.append(consequence)


def leave() -> None:
  _CONSEQUENCE.pop()
  if not _CONSEQUENCE:
    _RECEIVED.clear()


def raise_if_signalled() -> None:
  """Raises Interrupted if an interruptible block around received a signal
  (a no-op outside one)."""
  if _RECEIVED and _CONSEQUENCE:
    raise Interrupted(_RECEIVED[0], _CONSEQUENCE[-1])
