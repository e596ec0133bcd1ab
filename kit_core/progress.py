"""Progress lines for long work: a line as each unit ends, and while one
runs, a line at least every `interval` seconds saying what it is doing.

  progress = Progress(print_line)
  with progress.heartbeat():
    progress.now('updates (2 replicas): step 3 of 5')  # what runs now
    ...
    progress.line('PASS updates (2 replicas) (41.2 s)')  # a unit ended

A user must be able to tell a slow run from a hung one: the heartbeat is a
daemon thread that only prints, so a signal still reaches the main thread at
once. ``Progress(None)`` (``--quiet``) prints nothing.
"""
import contextlib
import os
import threading
import time
from typing import Callable, Iterator

from kit_core.errors import KitError
from kit_core.errors import printable

# The longest a run may stay silent (the house's rule: a line at least every
# 30 s); KIT_PROGRESS_SECONDS sets another (a test's, a CI log's).
INTERVAL_S = 30.0


def _interval() -> float:
  try:
    return float(os.environ.get('KIT_PROGRESS_SECONDS', INTERVAL_S))
  except ValueError:
    return INTERVAL_S


def to_stdout(text: str) -> None:
  print(text, flush=True)


def elapsed(seconds: float) -> str:
  """'41.2 s', '3 min 05 s'."""
  if seconds < 60:
    return f'{seconds:.1f} s'
  minutes, rest = divmod(int(round(seconds)), 60)
  return f'{minutes} min {rest:02d} s'


class Progress:
  """Lines to `emit` (None: silent); see the module docstring."""

  def __init__(self, emit: Callable[[str], None] | None = to_stdout,
               interval: float | None = None):
    self._emit = emit
    self.interval = _interval() if interval is None else interval
    self._lock = threading.Lock()
    self._doing, self._since = '', time.monotonic()
    self._last_line = time.monotonic()

  def now(self, doing: str) -> None:
    """Says what runs from now on (the heartbeat repeats it)."""
    doing = printable(doing)  # It may name the user's files.
    with self._lock:
      if doing != self._doing:
        self._doing, self._since = doing, time.monotonic()

  def line(self, text: str) -> None:
    """Prints a line (a unit ended)."""
    with self._lock:
      self._last_line = time.monotonic()
      if self._emit is not None:
        self._emit(printable(text))

  def _beat(self) -> None:
    with self._lock:
      quiet_for = time.monotonic() - self._last_line
      doing, since = self._doing, self._since
    if doing and quiet_for >= self.interval:
      self.line(f'... {doing} ({elapsed(time.monotonic() - since)})')

  @contextlib.contextmanager
  def heartbeat(self) -> Iterator['Progress']:
    """While the block runs, a line every `interval` seconds of silence."""
    if self._emit is None:
      yield self
      return
    stop = threading.Event()

    def beat():
      while not stop.wait(min(self.interval / 4, 1.0)):
        try:
          self._beat()
        # stdout closed, or refusing writes (process.OutputRefused, a
        # KitError: the main thread's next line says so): nothing to tell.
        except (OSError, ValueError, KitError):
          return

    thread = threading.Thread(target=beat, name='progress', daemon=True)
    thread.start()
    try:
      yield self
    finally:
      stop.set()
      thread.join(timeout=2)
