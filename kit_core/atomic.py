"""Files and folders written whole or not at all.

Everything the kit writes (data, reports, bundles, plots, converted
checkpoints, exports) is made under a temporary name in its destination's
folder and renamed into place, so a reader never sees half of it. There is
one naming scheme, ``.tmp-<pid>.<start>.<pid namespace>-XXXXXXXX`` and the
destination's suffix (``TEMP_NAME``), so that what a killed writer left is
found and removed by the next write into the folder (``remove_dead_writers``)
or by ``stale``, and nothing else is touched.
"""
import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from typing import Iterator

from kit_core import owners
from kit_core import signals
from kit_core.errors import KitError

PREFIX = '.tmp-'
# mkstemp's and mkdtemp's random part.
MKDTEMP_TAIL = r'[a-z0-9_]{8}'
# A file keeps its destination's suffix (savefig and the TFRecord writer
# read it). After the prefix, the writer's process id, start and pid
# namespace (owners.py), so that the next write into the folder can tell
# what a killed writer left (remove_dead_writers). Older names had no
# namespace (a writer in a container sharing the folder could not be told
# alive), or nothing: neither is removed.
TEMP_NAME = re.compile(r'\.tmp-(?:(\d+)\.(\d+)(?:\.(\d+))?-)?' +
                       MKDTEMP_TAIL + r'(\.[A-Za-z0-9]+)?')


def _writer_prefix() -> str:
  pid = os.getpid()
  return (f'{PREFIX}{pid}.{owners.process_start(pid) or 0}.'
          f'{owners.pid_namespace_number()}-')


def remove_dead_writers(folder: str) -> list[str]:
  """Removes from folder the temporary names (TEMP_NAME) that a writer
  left which provably runs no more (SIGKILLed mid-write: its clean-up never
  ran), this user's only; returns their names. Another run's that is still
  writing is left alone."""
  try:
    names = os.listdir(folder)
  except OSError:
    return []
  removed = []
  for name in names:
    found = TEMP_NAME.fullmatch(name)
    if not found or not found.group(3):
      continue  # No writer named, or not where it ran: nothing is proven.
    path = os.path.join(folder, name)
    try:
      if os.lstat(path).st_uid != os.getuid():
        continue
    except OSError:
      continue
    if owners.gone({'pid': int(found.group(1)),
                    'start': int(found.group(2)) or None,
                    'pid_namespace': owners.namespace_link(
                        int(found.group(3)))}):
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        with contextlib.suppress(OSError):
          os.remove(path)
      removed.append(name)
  return removed


@contextlib.contextmanager
def temporary_path(path: str, directory: bool = False) -> Iterator[str]:
  """Yields a temporary name beside path to write into; renames it to path
  when the block ends normally, removes it when the block raises.

  Args:
    path: the destination. A file there is replaced; a folder there must be
      empty (it is replaced too).
    directory: make a folder, not a file.
  """
  folder = os.path.dirname(os.path.abspath(path))
  remove_dead_writers(folder)
  if directory:
    tmp = tempfile.mkdtemp(dir=folder, prefix=_writer_prefix())
  else:
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=_writer_prefix(),
                                   suffix=os.path.splitext(path)[1])
    os.close(handle)
  try:
    yield tmp
    # Never in place after a signal, even one whose exception was lost.
    signals.raise_if_signalled()
    # mkstemp and mkdtemp make 0600 and 0700: the result gets the mode any
    # new file or folder gets here (a file it replaces keeps its own), so a
    # CI uploader running as another user can read a report.
    os.chmod(tmp, _mode_of(path, directory))
    try:
      if directory and os.path.isdir(path):
        os.rmdir(path)  # Empty, or this raises: nothing is overwritten.
      os.replace(tmp, path)
    except OSError as e:
      if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR,
                         errno.ENOTDIR):
        raise
      # Another run wrote it while this one worked (two commands given one
      # output): theirs stays, this one's goes.
      raise KitError(f'{path} was written by another run while this one '
                     'worked: it is left as that run wrote it, and nothing '
                     'of this run\'s is there; give each run its own output'
                     ) from e
  finally:
    if os.path.isdir(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
    elif os.path.exists(tmp):
      os.remove(tmp)


def _umask() -> int:
  mask = os.umask(0o022)  # Read by setting it: put it back at once.
  os.umask(mask)
  return mask


def _mode_of(path: str, directory: bool) -> int:
  """The mode path gets: an existing file's own, else what open() and
  mkdir() give under the umask."""
  if not directory and os.path.isfile(path):
    return os.stat(path).st_mode & 0o7777
  return (0o777 if directory else 0o666) & ~_umask()


def write_text(path: str, text: str) -> None:
  write_bytes(path, text.encode('utf-8'))


def write_bytes(path: str, data: bytes) -> None:
  """data at path, whole or not at all.

  Raises:
    OSError: the write was refused (a full disk...), naming path, the file
      the user asked for, not the temporary one or none.
  """
  try:
    with temporary_path(path) as tmp:
      with open(tmp, 'wb') as f:
        f.write(data)
  except OSError as e:
    if e.errno is None or e.filename == path:
      raise
    raise OSError(e.errno, e.strerror, path) from e


def write_json(path: str, value, indent: int = 1, default=None) -> None:
  write_text(path, json.dumps(value, indent=indent, default=default))
