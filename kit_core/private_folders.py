"""A process's private folders in the system's temporary folder, removed
when the command ends, and by the next command when it was killed.

A SIGKILLed process cannot remove its own folders, so each holds OWNER_FILE,
which says which process made it (kit_core/owners.py). The next command that
makes a folder of the same prefix removes those whose process is provably
gone, and only those holding nothing but what the kit puts there: a user's
file put into one keeps it as it is.

Every command's temporary files go into one such folder
(``hold_temporary_files``, from ``process.run_command``): AutoGraph's
generated modules, TensorFlow's and the kit's ``tempfile`` names. Their
names are tempfile's, which a user may choose too, so that folder holds a
manifest, MANIFEST_FILE: each path under it the process creates, written
before it is created (an audit hook on Python's file and folder creation).
A killed command's folder is removed by the next command, whichever it is,
only if everything in it, at any depth, is in its manifest; a command that
ends removes its own.
"""
import atexit
import json
import os
import re
import shutil
import stat
import sys
import tempfile

from kit_core import atomic
from kit_core import owners

# The file that says a private folder is the kit's, and whose: written first
# into each, read before anything in one is removed.
OWNER_FILE = '.kit_owner'

# The prefix of each command's folder of temporary files (what is in it
# goes by its manifest, MANIFEST_FILE).
TEMPORARY_FILES = 'kit_tmp_'

# In the temporary-files folder: what its process created there, one path
# (relative to the folder) a line.
MANIFEST_FILE = '.kit_made'
# The audit events that create a path (Python's own file and folder
# creation, tempfile's and AutoGraph's included): the position of the
# argument that names it, and of its dir_fd (-1: none).
_CREATING = {'open': (0, None), 'os.mkdir': (0, 2), 'os.rename': (1, 3),
             'os.link': (1, 3), 'os.symlink': (1, 2)}
# Open flags that may create or change a file.
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# A manifest past this is not read: its folder is kept.
_MANIFEST_BYTES = 64 * 2**20

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


def private_folder(prefix: str, contents: str = '',
                   manifest: bool = False) -> str:
  """A new folder in the system's temporary folder for this process alone,
  removed when the command ends (remove_at_exit).

  First, those of the same prefix whose process is provably gone are
  removed. One is removed only if its OWNER_FILE is there and names the
  process in the folder's name, the process is gone (no such process, one
  that started at another time, or another boot; never a process in
  another process-id namespace, which cannot be told from here), the folder
  is this user's, and it holds nothing but the owner file and names
  contents (a regular expression) matches, or, with manifest, nothing at
  any depth that its MANIFEST_FILE does not list. Anything else, a user's
  file put there included, keeps the folder as it is.
  """
  parent = system_temp()
  _remove_orphans(parent, prefix, contents, manifest)
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
    folder = private_folder(TEMPORARY_FILES, manifest=True)
    _record_creations(folder)
  except OSError:
    return None
  _system_temp.append(parent)
  tempfile.tempdir = folder
  return folder


def _record_creations(folder: str) -> None:
  """From now on, every path under folder this process creates is written
  to its MANIFEST_FILE before it is made (sys.addaudithook): what clean-up
  may remove of it once the process is gone. What native code makes there
  is not seen: its folder is then kept."""
  fd = os.open(os.path.join(folder, MANIFEST_FILE),
               os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
  root = folder + os.sep

  def hook(event: str, args: tuple) -> None:
    where = _CREATING.get(event)
    if where is None or (event == 'open' and not (
        isinstance(args[2], int) and args[2] & _WRITES)):
      return
    path, dir_fd = where
    if dir_fd is not None and args[dir_fd] not in (None, -1):
      return  # Relative to a descriptor: not told from here.
    path = _absolute(args[path])
    if path is not None and path.startswith(root):
      os.write(fd, os.fsencode(path[len(root):]) + b'\n')

  sys.addaudithook(hook)


def _absolute(path) -> str | None:
  """path made absolute; None for a descriptor."""
  if isinstance(path, int):
    return None
  try:
    return os.path.abspath(os.fsdecode(path))
  except (TypeError, ValueError):
    return None


def _remove_orphans(parent: str, prefix: str, contents: str,
                    manifest: bool = False) -> list[str]:
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
    if found and _mine_and_orphaned(path, int(found.group(1)), allowed,
                                    manifest):
      shutil.rmtree(path, ignore_errors=True)
      removed.append(name)
  return removed


def _mine_and_orphaned(path: str, pid: int, allowed: re.Pattern,
                       manifest: bool) -> bool:
  try:
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
      return False
    entries = os.listdir(path)
  except OSError:
    return False
  if OWNER_FILE not in entries or not manifest and not all(
      n == OWNER_FILE or allowed.fullmatch(n) for n in entries):
    return False
  recorded = _read_owner(os.path.join(path, OWNER_FILE))
  return (recorded is not None and recorded.get('pid') == pid and
          owners.gone(recorded) and (not manifest or _all_made(path)))


def _all_made(path: str) -> bool:
  """Whether everything under path, at any depth (links not followed),
  is in its MANIFEST_FILE: made there by its process."""
  listed = os.path.join(path, MANIFEST_FILE)
  try:
    info = os.lstat(listed)
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MANIFEST_BYTES:
      return False
    with open(listed, 'rb') as f:
      made = set(f.read().split(b'\n'))
  except OSError:
    return False
  unread = []
  for top, folders, files in os.walk(path, onerror=unread.append):
    inside = os.path.relpath(top, path)
    for name in folders + files:
      if inside == '.' and name in (OWNER_FILE, MANIFEST_FILE):
        continue
      if os.fsencode(os.path.normpath(os.path.join(inside, name))) not in made:
        return False
  return not unread


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
