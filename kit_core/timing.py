"""Where a long command's time goes: named phases timed as they run
(building the legacy graphs, its Session.run calls, exports, XLA compiles,
writing), for a line at the end of the command and its report.

Each second is counted once: a phase inside another counts for the inner
one alone. What no phase claims is the command's own work (for
migration-compare: the port's steps and the checks' arithmetic), reported
as ``other``.

  with timing.spent('exports'):
    ...
  print(timing.LEDGER.line())
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator


class Ledger:
  """Seconds by phase since the ledger was (re)started, by clock."""

  def __init__(self, clock: Callable[[], float] = time.monotonic):
    self._clock = clock
    self.restart()

  def restart(self) -> None:
    self._began = self._clock()
    self._totals: dict[str, float] = {}
    # Per open phase, the seconds its nested phases took (theirs, not its).
    self._nested: list[float] = []

  @contextlib.contextmanager
  def spent(self, phase: str) -> Iterator[None]:
    """Counts the block's time, less its nested phases', for phase."""
    start = self._clock()
    self._nested.append(0.0)
    try:
      yield
    finally:
      elapsed = self._clock() - start
      nested = self._nested.pop()
      self._totals[phase] = self._totals.get(phase, 0.0) + elapsed - nested
      if self._nested:
        self._nested[-1] += elapsed

  def totals(self) -> dict[str, float]:
    """{phase: seconds}, largest first, then 'other' (the rest of the time
    since restart) and 'total'."""
    total = self._clock() - self._began
    phases = dict(sorted(self._totals.items(), key=lambda kv: -kv[1]))
    return {**phases, 'other': max(total - sum(phases.values()), 0.0),
            'total': total}

  def line(self) -> str:
    """'Time: 95 s: 40 s Session.run, 30 s legacy graph building, ...'."""
    totals = self.totals()
    total = totals.pop('total')
    return f'Time: {total:.0f} s: ' + ', '.join(
        f'{seconds:.0f} s {phase}' for phase, seconds in totals.items())


# The process's ledger: commands restart it as they begin.
LEDGER = Ledger()
spent = LEDGER.spent
