"""Finding checkpoints by their files, and reading one in full.

A checkpoint is found from its files, not only from the ``checkpoint`` state
file: a model_dir copied without it, or with one that is garbage or names a
deleted checkpoint, still holds its training, and a restart must resume it
rather than start at step 0 over it. A checkpoint is read in full, so that a
truncated or corrupt one fails at once, in one line, rather than halfway
through a restore or a conversion.
"""
import glob
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from kit_core.errors import KitError
from kit_core.errors import one_line

# What TensorFlow raises for a checkpoint it cannot read: its OpErrors,
# OSError, and IndexError for data cut short ('Read less bytes than
# requested').
READ_ERRORS = (tf.errors.OpError, OSError, IndexError)


STATE_FILE = 'checkpoint'
_NUMBERED = re.compile(r'-(\d+)$')


def _listed(directory: str) -> tuple[list[str], str | None]:
  """The checkpoints the state file lists, oldest first, and why it cannot
  be used as it is (None if it can)."""
  if not os.path.exists(os.path.join(directory, STATE_FILE)):
    return [], 'is missing'
  try:
    state = tf.train.get_checkpoint_state(directory)
  except (tf.errors.OpError, ValueError, UnicodeDecodeError):
    state = None
  if state is None:
    return [], 'cannot be read'
  listed = list(state.all_model_checkpoint_paths)
  if state.model_checkpoint_path not in listed:
    listed.append(state.model_checkpoint_path)
  listed = [p if os.path.isabs(p) else os.path.join(directory, p)
            for p in listed if p]
  gone = [p for p in listed if not os.path.exists(p + '.index')]
  if gone:
    return listed, f'names {os.path.basename(gone[-1])}, which is gone'
  return listed, None


def _step(path: str) -> int:
  found = _NUMBERED.search(path)
  return int(found.group(1)) if found else -1


def find(directory: str) -> list[str]:
  """Every checkpoint in directory, newest (highest step) first: those the
  state file lists and any other whose .index file is there."""
  listed, _ = _listed(directory)
  paths = {p[:-len('.index')]
           for p in glob.glob(os.path.join(glob.escape(directory), '*.index'))}
  paths |= {p for p in listed if os.path.exists(p + '.index')}
  return sorted(paths, key=lambda p: (_step(p), os.path.getmtime(p + '.index')),
                reverse=True)


def latest(directory: str) -> str | None:
  """The newest checkpoint in directory by its files (tf.train.
  latest_checkpoint reads the state file only)."""
  found = find(directory)
  return found[0] if found else None


def record_state(directory: str, found: list[str], chosen: str) -> None:
  """Makes chosen, one of found (find's list), the checkpoint that
  directory's state file names, the older ones of found kept; with a line
  when the file was missing or wrong: TensorFlow's own restore and
  CheckpointManager read only that file."""
  listed, problem = _listed(directory)
  wanted = found[found.index(chosen):][::-1]  # Oldest first.
  if problem is None and listed == wanted:
    return
  if problem:
    logging.warning('The checkpoint state file in %s %s: resuming from %s, '
                    'the newest checkpoint found among the files', directory,
                    problem, os.path.basename(chosen))
  tf.compat.v1.train.update_checkpoint_state(
      directory, os.path.basename(chosen),
      all_model_checkpoint_paths=[os.path.basename(p) for p in wanted])


class UnreadableCheckpoint(KitError):
  """A checkpoint that cannot be read in full; reason is one line."""

  def __init__(self, path: str, reason: str):
    super().__init__(f'checkpoint {path} cannot be read ({reason}); point at '
                     'a complete checkpoint')
    self.reason = reason


def read_all(path: str) -> dict[str, np.ndarray]:
  """Every tensor of the checkpoint at path, by name (each CRC checked).

  Raises:
    UnreadableCheckpoint: a file is missing, truncated or corrupt.
  """
  try:
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}
  except READ_ERRORS as e:
    raise UnreadableCheckpoint(path, one_line(e)) from e
