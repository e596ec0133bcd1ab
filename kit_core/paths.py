"""Output paths: directories checked before any work, so bad ones fail at
once; reading JSON (atomic.py writes it)."""
import json
import os
import tempfile

from kit_core.errors import KitError


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


def check_folder_exists(path: str, name: str) -> None:
  """KitError unless the folder path would be written in exists; name says
  which input it is ("--report out.json"). Checked before any work."""
  if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
    raise KitError(f'{name}: its folder does not exist; create it or choose '
                   'another path')


def read_json(path: str):
  with open(path) as f:
    return json.load(f)
