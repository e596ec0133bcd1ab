"""Finding checkpoints by their files, and reading one in full.

A checkpoint is found from its files, not only from the ``checkpoint`` state
file: a model_dir copied without it, or with one that is garbage or names a
deleted checkpoint, still holds its training, and a restart must resume it
rather than start at step 0 over it. A checkpoint is read in full, so that a
truncated or corrupt one fails at once, in one line, rather than halfway
through a restore or a conversion.

Where TensorFlow is not installed (the jax profile), the state file is read
as the text it is and a checkpoint by ``tensor_bundle``, with numpy alone.
"""
import codecs
import glob
import os
import re

from absl import logging
import numpy as np

from kit_core import lazy
from kit_core import tensor_bundle
from kit_core.errors import KitError
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf


def _read_errors() -> tuple:
  """What TensorFlow raises for a checkpoint it cannot read: its OpErrors,
  OSError, and IndexError for data cut short ('Read less bytes than
  requested')."""
  return (tf.errors.OpError, OSError, IndexError)


def __getattr__(name: str):
  """READ_ERRORS (_read_errors), made on first use: it names TensorFlow's
  errors, and this module loads where there is no TensorFlow."""
  if name == 'READ_ERRORS':
    return _read_errors()
  raise AttributeError(name)


STATE_FILE = 'checkpoint'
_NUMBERED = re.compile(r'-(\d+)$')


def _listed(directory: str) -> tuple[list[str], str | None]:
  """The checkpoints the state file lists, oldest first, and why it cannot
  be used as it is (None if it can)."""
  if not os.path.exists(os.path.join(directory, STATE_FILE)):
    return [], 'is missing'
  state = _read_state(directory)
  if state is None:
    return [], 'cannot be read'
  newest, listed = state
  if newest not in listed:
    listed.append(newest)
  listed = [p if os.path.isabs(p) else os.path.join(directory, p)
            for p in listed if p]
  gone = [p for p in listed if not os.path.exists(p + '.index')]
  if gone:
    return listed, f'names {os.path.basename(gone[-1])}, which is gone'
  return listed, None


_STATE_LINE = re.compile(r'^(\w+): (?:"((?:[^"\\]|\\.)*)"|[-+.\w]+)$')


def _read_state(directory: str) -> tuple[str, list[str]] | None:
  """(model_checkpoint_path, all_model_checkpoint_paths) of the state file
  (a CheckpointState in protobuf's text format), or None if it cannot be
  read: by TensorFlow where it is installed, else line by line."""
  if lazy.installed('tensorflow'):
    try:
      state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError, UnicodeDecodeError):
      return None
    return (None if state is None else
            (state.model_checkpoint_path,
             list(state.all_model_checkpoint_paths)))
  newest, listed = None, []
  try:
    with open(os.path.join(directory, STATE_FILE), encoding='utf-8') as f:
      lines = [line.strip() for line in f if line.strip()]
  except (OSError, UnicodeDecodeError):
    return None
  for line in lines:
    found = _STATE_LINE.match(line)
    if not found:
      return None
    if found.group(2) is None:
      continue  # A timestamp.
    value = codecs.escape_decode(found.group(2).encode())[0].decode('utf-8')
    value = os.path.join(directory, value)  # As TensorFlow does: if relative.
    if found.group(1) == 'model_checkpoint_path':
      newest = value
    elif found.group(1) == 'all_model_checkpoint_paths':
      listed.append(value)
  return None if newest is None else (newest, listed)


def step_of(path: str) -> int:
  """The step a checkpoint's name ends with (model.ckpt-30: 30), or -1."""
  found = _NUMBERED.search(path)
  return int(found.group(1)) if found else -1


def find(directory: str) -> list[str]:
  """Every checkpoint in directory, newest (highest step) first: those the
  state file lists and any other whose .index file is there."""
  listed, _ = _listed(directory)
  paths = {p[:-len('.index')]
           for p in glob.glob(os.path.join(glob.escape(directory), '*.index'))}
  paths |= {p for p in listed if os.path.exists(p + '.index')}
  return sorted(paths,
                key=lambda p: (step_of(p), os.path.getmtime(p + '.index')),
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


class Reader:
  """A checkpoint's tensors, each read when asked: ``shapes`` {name:
  shape}, ``read(name)``. By TensorFlow where it is installed, else by
  tensor_bundle; either way each tensor is checked against its CRC as it is
  read, and a failure is one line.

  Raises (on construction and on read): UnreadableCheckpoint.
  """

  def __init__(self, path: str):
    self.path = path
    try:
      if lazy.installed('tensorflow'):
        self._reader = tf.train.load_checkpoint(path)
        self.shapes = {name: tuple(shape) for name, shape in
                       self._reader.get_variable_to_shape_map().items()}
        self._read = self._reader.get_tensor
      else:
        self._reader = tensor_bundle.BundleReader(path)
        self.shapes = dict(self._reader.shapes)
        self._read = self._reader.read
    except self._errors() as e:
      raise UnreadableCheckpoint(path, one_line(e)) from e

  @staticmethod
  def _errors() -> tuple:
    return ((*_read_errors(), tensor_bundle.BundleError)
            if lazy.installed('tensorflow') else
            (tensor_bundle.BundleError, OSError))

  def read(self, name: str) -> np.ndarray:
    try:
      return self._read(name)
    except self._errors() as e:
      raise UnreadableCheckpoint(self.path, one_line(e)) from e


def read_all(path: str) -> dict[str, np.ndarray]:
  """Every tensor of the checkpoint at path, by name (each CRC checked).

  Raises:
    UnreadableCheckpoint: a file is missing, truncated or corrupt.
  """
  reader = Reader(path)
  return {name: reader.read(name) for name in reader.shapes}
