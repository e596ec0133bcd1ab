""".npz files read without trusting them: every size they declare checked
before anything is allocated, no pickle, no FIFO opened.

An .npz is a zip of .npy entries. Each entry's header declares its shape
and dtype, and the zip its uncompressed size; numpy would allocate what the
header declares (an array of shape 2**40 ends in a MemoryError) and inflate
whatever the zip holds (a 4.6 MB file of zeros inflates to 3.3 GB). Here
the headers are read first, a few bytes each: an entry whose header and
zip size disagree is damaged, and what the arrays asked for declare
together must fit in the memory this machine has free. Only then are they
read, and only those asked for (an unreferenced entry costs nothing).
"""
from __future__ import annotations

import math
import os
import stat
import zipfile
import zlib

import numpy as np

from kit_core import room
from kit_core.errors import KitError
from kit_core.errors import one_line


class Damaged(KitError):
  """The file is damaged or is not an .npz of arrays: its writer must make
  it again (the caller says how). reason: what was found, in one line."""

  def __init__(self, message: str, reason: str):
    super().__init__(message)
    self.reason = reason


def _regular(path: str, what: str) -> None:
  """Refuses a path that is not a regular file: a FIFO would block the read
  for ever, a device never end."""
  try:
    mode = os.stat(path).st_mode
  except OSError as e:
    raise KitError(f'cannot read {what} {path}: {e.strerror}') from e
  if not stat.S_ISREG(mode):
    raise KitError(f'{what} {path} is not a regular file (a FIFO, a socket '
                   'or a device): give the file itself')


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo
            ) -> tuple[tuple, np.dtype]:
  """An entry's shape and dtype, from its first bytes; ValueError if its
  header is not an array's or disagrees with the zip's size for it."""
  with archive.open(info) as entry:
    version = np.lib.format.read_magic(entry)
    if version == (1, 0):
      shape, _, dtype = np.lib.format.read_array_header_1_0(entry)
    else:
      shape, _, dtype = np.lib.format.read_array_header_2_0(entry)
    header_bytes = entry.tell()
  if dtype.hasobject:
    raise ValueError(f'{info.filename} holds Python objects (a pickle), '
                     'which is never read')
  nbytes = math.prod(shape) * dtype.itemsize
  if header_bytes + nbytes != info.file_size:
    raise ValueError(f'{info.filename} declares {nbytes} bytes of array '
                     f'and the zip {info.file_size - header_bytes}')
  return shape, dtype


def headers(path: str, what: str) -> dict[str, tuple[tuple, np.dtype]]:
  """{array name: (shape, dtype)} of every entry, read from the headers.

  Raises:
    KitError: not a regular file, not a zip, or an entry damaged or of
      Python objects.
  """
  _regular(path, what)
  try:
    with zipfile.ZipFile(path) as archive:
      found = {}
      for info in archive.infolist():
        if not info.filename.endswith('.npy'):
          raise ValueError(f'{info.filename} is not an array')
        found[info.filename[:-4]] = _header(archive, info)
  except (zipfile.BadZipFile, ValueError, EOFError, OSError, zlib.error,
          NotImplementedError) as e:
    raise Damaged(f'{what} {path} is damaged or not an .npz of arrays '
                  f'({one_line(e)})', one_line(e)) from e
  return found


def nbytes(shape: tuple, dtype: np.dtype) -> int:
  return math.prod(shape) * dtype.itemsize


def check_room(path: str, what: str, declared: dict) -> None:
  """Refuses arrays that together declare more than the free memory."""
  total = sum(nbytes(*v) for v in declared.values())
  free = room.available_memory()
  if free is not None and total > free:
    raise KitError(f'{what} {path} declares {room.size_text(total)} of '
                   f'arrays, more than the {room.size_text(free)} of memory '
                   'free here: it is damaged or not what it claims to be')


def load(path: str, what: str, names: list[str] | None = None
         ) -> dict[str, np.ndarray]:
  """The arrays named (all if None), each checked by its header first.

  Args:
    path: the .npz.
    what: what it is, for the messages ('checkpoint', 'the bundle').
    names: the arrays to read; others are never read.

  Raises:
    KitError: see headers; a name it lacks; arrays past the free memory;
      damage found while reading.
  """
  declared = headers(path, what)
  wanted = list(declared) if names is None else names
  missing = [n for n in wanted if n not in declared]
  if missing:
    raise KitError(f'{what} {path} lacks {", ".join(missing[:3])}')
  check_room(path, what, {n: declared[n] for n in wanted})
  try:
    with np.load(path, allow_pickle=False) as found:
      return {name: found[name] for name in wanted}
  except (zipfile.BadZipFile, ValueError, EOFError, OSError,
          zlib.error) as e:
    raise Damaged(f'{what} {path} is damaged ({one_line(e)})',
                  one_line(e)) from e
