"""Ending the kit's processes promptly despite TF 2.15's tf.data teardown wait.

The cause, measured with gdb on processes that outlived their last output by
minutes: the main thread waits in tf.data's ``RootDataset::Iterator``
destructor, joining the iterator's autotuning thread, which sleeps in
``Model::OptimizeLoop`` for up to a minute between optimisations and is not
woken when the iterator is cancelled. Destroying N such iterators can cost N
minutes. Every iterator of a tf.distribute input pipeline has one (the
per-device pipelines that ``MultiDeviceIterator`` builds take default
options), so an option on a dataset cannot prevent it in general. Hence:

- ``keep_alive``: an iterator that a run still holds at its end is kept until
  the process exits, so that dropping it mid-run never blocks the run;
- ``run_command``: a command ends with ``os._exit`` once its output is
  flushed, so that Python's finalisation does not destroy those iterators one
  after the other. Nothing is left to write by then: checkpoints, summaries,
  SavedModels and reports are closed when written;
- ``run_command`` also gives the command an output that cannot mislead: a
  closed stdout or stderr (``>&-``) is pointed at /dev/null before anything
  can take its descriptor, and a write stdout refuses (``> /dev/full``) ends
  the command in one line that says so (OutputRefused), not as a full disk;
  its temporary files (AutoGraph's generated modules among them, which
  AutoGraph's atexit hook would remove) go into a private folder
  (kit_core/private_folders.py), removed before ``os._exit``, or by the
  next command if this one is killed;
- ``without_autotune_thread``: for a pipeline the kit iterates itself
  (graph-mode Estimator input_fns, a legacy input_fn read by the tools), no
  autotuning thread at all; element values and order are unchanged.
"""
import contextlib
import importlib.util
import logging
import os
import sys
import tempfile
import traceback
from typing import Callable, Iterator, NoReturn

from kit_core import private_folders
from kit_core.errors import KitError

_LIVE = []


def quiet_tensorflow_startup(argv: list[str] | None = None) -> None:
  """Loads TensorFlow without its C++ start-up logs (CUDA factory
  registration, TensorRT, CPU features: up to ten lines, three of them 'E' on
  TF 2.15, before any output of ours).

  Call before TensorFlow is imported. TF 2.15 obeys TF_CPP_MIN_LOG_LEVEL;
  TF 2.21 logs through absl before that is read, so the import's own stderr
  is held back too, and shown if the import fails. The logs stay when asked
  for: a --verbosity (or -v) of 1 or more, or TF_CPP_MIN_LOG_LEVEL set by the
  user. Errors still reach the user as the kit's one-line messages.
  """
  argv = sys.argv if argv is None else argv
  if ('TF_CPP_MIN_LOG_LEVEL' in os.environ or _verbosity(argv) > 0 or
      'tensorflow' in sys.modules or
      importlib.util.find_spec('tensorflow') is None):  # The jax profile.
    return
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
  with native_stderr_held(lambda text: None):
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import


# What native_stderr_held reads back of what it held: the logs it is for are
# a few lines.
_HELD_STDERR_BYTES = 1 << 20


@contextlib.contextmanager
def native_stderr_held(then: Callable[[str], None]) -> Iterator[None]:
  """While inside, what is written to descriptor 2 is held in a temporary
  file: native libraries' log lines, which no Python logger sees and some
  no setting stops (XLA's absl lines on its first compile: 'All log
  messages before absl::InitializeLog() ...', 'Compiled cluster using
  XLA!'). At the end it goes to then(text); if the block raised, back to
  stderr, where the error's context belongs."""
  sys.stderr.flush()
  saved = os.dup(2)
  raised = True
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
      raised = False
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      held.seek(0)
      text = held.read(_HELD_STDERR_BYTES).decode(errors='replace')
      if text:
        (sys.stderr.write if raised else then)(text)


