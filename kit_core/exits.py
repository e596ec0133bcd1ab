"""How a command ends on an error: its one line on stderr and its exit
code; a write the disk refused leaves nothing half-written behind."""
import contextlib
import errno
import os
import re
import signal
import sys
from typing import Callable, Iterator

from absl import flags

from kit_core import signals
from kit_core import stale
from kit_core import usage as usage_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import Preempted
from kit_core.errors import printable
from kit_core.errors import StorageError


def exit_with_one_line(run: Callable[[], None], error_exit: int = 1) -> None:
  """Runs run(), a command's work. A KitError, or a write the disk refused,
  ends the command with its one line on stderr and its exit code
  (error_exit for errors; what this run left unfinished by a refused write
  removed: stale.remove_this_runs); other errors pass."""
  try:
    run()
    return
  except KitError as e:
    message, code = exit_message(e, error_exit)
  except Exception as e:  # pylint: disable=broad-except
    refused = storage_error(e)
    if refused is None:
      raise
    stale.remove_this_runs()
    message, code = exit_message(refused, error_exit)
  print(message, file=sys.stderr)
  sys.exit(code)


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS,
                error_exit: int = 1, usage: str = '',
                modules: tuple = ()) -> list[str]:
  """Parses argv into flag_values (app.run's flags_parser); a bad flag ends
  the command with its one line, not absl's two. --help prints usage and the
  flags the modules (their names) defined (kit_core/usage.py); --helpfull
  is absl's."""
  # --helpfull stays absl's: every module's flags, by module.
  if modules and usage_lib.asked(argv) and '--helpfull' not in argv[1:]:
    usage_lib.print_and_exit(usage, (
        flag for module in modules
        for flag in flag_values.get_flags_for_module(module)))
  try:
    return flag_values(argv)
  except flags.Error as e:
    program = os.path.basename(argv[0])
    if program == '__main__.py':  # python -m package
      program = 'python -m ' + os.path.basename(os.path.dirname(argv[0]))
    print(printable(f'error: {e}; see {program} --help'), file=sys.stderr)
    sys.exit(error_exit)


def exit_message(error: KitError, error_exit: int = 1) -> tuple[str, int]:
  """The line a command prints for error, and its exit code."""
  if isinstance(error, (Preempted, Interrupted)):
    return f'stopped: {printable(str(error))}', error.exit_code
  return f'error: {printable(str(error))}', error_exit


raise_if_signalled = signals.raise_if_signalled


@contextlib.contextmanager
def interruptible(consequence: str) -> Iterator[None]:
  """While the block runs, SIGTERM and SIGINT raise Interrupted(consequence)
  in it, so that its cleanup runs (finally blocks, atomic writes removing
  their temporary names) before the command ends in one line; the handlers
  before are back after the block.

  A signal is also remembered: if its exception is swallowed on the way,
  any other error the block ends with, or its normal end, becomes the same
  Interrupted (and raise_if_signalled raises it at once where called).

  consequence: what the user is left with, and what to do.
  """
  def stop(signum, frame):  # pylint: disable=unused-argument
    signals.received(signal.Signals(signum).name)
    raise Interrupted(signal.Signals(signum).name, consequence)

  before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
  signals.enter(consequence)
  try:
    yield
  except Interrupted:
    raise
  except BaseException as e:
    if signals.first():
      raise Interrupted(signals.first(), consequence) from e
    raise
  else:
    signals.raise_if_signalled()
  finally:
    restore_handlers(before)
    signals.leave()


@contextlib.contextmanager
def deferred(consequence: str) -> Iterator[None]:
  """While the block runs, SIGTERM and SIGINT wait: the block's short work
  ends whole (a report and its plot written, its lines printed), then the
  command stops with Interrupted(consequence), also where the block ended
  in SystemExit (a verdict's exit code)."""
  got = []

  def hold(signum, frame):  # pylint: disable=unused-argument
    got.append(signal.Signals(signum).name)

  before = {s: signal.signal(s, hold) for s in (signal.SIGTERM, signal.SIGINT)}
  try:
    yield
  except SystemExit:
    if not got:
      raise
  finally:
    restore_handlers(before)
  if got:
    raise Interrupted(got[0], consequence)


def restore_handlers(before: dict) -> None:
  """Puts back {signal number: the handler signal.signal returned}."""
  for number, handler in before.items():
    # None: a handler not set from Python; the default is what it did.
    signal.signal(number, signal.SIG_DFL if handler is None else handler)


# The flags a command writes through, for the advice on a refused write
# (output_flags).
_OUTPUT_FLAGS = ['--model_dir (or --data_dir, --output)']


def output_flags(text: str) -> None:
  """The flags this command writes through, as a refused write's line
  names them (e.g. '--report (or --record_bundle)')."""
  _OUTPUT_FLAGS[0] = text


# What the OS says, by errno and as TensorFlow's C++ quotes it.
_STORAGE = ((errno.ENOSPC, 'No space left on device'),
            (errno.EROFS, 'Read-only file system'),
            (errno.EDQUOT, 'Disk quota exceeded'),
            (errno.EACCES, 'Permission denied'))


def storage_error(error: BaseException) -> StorageError | None:
  """A KitError for a write the disk refused (full, read-only, no
  permission), from Python (OSError) or TensorFlow (an OpError quoting the
  OS); None for any other error."""
  # OSError, or TensorFlow's OpError (which carries an error_code).
  if not isinstance(error, OSError) and not hasattr(error, 'error_code'):
    return None
  text = str(error)
  for number, reason in _STORAGE:
    if isinstance(error, OSError) and error.errno == number:
      path = error.filename
      break
    if reason in text:
      # The first absolute path that starts a word ('device_/job:...' does
      # not).
      found = re.search(r'(?:^|\s)(/[^\s;\'"]+)', text)
      path = found.group(1) if found else None
      break
  else:
    return None
  where = f' {path}' if path else ''
  flags = _OUTPUT_FLAGS[0]
  advice = (f'free space there, or point {flags} elsewhere'
            if number in (errno.ENOSPC, errno.EDQUOT) else
            f'point {flags} at a folder you can write')
  return StorageError(f'cannot write{where}: {reason.lower()}; {advice}',
                      path)


