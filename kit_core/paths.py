"""Output paths: directories checked before any work, so bad ones fail at
once; one trainer per model_dir; reading JSON (atomic.py writes it)."""
import contextlib
import errno
import fcntl
import json
import os
import socket
import tempfile
from typing import Iterator

from absl import logging

from kit_core.errors import KitError

# Held by the trainer of a model_dir while it runs. An flock dies with its
# process, so a kill -9 leaves the file but no lock.
LOCK_NAME = '.trainer.lock'


def ensure_writable_dir(path: str | None, prefix: str) -> str:
  """Creates path (or a temporary directory if None) and checks it is writable.

  Returns the absolute path. Raises KitError with the reason otherwise.
  """
  if path is None:
    return tempfile.mkdtemp(prefix=prefix)
  path = os.path.abspath(os.path.expanduser(path))
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
      pass
  except OSError as e:
    raise KitError(f'--model_dir {path} is not a writable directory '
                   f'({e.strerror}); pass a directory you can write to') from e
  return path


@contextlib.contextmanager
def one_trainer(model_dir: str, flag: str = '--model_dir') -> Iterator[None]:
  """Holds model_dir for this process while the block runs: two trainers
  on one model_dir would interleave their checkpoints and exports.

  Raises:
    KitError: another process holds model_dir.
  """
  path = os.path.join(model_dir, LOCK_NAME)
  with open(path, 'a+', encoding='utf-8') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno not in (errno.EAGAIN, errno.EACCES):
        # A file system without locks: train, as before there were any.
        logging.warning('Cannot lock %s (%s): make sure no other trainer '
                        'uses it', model_dir, e.strerror)
        yield
        return
      f.seek(0)
      holder = f.read().strip() or 'another process'
      raise KitError(f'{flag} {model_dir} is in use by another trainer '
                     f'({holder}); wait for it to end, or use another '
                     f'{flag}') from e
    f.seek(0)
    f.truncate()
    f.write(f'pid {os.getpid()} on {socket.gethostname()}')
    f.flush()
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def check_folder_exists(path: str, name: str) -> None:
  """KitError unless the folder path would be written in exists; name says
  which input it is ("--report out.json"). Checked before any work."""
  if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
    raise KitError(f'{name}: its folder does not exist; create it or choose '
                   'another path')


def read_json(path: str):
  with open(path) as f:
    return json.load(f)