def _verbosity(argv: list[str]) -> int:
  """absl's --verbosity / -v from argv, before absl has parsed it."""
  for i, arg in enumerate(argv[1:], 1):
    for name in ('--verbosity', '-v'):
      value = None
      if arg.startswith(name + '='):
        value = arg.split('=', 1)[1]
      elif arg == name and i + 1 < len(argv):
        value = argv[i + 1]
      if value is not None:
        try:
          return int(value)
        except ValueError:
          return 0  # absl will refuse it in one line.
  return 0


def keep_alive(iterator):
  """Returns iterator, held until the process exits (see module)."""
  _LIVE.append(iterator)
  return iterator


def without_autotune_thread(dataset):
  """dataset with tf.data's autotuning (and its thread) off."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def _exit_code(exit_: SystemExit) -> int:
  if exit_.code is None:
    return 0
  if isinstance(exit_.code, int):
    return exit_.code
  print(exit_.code, file=sys.stderr)  # sys.exit('message'): what Python does.
  return 1


class OutputRefused(KitError):
  """stdout refused a write (a full disk under it, /dev/full)."""

  def __init__(self, error: OSError):
    super().__init__(f'stdout refused the command\'s output ({error}): its '
                     'work may be done, but what it printed is lost; send '
                     'the output where it can be written')


class _GuardedOutput:
  """A text stream whose refused writes raise OutputRefused (a reader gone
  away stays BrokenPipeError); everything else is the stream's."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text):
    try:
      return self._stream.write(text)
    except BrokenPipeError:
      raise
    except OSError as e:
      raise OutputRefused(e) from e

  def flush(self):
    try:
      self._stream.flush()
    except BrokenPipeError:
      raise
    except OSError as e:
      raise OutputRefused(e) from e

  def __getattr__(self, name):
    return getattr(self._stream, name)


def _sound_output() -> None:
  """A closed stdout or stderr becomes /dev/null (a file opened later must
  not get descriptor 1 or 2); stdout's refused writes say so (OutputRefused)."""
  for fd in (1, 2):
    try:
      os.fstat(fd)
    except OSError:
      os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
  if sys.stdout is None:
    sys.stdout = open(1, 'w', closefd=False)  # pylint: disable=consider-using-with
  if sys.stderr is None:
    sys.stderr = open(2, 'w', closefd=False)  # pylint: disable=consider-using-with
  if not isinstance(sys.stdout, _GuardedOutput):
    sys.stdout = _GuardedOutput(sys.stdout)


def run_command(main: Callable[[], None]) -> NoReturn:
  """Runs main() (e.g. ``lambda: app.run(...)``), then ends the process at
  once with its exit code: 0, the SystemExit's code, 1 after an uncaught
  exception (its traceback printed), 130 on Ctrl-C, 141 when the reader of
  its output went away, 1 when stdout refused it (one line)."""
  _sound_output()
  private_folders.hold_temporary_files()
  try:
    main()
    code = 0
  except SystemExit as e:
    code = _exit_code(e)
  except KeyboardInterrupt:
    # Ctrl-C outside the parts that save or clean up on it: say so.
    print('stopped: SIGINT received (Ctrl-C)', file=sys.stderr)
    code = 130
  except BrokenPipeError:
    code = 141  # The reader went away (| head): as a shell reports SIGPIPE.
  except OutputRefused as e:
    print(f'error: {e}', file=sys.stderr)
    code = 1
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    code = 1
  flush_and_exit(code)


def flush_and_exit(code: int) -> NoReturn:
  """Flushes stdout, stderr and every logging handler, then os._exit(code)."""
  logging.shutdown()
  private_folders.remove_all()  # The command's temporary files with them.
  try:
    if sys.stdout is not None:
      sys.stdout.flush()
  except OutputRefused as e:  # Its last lines, written only now.
    print(f'error: {e}', file=sys.stderr)
    code = code or 1
  except (OSError, ValueError):
    pass
  try:
    if sys.stderr is not None:
      sys.stderr.flush()
  except (OSError, ValueError):
    pass
  os._exit(code)  # pylint: disable=protected-access

