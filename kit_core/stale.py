"""What a run leaves unfinished, removed by what the kit made, never by the
shape of a name alone.

Three cases:
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
- A process's private folders in the system's temporary folder
  (``private_folder``): each holds a file that says which process made it,
  so that the next command removes those whose process is provably gone,
  and only those holding nothing but what the kit puts there.
"""
import dataclasses
import json
import os
import re
import shutil
import stat
import tempfile

from absl import logging

from kit_core import atomic
from kit_core import owners
from kit_core import process


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



# The file that says a private folder is the kit's, and whose: written first
# into each, read before anything in one is removed.
OWNER_FILE = '.kit_owner'


def private_folder(prefix: str, contents: str = '') -> str:
  """A new folder in the system's temporary folder for this process alone,
  removed when the command ends (process.remove_at_exit).

  A SIGKILLed process cannot remove its own: first, those of the same
  prefix whose process is provably gone are removed. Each folder holds
  OWNER_FILE, which says whose it is (owner); one is removed only if that
  file is there and names the process in the folder's name, the process is
  gone (no such process, one that started at another time, or another
  boot; never a process in another process-id namespace, which cannot be
  told from here), the folder is this user's, and it holds nothing but the
  owner file and names contents (a regular expression) matches. Anything
  else, a user's file put there included, keeps the folder as it is.
  """
  parent = tempfile.gettempdir()
  _remove_orphans(parent, prefix, contents)
  folder = process.remove_at_exit(
      tempfile.mkdtemp(prefix=f'{prefix}{os.getpid()}_', dir=parent))
  with open(os.path.join(folder, OWNER_FILE), 'w') as f:
    json.dump(owners.owner(), f)
  return folder


def _remove_orphans(parent: str, prefix: str, contents: str) -> list[str]:
  pattern = re.compile(re.escape(prefix) + r'(\d+)_' + atomic.MKDTEMP_TAIL)
  allowed = re.compile(contents or r'(?!)')
  try:
    names = sorted(os.listdir(parent))
  except OSError:
    return []
  removed = []
  for name in names:
    found = pattern.fullmatch(name)
    path = os.path.join(parent, name)
    if found and _mine_and_orphaned(path, int(found.group(1)), allowed):
      shutil.rmtree(path, ignore_errors=True)
      removed.append(name)
  return removed


def _mine_and_orphaned(path: str, pid: int, allowed: re.Pattern) -> bool:
  try:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
      return False
    entries = os.listdir(path)
  except OSError:
    return False
  if OWNER_FILE not in entries or not all(
      n == OWNER_FILE or allowed.fullmatch(n) for n in entries):
    return False
  recorded = _read_owner(os.path.join(path, OWNER_FILE))
  return recorded is not None and recorded.get('pid') == pid and owners.gone(
      recorded)


def _read_owner(path: str) -> dict | None:
  """The owner file's record; None unless a small regular file of JSON."""
  try:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_size > 4096:
      return None
    with open(path) as f:
      recorded = json.load(f)
  except (OSError, ValueError):
    return None
  return recorded if isinstance(recorded, dict) else None
