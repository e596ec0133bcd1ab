"""The frameworks' own log lines, held back so that a command's lines stand
out.

TensorFlow logs through Python's 'tensorflow' logger, every record twice on
TF 2.15 (its own handler, then absl's on the root logger): a comparison of
the kit's pair at one step on one replica printed 96 lines of deprecation
notices about the legacy code around its own 18. ``hold_back`` stops the
records below ERROR at that logger, before either handler, and writes them
to a file: one given at once (beside the command's report), or one the
command names once it knows where (``write_held_back_to``: the example's
model_dir), the records before it kept for it. Errors still show.
A command's --verbose leaves them as they were.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import sys
import time
from typing import Callable

# The loggers whose records are the frameworks', not the command's.
LOGGERS = ('tensorflow',)
# At most this many lines wait for a file named later (write_to); older
# ones are dropped first.
PENDING_LINES = 5000
# The log's bound: past it, a run that opens it keeps its newest half.
MAX_BYTES = 1 << 20


class HeldBack(logging.Filter):
  """Passes a logger's errors, and the records keep says a user reads;
  writes the rest to path, or keeps them for the file write_to names
  (None: until then), counting them."""

  def __init__(self, path: str | None,
               keep: Callable[[logging.LogRecord], bool] | None = None):
    super().__init__()
    self.path, self.keep = path, keep
    self.count = 0
    # Why path could not be written (then nothing more is), or None.
    self.failure: str | None = None
    self._file = None
    self._pending: list[str] | None = [] if path is None else None
    self._format = logging.Formatter(
        '%(levelname)s:%(name)s: %(message)s')

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR or (
        self.keep is not None and self.keep(record)):
      return True
    self.take([self._format.format(record)])
    return False

  def take(self, lines: list[str]) -> None:
    """Holds lines back as it holds the logger's records."""
    self.count += len(lines)
    if self._pending is not None:
      self._pending.extend(lines)
      del self._pending[:-PENDING_LINES]
    else:
      self._write(lines, 'w')

  def write_to(self, path: str) -> None:
    """From now on, writes to path, appended to (a resumed run's follows
    the one before), what was held back since the start first."""
    if self._pending is None:
      return  # A file was given from the start.
    self.path = path
    pending, self._pending = self._pending, None
    self._write([f'--- {time.strftime("%Y-%m-%d %H:%M:%S")}: a new run'] +
                pending, 'a')

  def _write(self, lines: list[str], mode: str) -> None:
    if self.path is None:
      return
    try:
      if self._file is None:
        self._file = _open_log(self.path, truncate=mode == 'w')
      self._file.write(''.join(line + '\n' for line in lines))
      self._file.flush()
    except OSError as e:
      # A log that cannot be written is dropped, and why is kept.
      self.failure = f'{self.path}: {e.strerror or e}'
      self.path = None


def _open_log(path: str, truncate: bool):
  """path opened for appending, if it is a regular file or none: never
  through a symbolic link (a user's file it points at), never blocking (a
  FIFO with no reader, a device), trimmed to its newest half past
  MAX_BYTES.

  Raises:
    OSError: it is a link, a folder or another special file, or cannot be
      written.
  """
  fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC |
               getattr(os, 'O_NOFOLLOW', 0) | (os.O_TRUNC if truncate else 0),
               0o644)
  try:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
      raise OSError(errno.EINVAL, 'not a regular file')
    os.set_blocking(fd, True)
    size = os.lseek(fd, 0, os.SEEK_END)
    if size > MAX_BYTES:
      _trim(fd, size)
    return os.fdopen(fd, 'a', encoding='utf-8')
  except BaseException:
    os.close(fd)
    raise


def _trim(fd: int, size: int) -> None:
  """Keeps the newest half of the log (from a line's start), said."""
  os.lseek(fd, size - MAX_BYTES // 2, os.SEEK_SET)
  tail = os.read(fd, MAX_BYTES // 2)
  tail = tail[tail.find(b'\n') + 1:]
  os.ftruncate(fd, 0)
  os.lseek(fd, 0, os.SEEK_SET)
  text = (f'--- older lines trimmed: this log keeps its newest '
          f'{MAX_BYTES // 2 // 1024} KB\n').encode() + tail
  while text:
    text = text[os.write(fd, text):]


def hold_back(path: str | None = None,
              keep: Callable[[logging.LogRecord], bool] | None = None
              ) -> HeldBack:
  """Holds back the frameworks' records below ERROR, but those keep passes,
  from now on, in path or, if None, for write_held_back_to; returns the
  filter, to say how many it held."""
  held = HeldBack(path, keep)
  for name in LOGGERS:
    logging.getLogger(name).addFilter(held)
  return held


def _held_back() -> list[HeldBack]:
  """The filters hold_back put on LOGGERS (none under --verbose)."""
  return [f for name in LOGGERS for f in logging.getLogger(name).filters
          if isinstance(f, HeldBack)]


def write_held_back_to(path: str) -> bool:
  """Writes what hold_back held, and will hold, with no file given, to path
  (appended to); False if nothing is held back (--verbose)."""
  held = _held_back()
  for f in held:
    f.write_to(path)
  return bool(held)


def failure() -> str | None:
  """Why the held-back records cannot be written where they go (the path
  and the reason), or None."""
  return next((f.failure for f in _held_back() if f.failure), None)


def hold_native_lines(text: str) -> None:
  """Native libraries' lines taken from stderr (process.native_stderr_held)
  go where the frameworks' records go: held back with them, or, if nothing
  is (--verbose), to stderr."""
  held = _held_back()
  if held:
    held[0].take(text.splitlines())
  else:
    sys.stderr.write(text)
