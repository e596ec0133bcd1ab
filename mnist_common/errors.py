"""The one error type the kit shows to users as a single line."""


class KitError(Exception):
  """A problem with the user's input or environment.

  Its message is one line that says what is wrong and what to do about it; the
  command-line entry points print it as ``error: <message>`` and exit non-zero.
  """


class DataError(KitError):
  """Missing, malformed or inconsistent data files."""


class TPUNotFoundError(KitError):
  """A TPU was asked for and none could be reached."""


class NonFiniteLossError(KitError):
  """Training diverged: the loss became NaN or infinite."""

  def __init__(self, loss: float, when: str, last_checkpoint: str | None):
    """when: 'by step 12', 'after step 100'."""
    kept = (f'the latest checkpoint, {last_checkpoint}, is the last good one'
            if last_checkpoint else 'no checkpoint was saved')
    super().__init__(
        f'the training loss became {loss} {when}: training stopped, {kept}, '
        'nothing was exported; lower --learning_rate or check the data')


def one_line(error: BaseException) -> str:
  """An exception as the one line a user is shown: a KitError's message, else
  'Type: the first line of its message' (at most 300 characters)."""
  lines = str(error).strip().splitlines()
  text = lines[0][:300] if lines else ''
  if isinstance(error, KitError):
    return text
  return f'{type(error).__name__}: {text}' if text else type(error).__name__
