"""What every command of the tools shares: flags kept apart from the user's,
and bad input as one line (pair.py adds the flags that name a pair).

The tools import a team's legacy modules, and nearly every TPU-era module
defines absl flags at import (``data_dir``, ``batch_size``, ``use_tpu``, ...)
on absl's global ``FLAGS``. So the tools define theirs on a ``FlagValues`` of
their own: the user's module loads with no ``DuplicateFlagError``, and its
flags keep their defaults unless ``--legacy_flags`` sets them
(``set_legacy_flags``), for a model_fn that reads ``FLAGS``.
"""
import json
import os
import shlex
import sys
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from kit_core import framework_logs
from kit_core import process
from kit_core import usage as usage_lib
from kit_core.errors import KitError
from kit_core.errors import printable
from kit_core.exits import exit_with_one_line



def parse_params(text: str, batch_flag: str | None = '--batch_size') -> dict:
  """--params: a JSON object -> dict.

  Args:
    text: the flag's value.
    batch_flag: the command's flag for the global batch, which TPUEstimator
      sets as params['batch_size']; None: the command has no batch, and a
      batch_size in --params is the user's own.

  Raises:
    KitError: not JSON, not an object, or a key TPUEstimator reserves.
  """
  try:
    params = json.loads(text) if text else {}
  except ValueError as e:
    raise KitError(f'--params is not JSON ({e}); give an object, e.g. '
                   '\'{"data_dir": "/data", "learning_rate": 0.1}\'') from e
  if not isinstance(params, dict):
    raise KitError(f'--params must be a JSON object, not {text!r}')
  reserved = sorted(set(params) & ({'context', 'use_tpu'} | (
      {'batch_size'} if batch_flag else set())))
  if reserved:
    raise KitError(f'--params holds {", ".join(reserved)}, which TPUEstimator '
                   'sets itself' + (f' (batch_size: use {batch_flag})'
                                    if 'batch_size' in reserved else ''))
  return params


def define_legacy_flags(tool_flags: flags.FlagValues) -> None:
  """--legacy_flags, for the commands that run a user's legacy code."""
  flags.DEFINE_string(
      'legacy_flags', '',
      'Flags for the legacy code, as on its own command line (e.g. '
      '"--data_dir=/data --use_tpu=false"): set on absl\'s FLAGS after the '
      'legacy modules are imported, for a model_fn or input_fn that reads '
      'FLAGS. Unset: every flag the legacy code defines keeps its default.',
      flag_values=tool_flags)


def set_legacy_flags(spec: str, known_only: bool = False) -> list[str]:
  """Parses spec into absl's global FLAGS (where the legacy code's flags are).

  Call after the legacy modules are imported, so their flags exist.

  Args:
    spec: the flags, as on the legacy code's command line.
    known_only: set the flags some module here defines, and return the
      others (a bundle's, replayed with a port that imports no legacy
      module); else every flag must be defined.

  Returns:
    The flags of spec no module defines (known_only), else [].

  Raises:
    KitError: a flag the legacy code does not define, or a bad value.
  """
  if not spec:
    return []
  try:
    left = flags.FLAGS([sys.argv[0], *shlex.split(spec)],
                       known_only=known_only)
  except (flags.Error, ValueError) as e:
    raise KitError(f'--legacy_flags: {e}; give the legacy code\'s own flags, '
                   'as on its command line') from e
  return left[1:]


def _log_path(tool_flags: flags.FlagValues) -> str | None:
  """Where the frameworks' held-back lines go: beside the command's
  --report (report.json: report.log), or nowhere."""
  report = tool_flags['report'].value if 'report' in tool_flags else None
  return os.path.splitext(report)[0] + '.log' if report else None


def run(main: Callable[[flags.FlagValues, list[str]], None],
        define_flags: Callable[[flags.FlagValues], None], usage: str,
        bad_input_exit: int = 1) -> None:
  """Runs main(tool_flags, positional_args) as a command, and ends the
  process as soon as it is done (kit_core/process.py says why).

  Args:
    main: the command; it may raise KitError, printed as one line.
    define_flags: defines the command's flags on the FlagValues it is given.
    usage: printed by --help before the flags.
    bad_input_exit: the exit code of a bad flag or a KitError.
  """
  tool_flags = flags.FlagValues()
  define_flags(tool_flags)
  flags.DEFINE_bool('verbose', False, 'Show the frameworks\' own log lines '
                    '(TensorFlow\'s deprecation notices about the legacy '
                    'code, ...). Without it, those below ERROR go to a .log '
                    'file beside the --report, if the command writes one.',
                    flag_values=tool_flags)

  def parse(argv: list[str]) -> list[str]:
    if usage_lib.asked(argv):
      usage_lib.print_and_exit(usage, (tool_flags[n] for n in tool_flags))
    try:
      positional = tool_flags(argv)
    except flags.Error as e:
      print(printable(f'error: {e}; see {argv[0]} --help'), file=sys.stderr)
      sys.exit(bad_input_exit)
    flags.FLAGS([argv[0]])  # absl's own flags, at their defaults.
    return positional

  def guarded_main(argv: list[str]) -> None:
    logging.set_verbosity(logging.WARNING)
    if not tool_flags.verbose:
      framework_logs.hold_back(_log_path(tool_flags))
    exit_with_one_line(lambda: main(tool_flags, argv[1:]), bad_input_exit)

  process.run_command(lambda: app.run(guarded_main, flags_parser=parse))
