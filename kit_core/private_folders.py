"""A process's private folders in the system's temporary folder, removed
when the command ends, and by the next command when it was killed.

A SIGKILLed process cannot remove its own folders, so each holds OWNER_FILE,
which says which process made it (kit_core/owners.py). The next command that
makes a folder of the same prefix removes those whose process is provably
gone, and only those holding nothing but what the kit puts there: a user's
file put into one keeps it as it is.

Every command's temporary files go into one such folder
(``hold_temporary_files``, from ``process.run_command``): AutoGraph's
generated modules, TensorFlow's and the kit's ``tempfile`` names. A killed
command's are then found by the next command, whichever it is, and removed
with the folder; a command that ends removes its own.
"""
import atexit
import json
import os
import re
import shutil
import stat
import tempfile

from kit_core import atomic
from kit_core import owners

# The file that says a private folder is the kit's, and whose: written first
# into each, read before anything in one is removed.
OWNER_FILE = '.kit_owner'

# The prefix of each command's folder of temporary files, and what may be in
# it: AutoGraph's modules (tempfile.NamedTemporaryFile(prefix=
# '__autograph_generated_file', suffix='.py')) and tempfile's default names
# (prefix 'tmp', any suffix; a TemporaryDirectory's contents go with it).
TEMPORARY_FILES = 'kit_tmp_'
_TEMPORARY_CONTENTS = (
    rf'__autograph_generated_file{atomic.MKDTEMP_TAIL}\.py|__pycache__|'
    rf'tmp{atomic.MKDTEMP_TAIL}.*')

_REMOVE_AT_EXIT: list[str] = []
# The system's temporary folder, as it was before this command's own
# (hold_temporary_files) took its place in tempfile.
_system_temp: list[str] = []


def system_temp() -> str:
  """The system's temporary folder ($TMPDIR, /tmp...): where a folder that
  must outlive the command (a default --model_dir) or be found by the next
  one (private_folder) is made."""
  return _system_temp[0] if _system_temp else tempfile.gettempdir()


def remove_at_exit(directory: str) -> str:
  """Returns directory, removed with its contents when the command ends
  (``remove_all``; process.flush_and_exit skips Python's atexit handlers)."""
  _REMOVE_AT_EXIT.append(directory)
  atexit.register(shutil.rmtree, directory, ignore_errors=True)
  return directory


def remove_all() -> None:
  """Removes every folder remove_at_exit was given (at the command's end)."""
  for directory in _REMOVE_AT_EXIT:
    shutil.rmtree(directory, ignore_errors=True)


def private_folder(prefix: str, contents: str = '') -> str:
  """A new folder in the system's temporary folder for this process alone,
  removed when the command ends (remove_at_exit).

  First, those of the same prefix whose process is provably gone are
  removed. One is removed only if its OWNER_FILE is there and names the
  process in the folder's name, the process is gone (no such process, one
  that started at another time, or another boot; never a process in
  another process-id namespace, which cannot be told from here), the folder
  is this user's, and it holds nothing but the owner file and names
  contents (a regular expression) matches. Anything else, a user's file put
  there included, keeps the folder as it is.
  """
  parent = system_temp()
  _remove_orphans(parent, prefix, contents)
  folder = remove_at_exit(
      tempfile.mkdtemp(prefix=f'{prefix}{os.getpid()}_', dir=parent))
  with open(os.path.join(folder, OWNER_FILE), 'w') as f:
    json.dump(owners.owner(), f)
  return folder


def hold_temporary_files() -> str | None:
  """Points tempfile, and so whatever this process makes through it, at a
  private folder of its own; returns it. None, with tempfile left as it
  was, where the system's temporary folder takes no folder: what needs one
  says so then, as it would have."""
  if _system_temp:
    return tempfile.tempdir
  parent = tempfile.gettempdir()
  try:
    folder = private_folder(TEMPORARY_FILES, contents=_TEMPORARY_CONTENTS)
  except OSError:
    return None
  _system_temp.append(parent)
  tempfile.tempdir = folder
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
