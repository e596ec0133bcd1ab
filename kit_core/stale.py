"""What a run leaves unfinished, removed by what the kit made, never by the
shape of a name alone.

Two cases:
- This run's own unfinished writes. TensorFlow writes a checkpoint into
  ``<prefix>-N_temp/`` and renames the shards into place; a save the disk
  refuses leaves that folder. A command ``watch``es the folder it saves into
  for its own prefix before it saves; on a refused write (``exits``) only
  the entries that appeared since are removed (``remove_this_runs``). Nothing
  that was there before, and nothing above the watched folder, is touched.
  The kit's own files and folders (``atomic``) remove their temporary names
  themselves.
- What a killed earlier run left (SIGKILL: no clean-up ran). Those are found
  in the folder the command owns (its --model_dir, its data dir under the
  lock) by exact name and by content: a checkpoint's temporary folder holds
  nothing but TensorFlow's shard files, a temporary data file is a file. A
  folder of the user's that merely carries such a name is left alone.

A process's private folders in the system's temporary folder are
kit_core/private_folders.py's.
"""
import dataclasses
import os
import re
import shutil

from absl import logging



# What TensorFlow writes into <prefix>-N_temp/: part-00000-of-00001 and its
# .data-*/.index files, each first under a .tempstateN name
# (tensor_bundle's BundleWriter).
_SHARD = re.compile(
    r'part-\d+-of-\d+(\.(data-\d+-of-\d+|index))?(\.tempstate\d+)?')


def checkpoint_temp(prefix: str) -> re.Pattern:
  """The temporary folder TF writes a checkpoint `prefix`-N into."""
  return re.compile(re.escape(prefix) + r'-\d+_temp')


def _is_checkpoint_temp(path: str) -> bool:
  """A folder holding only TensorFlow's shard files (or nothing)."""
  if os.path.islink(path) or not os.path.isdir(path):
    return False
  try:
    return all(_SHARD.fullmatch(n) and not os.path.isdir(os.path.join(path, n))
               for n in os.listdir(path))
  except OSError:
    return False


def _is_plain_file(path: str) -> bool:
  return os.path.isfile(path) and not os.path.islink(path)


# What a SavedModel folder holds, whole or in part.
_SAVED_MODEL = frozenset({'saved_model.pb', 'saved_model.pbtxt', 'variables',
                          'assets', 'assets.extra', 'fingerprint.pb',
                          'keras_metadata.pb'})


def _is_saved_model_temp(path: str) -> bool:
  """A folder holding only what a SavedModel holds (or nothing)."""
  if os.path.islink(path) or not os.path.isdir(path):
    return False
  try:
    return set(os.listdir(path)) <= _SAVED_MODEL
  except OSError:
    return False


# What may be removed under each kind of name: a checkpoint's or an
# export's temporary folder by its content, a temporary data file only if it
# is a file.
CHECKPOINT_FOLDER = _is_checkpoint_temp
SAVED_MODEL_FOLDER = _is_saved_model_temp
FILE = _is_plain_file


def _remove_entry(path: str) -> bool:
  try:
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
    return True
  except OSError as e:
    logging.warning('Could not remove %s: %s', path, e.strerror)
    return False


def remove(directory: str, pattern: re.Pattern, what: str,
           kind=CHECKPOINT_FOLDER) -> list[str]:
  """Removes what a killed earlier run left in directory: the entries whose
  whole name matches pattern and that are of kind (CHECKPOINT_FOLDER or
  FILE); returns their names. Logs one line when it removed any.

  Call it only on a folder the command owns for this run (its model_dir,
  its data dir under the lock), before it writes there."""
  try:
    names = sorted(n for n in os.listdir(directory) if pattern.fullmatch(n))
  except OSError:
    return []  # No such directory yet: nothing was left.
  removed = [n for n in names if kind(os.path.join(directory, n)) and
             _remove_entry(os.path.join(directory, n))]
  if removed:
    logging.info('Removed %s left by an interrupted run in %s: %s', what,
                 directory, ', '.join(removed))
  return removed


@dataclasses.dataclass(frozen=True)
class Watch:
  """A folder this run writes into, the pattern of the temporary entries
  its writes make there, and those that were there when the watch began
  (never this run's)."""
  directory: str
  pattern: re.Pattern
  before: frozenset[str]

  def new_entries(self) -> list[str]:
    """The matching entries that appeared since the watch began."""
    try:
      names = os.listdir(self.directory)
    except OSError:
      return []
    return sorted(n for n in names if self.pattern.fullmatch(n) and
                  n not in self.before)

  def remove_new(self, what: str) -> list[str]:
    """Removes the entries new_entries lists; returns their names."""
    removed = [n for n in self.new_entries()
               if _remove_entry(os.path.join(self.directory, n))]
    if removed:
      logging.info('Removed %s in %s: %s', what, self.directory,
                   ', '.join(removed))
    return removed


_WATCHES: list[Watch] = []


def watch(directory: str, pattern: re.Pattern) -> Watch:
  """Starts recording what this run makes in directory under pattern:
  entries that match it from now on are this run's. Returns the Watch
  (remove_this_runs removes what every watch saw appear)."""
  directory = os.path.abspath(directory)
  try:
    before = frozenset(n for n in os.listdir(directory)
                       if pattern.fullmatch(n))
  except OSError:
    before = frozenset()  # Not made yet: anything in it will be this run's.
  found = Watch(directory, pattern, before)
  _WATCHES.append(found)
  return found


def remove_this_runs() -> list[str]:
  """After a write the disk refused: removes the unfinished entries this
  run made in each watched folder; returns their paths."""
  removed = []
  for w in _WATCHES:
    removed += [os.path.join(w.directory, n)
                for n in w.remove_new('an unfinished write')]
  return removed
