"""Output paths: directories checked before any work, so bad ones fail at
once; one trainer per model_dir; reading JSON (atomic.py writes it)."""
import contextlib
import errno
import fcntl
import json
import os
import tempfile
from typing import Iterator, Sequence

from absl import flags
from absl import logging

from kit_core import private_folders
from kit_core.errors import KitError

Pairs = Sequence[tuple[str, str]]


# The folders the trainers make inside a model_dir (exports, summaries).
MODEL_DIR_FOLDERS = ('export', 'train', 'eval', 'validation')


def ensure_writable_dir(path: str | None, prefix: str) -> str:
  """Creates path (or a temporary directory if None) and checks it is
  writable, and that no file stands where the trainers make a folder.

  Returns the absolute path. Raises KitError with the reason otherwise.
  """
  if path is None:
    # Outlives the command: not in its own temporary folder.
    return tempfile.mkdtemp(prefix=prefix, dir=private_folders.system_temp())
  path = os.path.abspath(os.path.expanduser(path))
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
      pass
  except OSError as e:
    raise KitError(f'--model_dir {path} is not a writable directory '
                   f'({e.strerror}); pass a directory you can write to') from e
  for name in MODEL_DIR_FOLDERS:
    inside = os.path.join(path, name)
    if os.path.lexists(inside) and not os.path.isdir(inside):
      raise KitError(f'--model_dir {path} holds a file named {name} where the '
                     f'trainer makes its folder {name}/; move it away, or use '
                     'another --model_dir')
  return path


def utf8_path(value: str | None) -> bool:
  """A flag validator: TensorFlow takes only paths that are valid UTF-8 (a
  file name of other bytes reaches Python as surrogates)."""
  if value is None:
    return True
  try:
    value.encode('utf-8')
  except UnicodeEncodeError as e:
    raise flags.ValidationError(
        f'is not valid UTF-8 ({os.fsencode(value)!r}), and TensorFlow takes '
        'UTF-8 paths only; rename the folder, or use another') from e
  return True


@contextlib.contextmanager
def one_trainer(model_dir: str, flag: str = '--model_dir') -> Iterator[None]:
  """Holds model_dir for this process while the block runs: two trainers
  on one model_dir would interleave their checkpoints and exports.

  The lock is an flock on the folder itself: nothing is written for it, and
  it dies with its process, so a kill -9 leaves none behind.

  Raises:
    KitError: another process holds model_dir.
  """
  folder = os.open(model_dir, os.O_RDONLY | os.O_DIRECTORY)
  try:
    try:
      fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno not in (errno.EAGAIN, errno.EACCES):
        # A file system without locks: train, as before there were any.
        logging.warning('Cannot lock %s (%s): make sure no other trainer '
                        'uses it', model_dir, e.strerror)
      else:
        holder = _lock_holder(folder)
        raise KitError(f'{flag} {model_dir} is in use by another trainer '
                       f'({f"pid {holder}" if holder else "another process"}'
                       f'); wait for it to end, or use another {flag}') from e
    yield
  finally:
    os.close(folder)  # Releases the lock.


def _lock_holder(descriptor: int) -> int | None:
  """The process holding an flock on the open file, from /proc/locks
  (Linux), or None."""
  stat = os.fstat(descriptor)
  inode = (f'{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:'
           f'{stat.st_ino}')
  try:
    with open('/proc/locks', encoding='ascii') as f:
      for line in f:
        fields = line.split()
        if 'FLOCK' in fields and inode in fields and '->' not in fields:
          return int(fields[fields.index(inode) - 1])
  except (OSError, ValueError):
    pass
  return None


def check_output(path: str, flag: str, inputs: Pairs = (),
                 outputs: Pairs = (), folder: bool = False) -> str:
  """The absolute path of an output, checked before any work so that it can
  destroy no input and no other output.

  Args:
    path: the flag's value.
    flag: its name, '--report'.
    inputs: (what, path) of what the command reads, e.g. ('the input
      --bundle', 'x.npz'); the output may be none of them, nor an existing
      file inside an input folder.
    outputs: (flag, path) of the command's other outputs.
    folder: a folder is due, not a file.

  Raises:
    KitError: an empty path, a symbolic link, a special file, a folder where
      a file is due (or the reverse), one of the inputs or other outputs, or
      a folder that does not exist.
  """
  if not path.strip():
    raise KitError(f'{flag} is empty (an unset variable?); give a path')
  given, path = path, os.path.abspath(os.path.expanduser(path))
  names = _spellings(path)
  for what, value in inputs:
    sources = _spellings(value)
    if names & sources or any(
        os.path.isdir(source) and os.path.exists(name) and
        name.startswith(source + os.sep) for source in sources
        for name in names):
      raise KitError(f'{flag} {path} would overwrite {what} {value}; write '
                     'the output elsewhere')
  for other, value in outputs:
    if value and names & _spellings(value):
      raise KitError(f'{flag} and {other} are the same path, {path}; give '
                     'each its own')
  if os.path.islink(given):
    raise KitError(f'{flag} {given} is a symbolic link; name a new path (the '
                   'kit would replace the link, not what it points to)')
  if os.path.exists(path):
    if folder and not os.path.isdir(path):
      raise KitError(f'{flag} {path} is a file; name a new folder')
    if not folder and os.path.isdir(path):
      raise KitError(f'{flag} {path} is a folder; name a file')
    if not folder and not os.path.isfile(path):
      raise KitError(f'{flag} {path} is a special file (FIFO, socket or '
                     'device); name a regular file')
  check_folder_exists(path, f'{flag} {path}')
  check_folder_writable(path, flag)
  return path


def check_folder_writable(path: str, flag: str) -> None:
  """KitError unless the folder path would be written in takes a new file:
  checked before any work, so that a long run does not end unable to write
  what it found. A full disk still shows only when the output is written."""
  try:
    handle, probe = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(path)), prefix='.tmp-')
  except OSError as e:
    raise KitError(f'cannot write {flag} {path}: {e.strerror.lower()}; point '
                   f'{flag} at a folder you can write') from e
  os.close(handle)
  os.remove(probe)


def _spellings(path: str) -> set[str]:
  """path as given and as resolved: a link may lead either way."""
  return {os.path.abspath(path), os.path.realpath(path)}


def check_folder_exists(path: str, name: str) -> None:
  """KitError unless the folder path would be written in exists; name says
  which input it is ("--report out.json"). Checked before any work."""
  if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
    raise KitError(f'{name}: its folder does not exist; create it or choose '
                   'another path')


def read_json(path: str):
  with open(path) as f:
    return json.load(f)
