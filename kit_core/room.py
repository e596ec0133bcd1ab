"""Refusing up front work that the disk or the memory clearly cannot hold.

A tool that runs out of disk halfway through a bundle of several gigabytes,
or is killed by the kernel halfway through a conversion, has cost its user
the time up to there. So a tool estimates, before any work, what it will
write and hold (from the variables' shapes or the files' sizes), and
refuses in one line, with the figure and what to do, when what is free is
clearly short: below SURE of the estimate, so that an estimate a quarter
too high still refuses nothing that would fit.
"""
from __future__ import annotations

import dataclasses
import os

from kit_core.errors import KitError

# Refuse only when what is free is below this share of the estimate.
SURE = 0.8


@dataclasses.dataclass(frozen=True)
class Estimate:
  """What a piece of work needs, in bytes, and how that was reckoned.

  what: the thing written or held ('the bundle').
  disk: bytes written; memory: bytes held at the peak (0: not checked).
  basis: how it was estimated, for the message ('9.5 model-sized arrays
    of 3.3 MB').
  """
  what: str
  disk: int
  memory: int
  basis: str


def available_memory() -> int | None:
  """MemAvailable of /proc/meminfo in bytes; None where there is none."""
  try:
    with open('/proc/meminfo', encoding='ascii') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return None


def free_disk(path: str) -> int | None:
  """Bytes free to an unprivileged writer on the disk path is (or would
  be) on: that of its nearest existing folder; None if none can be read."""
  folder = os.path.abspath(path)
  while not os.path.isdir(folder):
    parent = os.path.dirname(folder)
    if parent == folder:
      return None
    folder = parent
  try:
    stat = os.statvfs(folder)
  except OSError:
    return None
  return stat.f_bavail * stat.f_frsize


def size_text(count: float) -> str:
  """Bytes as a person reads them: '3.8 GB', '512 kB'."""
  for unit, scale in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
    if count >= scale:
      return f'{count / scale:.1f} {unit}'
  return f'{int(count)} bytes'


def check(estimate: Estimate, flag: str, path: str, advice: str,
          free: int | None = None, available: int | None = None) -> None:
  """Raises KitError if the disk under path (flag's) or the memory is
  clearly short of the estimate; advice says what to do instead, besides
  another disk or machine ('' for nothing else).

  free, available: bytes, for a test; None: read from the system (no check
  where it cannot be read).
  """
  free = free_disk(path) if free is None else free
  if free is not None and estimate.disk and free < SURE * estimate.disk:
    raise KitError(
        f'{flag}: {estimate.what} would take about '
        f'{size_text(estimate.disk)} ({estimate.basis}) and '
        f'{os.path.dirname(os.path.abspath(path)) or path} has '
        f'{size_text(free)} free; {_or(advice)}write it to another disk')
  available = available_memory() if available is None else available
  if (available is not None and estimate.memory and
      available < SURE * estimate.memory):
    raise KitError(
        f'{flag}: {estimate.what} would hold about '
        f'{size_text(estimate.memory)} in memory ({estimate.basis}) and '
        f'{size_text(available)} is available; {_or(advice)}run it where '
        'more memory is free')


def _or(advice: str) -> str:
  return f'{advice}, or ' if advice else ''


def files_size(paths: list[str]) -> int:
  """The bytes of these files together (the missing ones count 0)."""
  return sum(os.path.getsize(p) for p in paths if os.path.exists(p))
