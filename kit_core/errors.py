"""The error types every command of the kit shows as one line, and how an
error becomes that line. Nothing here touches files: exits.py ends a
command on them."""


class KitError(Exception):
  """A problem with the user's input or environment.

  Its message is one line that says what is wrong and what to do about it; the
  command-line entry points print it as ``error: <message>`` and exit non-zero.
  """


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


class StorageError(KitError):
  """The disk refused a write; path is the file or folder, when known."""

  def __init__(self, message: str, path: str | None):
    super().__init__(message)
    self.path = path


def one_line(error: BaseException) -> str:
  """An exception as the one line a user is shown: a KitError's message, else
  'Type: the first line of its message' (at most 300 characters)."""
  lines = str(error).strip().splitlines()
  text = lines[0][:300] if lines else ''
  if isinstance(error, KitError):
    return text
  return f'{type(error).__name__}: {text}' if text else type(error).__name__
