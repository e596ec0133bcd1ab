"""The one error type the kit shows to users as a single line."""
import errno
import math
import re
import sys
from typing import Callable

from mnist_common import stale


class KitError(Exception):
  """A problem with the user's input or environment.

  Its message is one line that says what is wrong and what to do about it; the
  command-line entry points print it as ``error: <message>`` and exit non-zero.
  """


class DataError(KitError):
  """Missing, malformed or inconsistent data files."""


class TPUNotFoundError(KitError):
  """A TPU was asked for and none could be reached."""


class DivergedError(KitError):
  """Training diverged: its loss, gradients or weights stopped being finite.

  Raised before anything is saved or exported from such weights, so the
  latest checkpoint stays the last good one.
  """

  def __init__(self, what: str, step: int, last_checkpoint: str | None):
    """what: 'the training loss became nan', 'the weights became non-finite
    (conv1/kernel)', ..."""
    kept = (f'the latest checkpoint, {last_checkpoint}, is the last good one'
            if last_checkpoint else 'no checkpoint was saved')
    super().__init__(
        f'{what} by step {step}: training stopped, {kept}, nothing was '
        'exported; lower --learning_rate or check the data')

  @classmethod
  def found(cls, non_finite: list[str], loss: float | None, step: int,
            last_checkpoint: str | None) -> 'DivergedError | None':
    """The error for what a check found, or None if all was finite.

    non_finite: the names of the weights that are not finite; loss: the
    training loss, None where it was not looked at.
    """
    what = []
    if non_finite:
      what.append(f'the weights became non-finite '
                  f'({describe_names(non_finite)})')
    if loss is not None and not math.isfinite(loss):
      what.append(f'the training loss became {loss}')
    return cls(' and '.join(what), step, last_checkpoint) if what else None


class NonFiniteExportError(KitError):
  """The weights about to be exported are not finite: nothing is written."""

  def __init__(self, names: list[str]):
    super().__init__(
        f'the weights to export are not finite ({describe_names(names)}): '
        'nothing was exported; train from a checkpoint whose weights are '
        'finite, or lower --learning_rate')


def describe_names(names: list[str], limit: int = 3) -> str:
  """'a, b, c and 4 more': a list of variable names for a one-line message."""
  shown = ', '.join(names[:limit])
  return shown + (f' and {len(names) - limit} more' if len(names) > limit
                  else '')


class Preempted(KitError):
  """Training was stopped by SIGTERM after saving a checkpoint to resume from.

  Not a failure of the run's input: the command prints ``stopped: <message>``
  and exits with EXIT_CODE (128 + SIGTERM, what a shell reports for a
  process SIGTERM ended), so that a scheduler sees an unfinished job.
  """
  EXIT_CODE = 143

  def __init__(self, step: int, checkpoint: str | None):
    """checkpoint: the one saved, None on a worker that keeps none (the
    chief saved it)."""
    saved = (f'checkpoint {checkpoint} saved at step {step}' if checkpoint
             else f'the chief worker saved the checkpoint at step {step}')
    super().__init__(f'SIGTERM received: {saved}; run the same command again '
                     'to resume from it')


def exit_with_one_line(run: Callable[[], None], error_exit: int = 1) -> None:
  """Runs run(), a command's work. A KitError, or a write the disk refused,
  ends the command with its one line on stderr and its exit code
  (error_exit for errors; the unfinished checkpoint or data file of a
  refused write removed); other errors pass."""
  try:
    run()
    return
  except KitError as e:
    message, code = exit_message(e, error_exit)
  except Exception as e:  # pylint: disable=broad-except
    refused = storage_error(e)
    if refused is None:
      raise
    stale.remove_unfinished(refused.path)
    message, code = exit_message(refused, error_exit)
  print(message, file=sys.stderr)
  sys.exit(code)


def exit_message(error: KitError, error_exit: int = 1) -> tuple[str, int]:
  """The line a command prints for error, and its exit code."""
  if isinstance(error, Preempted):
    return f'stopped: {error}', Preempted.EXIT_CODE
  return f'error: {error}', error_exit


# What the OS says, by errno and as TensorFlow's C++ quotes it.
_STORAGE = ((errno.ENOSPC, 'No space left on device'),
            (errno.EROFS, 'Read-only file system'),
            (errno.EDQUOT, 'Disk quota exceeded'),
            (errno.EACCES, 'Permission denied'))


class StorageError(KitError):
  """The disk refused a write; path is the file or folder, when known."""

  def __init__(self, message: str, path: str | None):
    super().__init__(message)
    self.path = path


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
  flags = '--model_dir (or --data_dir, --output)'
  advice = (f'free space there, or point {flags} elsewhere'
            if number in (errno.ENOSPC, errno.EDQUOT) else
            f'point {flags} at a folder you can write')
  return StorageError(f'cannot write{where}: {reason.lower()}; {advice}',
                      path)


def one_line(error: BaseException) -> str:
  """An exception as the one line a user is shown: a KitError's message, else
  'Type: the first line of its message' (at most 300 characters)."""
  lines = str(error).strip().splitlines()
  text = lines[0][:300] if lines else ''
  if isinstance(error, KitError):
    return text
  return f'{type(error).__name__}: {text}' if text else type(error).__name__
