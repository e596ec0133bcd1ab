"""What an interrupted run leaves behind, found by exact name and removed.

A process killed while TensorFlow writes a checkpoint leaves ``<prefix>-N_temp/``
(TF writes the shards there, then renames them into place); one killed while
the kit writes a file or folder leaves ``.tmp-XXXXXXXX`` and its suffix
(``atomic.TEMP_NAME``). Only those exact names are touched.
"""
import os
import re
import shutil

from absl import logging

from kit_core import atomic


_ANY_CHECKPOINT_TEMP = re.compile(r'[\w.]+-\d+_temp')


def checkpoint_temp(prefix: str) -> re.Pattern:
  """The temporary folder TF writes a checkpoint `prefix`-N into."""
  return re.compile(re.escape(prefix) + r'-\d+_temp')


def remove(directory: str, pattern: re.Pattern, what: str) -> list[str]:
  """Removes the entries of directory whose whole name matches pattern;
  returns their names. Logs one line when it removed any."""
  try:
    names = sorted(n for n in os.listdir(directory) if pattern.fullmatch(n))
  except OSError:
    return []  # No such directory yet: nothing was left.
  removed = []
  for name in names:
    path = os.path.join(directory, name)
    try:
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
      removed.append(name)
    except OSError as e:
      logging.warning('Could not remove %s left by an interrupted run: %s',
                      path, e.strerror)
  if removed:
    logging.info('Removed %s left by an interrupted run in %s: %s', what,
                 directory, ', '.join(removed))
  return removed


def remove_unfinished(path: str | None) -> None:
  """Removes the unfinished checkpoint folder or temporary data file that
  path lies in (a write that failed, e.g. on a full disk), if it is one."""
  if not path:
    return
  parts = os.path.abspath(path).split(os.sep)
  for depth in range(len(parts), 1, -1):
    name = parts[depth - 1]
    if _ANY_CHECKPOINT_TEMP.fullmatch(name) or atomic.TEMP_NAME.fullmatch(name):
      remove(os.sep.join(parts[:depth - 1]) or os.sep, re.compile(
          re.escape(name)), 'an unfinished write')
      return
