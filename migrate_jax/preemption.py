"""SIGTERM and Ctrl-C (SIGINT): save a checkpoint at the step reached, then
stop, as migrate's preemption handler does.

One process holds every device here, so there are no workers to agree on a
step with: the signal is noted, and after the execution of steps under way
(JAX returns to Python between executions) the trainer saves and raises
Preempted; the command ends in one ``stopped:`` line with exit 143 or 130.
"""
import signal
from typing import Callable

from kit_core.errors import Preempted


class Watch:
  """Notes SIGTERM and SIGINT from start() until the caller puts back the
  handlers that were there (kit_core.exits.restore_handlers)."""

  def __init__(self, again: str = 'run the same command again'):
    self._again = again
    self.received: str | None = None

  def start(self) -> dict:
    """Installs the handlers; returns the ones they replace."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, self._note)
    signal.signal(signal.SIGINT, self._note)
    return before

  def _note(self, signum, frame):  # pylint: disable=unused-argument
    if self.received is None:
      self.received = signal.Signals(signum).name

  def save_if_received(self, save: Callable[[], tuple[int, str]]) -> None:
    """After an execution: if a signal came, save() and raise Preempted.

    save: saves a checkpoint; returns (step, its path).
    """
    if self.received is not None:
      step, path = save()
      raise Preempted(step, path, self.received, self._again)
