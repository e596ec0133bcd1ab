"""Which process made something, recorded so that a later one can prove the
maker gone before removing what it left (kit_core/stale.py, atomic.py).

A process id alone proves nothing: ids are taken again, a reboot empties
the table, and a process in another pid namespace (``unshare -p``, a
container sharing TMPDIR) has an id that means nothing here. So a record
holds the id, when that process started (Linux's /proc/PID/stat), the boot
and the pid namespace; ``gone`` says True only where one of them proves it.
"""
import os


def process_start(pid: int) -> int | None:
  """When process pid started, in clock ticks after boot (/proc/PID/stat,
  field 22); None where unknown."""
  try:
    with open(f'/proc/{pid}/stat', 'rb') as f:
      fields = f.read().rpartition(b')')[2].split()
    return int(fields[19])
  except (OSError, IndexError, ValueError):
    return None


def _first_line(path: str) -> str | None:
  try:
    with open(path) as f:
      return f.readline(200).strip() or None
  except OSError:
    return None


def _pid_namespace() -> str | None:
  try:
    return os.readlink('/proc/self/ns/pid')
  except OSError:
    return None


def pid_namespace_number() -> int:
  """This process's pid namespace as a number (the inode in
  /proc/self/ns/pid's link, 'pid:[4026531836]'); 0 where unknown."""
  found = (_pid_namespace() or '').partition('[')[2].rstrip(']')
  return int(found) if found.isdigit() else 0


def namespace_link(number: int) -> str | None:
  """pid_namespace_number's number as owner records it; None for 0."""
  return f'pid:[{number}]' if number else None


def owner(pid: int | None = None) -> dict:
  """What tells process pid (this one by default) from any other, ever:
  its id, its start, the boot and the process-id namespace it runs in."""
  pid = os.getpid() if pid is None else pid
  return {'pid': pid, 'start': process_start(pid),
          'boot': _first_line('/proc/sys/kernel/random/boot_id'),
          'pid_namespace': _pid_namespace()}


def alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)  # Signal 0: asks whether the process exists.
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Another user's.
  return True


def gone(recorded: dict) -> bool:
  """Whether the process recorded (owner's record; start, boot and
  namespace may be missing) provably runs no more."""
  now = owner(recorded['pid'])
  if recorded.get('boot') and now['boot'] and recorded['boot'] != now['boot']:
    return True  # Another boot: every process of that one is gone.
  if recorded.get('pid_namespace', now['pid_namespace']) != (
      now['pid_namespace']):
    return False  # Its ids are another namespace's: nothing can be told.
  if not alive(recorded['pid']):
    return True
  # The id taken again by a process that started later.
  return (recorded.get('start') is not None and now['start'] is not None and
          recorded['start'] != now['start'])
