"""The frameworks' own log lines, held back so that a command's lines stand
out.

TensorFlow logs through Python's 'tensorflow' logger, every record twice on
TF 2.15 (its own handler, then absl's on the root logger): a comparison of
the kit's pair at one step on one replica printed 96 lines of deprecation
notices about the legacy code around its own 18. ``hold_back`` stops the
records below ERROR at that logger, before either handler, and writes them
to a file (beside the command's report, one per run) or drops them;
errors still show.
A command's --verbose leaves them as they were.
"""
from __future__ import annotations

import logging
from typing import Callable

# The loggers whose records are the frameworks', not the command's.
LOGGERS = ('tensorflow',)


class HeldBack(logging.Filter):
  """Passes a logger's errors, and the records keep says a user reads;
  writes the rest to path (None: drops them), counting them."""

  def __init__(self, path: str | None,
               keep: Callable[[logging.LogRecord], bool] | None = None):
    super().__init__()
    self.path, self.keep = path, keep
    self.count = 0
    self._file = None
    self._format = logging.Formatter(
        '%(levelname)s:%(name)s: %(message)s')

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR or (
        self.keep is not None and self.keep(record)):
      return True
    self.count += 1
    if self.path is not None:
      try:
        if self._file is None:
          self._file = open(self.path, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
        self._file.write(self._format.format(record) + '\n')
        self._file.flush()
      except OSError:
        self.path = None  # A log that cannot be written is dropped.
    return False


def hold_back(path: str | None = None,
              keep: Callable[[logging.LogRecord], bool] | None = None
              ) -> HeldBack:
  """Holds back the frameworks' records below ERROR, but those keep passes,
  from now on, in path (appended to) or nowhere; the filter, to say how
  many it held."""
  held = HeldBack(path, keep)
  for name in LOGGERS:
    logging.getLogger(name).addFilter(held)
  return held
