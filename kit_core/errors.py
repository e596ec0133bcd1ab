"""The error types every command of the kit shows as one line, and how an
error becomes that line. Nothing here touches files: exits.py ends a
command on them."""
import os
import re
import shlex
import signal
import traceback


class KitError(Exception):
  """A problem with the user's input or environment.

  Its message is one line that says what is wrong and what to do about it; the
  command-line entry points print it as ``error: <message>`` and exit non-zero.
  """


class Preempted(KitError):
  """Training was stopped by SIGTERM (or Ctrl-C, SIGINT) after saving a
  checkpoint to resume from.

  Not a failure of the run's input: the command prints ``stopped: <message>``
  and exits with exit_code (128 + the signal's number, what a shell reports
  for a process the signal ended: 143, 130), so that a scheduler sees an
  unfinished job.
  """

  def __init__(self, step: int, checkpoint: str | None,
               signal_name: str = 'SIGTERM',
               again: str = 'run the same command again'):
    """checkpoint: the one saved, None on a worker that keeps none (the
    chief saved it). again: how to run on from it (run_again)."""
    saved = (f'checkpoint {checkpoint} saved at step {step}' if checkpoint
             else f'the chief worker saved the checkpoint at step {step}')
    super().__init__(f'{signal_name} received: {saved}; {again} to resume '
                     'from it')
    self.exit_code = signal_exit_code(signal_name)


class Interrupted(KitError):
  """A signal stopped work that is not resumed midway (an export, a
  conversion, a comparison): what it was writing has been removed.

  Printed as ``stopped: <message>``; exit_code as Preempted's.
  """

  def __init__(self, signal_name: str, consequence: str):
    """consequence: what was left, and what to do ('nothing was exported;
    ...')."""
    super().__init__(f'{signal_name} received: {consequence}')
    self.signal_name, self.consequence = signal_name, consequence
    self.exit_code = signal_exit_code(signal_name)


def run_again(model_dir_flag: str | None, model_dir: str) -> str:
  """How to run on from what a stopped run saved in model_dir: the same
  command, unless --model_dir was left out and the run made a new temporary
  folder, which the same command would not find again."""
  if model_dir_flag is not None:
    return 'run the same command again'
  return f'run again with --model_dir={shlex.quote(model_dir)}'


def signal_exit_code(signal_name: str) -> int:
  """A shell's exit code for a process the signal ended: 143 for SIGTERM."""
  return 128 + signal.Signals[signal_name].value


class StorageError(KitError):
  """The disk refused a write; path is the file or folder, when known."""

  def __init__(self, message: str, path: str | None):
    super().__init__(message)
    self.path = path


def printable(text: str) -> str:
  """text with each character that is not printable (a newline, a terminal
  escape) written as Python writes it in a string (\\n, \\x1b): a name
  from the user's files or model cannot forge a line of the kit's output,
  nor drive the terminal. Printable text is returned as it is, so that
  escaping twice is escaping once."""
  return ''.join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def one_line(error: BaseException) -> str:
  """An exception as the one line a user is shown: a KitError's message
  (whole: the kit writes it, and bounds what it lists), else 'Type: its
  cause' (at most 300 characters), and where in the user's own code it was
  raised, if it was.

  The cause of an error raised inside a tf.function is the last line of its
  message (the first is 'in user code:'); the user's frame is the innermost
  one outside Python, its packages and the kit's tools.
  """
  text = str(error).strip()
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  if isinstance(error, KitError):
    return printable(text)  # One line, a name's newline escaped in it.
  if lines and lines[0] == 'in user code:':
    frames = [line for line in lines if line.startswith('File "') and
              not any(part in line for part in _NOT_USER)]
    # The exception's line; Keras 3 puts its reason on the next line and
    # lists the call's arguments after it.
    causes = [i for i, line in enumerate(lines) if _CAUSE.match(line)]
    at = causes[-1] if causes else len(lines) - 1
    shown = lines[at]
    if 'Exception encountered when calling' in shown and at + 1 < len(lines):
      shown += ' ' + re.sub(r'\x1b\[[0-9;]*m', '', lines[at + 1])
    shown = shown[:300]
    where = _frame_text(frames[-1]) if frames else ''
  else:
    shown = f'{type(error).__name__}: {lines[0][:300]}' if lines else (
        type(error).__name__)
    where = _user_frame(error.__traceback__)
  return f'{shown} (at {where})' if where else shown


_CAUSE = re.compile(r'^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*:')

# Frames that are not the user's: Python's, its packages', the kit's tools'.
_NOT_USER = (os.sep + 'site-packages' + os.sep, os.sep + 'dist-packages' +
             os.sep, os.path.dirname(os.__file__) + os.sep,
             os.path.dirname(os.path.abspath(__file__)) + os.sep,
             os.sep + 'migration_tools' + os.sep)


def _user_frame(trace) -> str:
  """'file.py:12 in name' of the innermost frame of trace in the user's code
  ('' if none)."""
  frames = [f for f in traceback.extract_tb(trace)
            if not any(part in os.path.abspath(f.filename)
                       for part in _NOT_USER)]
  if not frames:
    return ''
  frame = frames[-1]
  return f'{_short(frame.filename)}:{frame.lineno} in {frame.name}'


def _frame_text(line: str) -> str:
  """'file.py:12 in name' of a tf.function message's 'File "...", line 12,
  in name' line."""
  match = re.match(r'File "([^"]+)", line (\d+), in (\S+)', line)
  if not match:
    return ''
  return f'{_short(match.group(1))}:{match.group(2)} in {match.group(3)}'


def _short(path: str) -> str:
  """path relative to the working directory if inside it."""
  relative = os.path.relpath(path)
  return path if relative.startswith('..') else relative
