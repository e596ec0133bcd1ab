"""A callable the user names on the command line, as package.module:name."""
import importlib
import sys
import warnings

from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import printable
from kit_core.errors import one_line
from migration_tools import moved


def load_callable(spec: str, what: str = 'it'):
  """'package.module:name' -> the callable it names.

  Args:
    spec: the user's name for it, as given on the command line.
    what: the flag that gave it, for the message.

  Raises:
    KitError: a malformed spec, a module that cannot be imported (or raises
      or exits when imported), a missing name, or an object that is not
      callable.
  """
  module_name, _, attribute = spec.partition(':')
  if not module_name or not attribute:
    raise KitError(f'{what} {spec!r}: expected package.module:name')
  try:
    module = _imported(module_name)
  except ImportError as e:
    moved_to = moved.where(e)
    if moved_to:
      raise KitError(f'{what}: cannot import {module_name} ({e}{moved_to}); '
                     'import it from there') from e
    raise KitError(f'{what}: cannot import {module_name} ({e}); is its code '
                   'on PYTHONPATH?') from e
  except SystemExit as e:
    # A script's main guard missing: its code ran, and ended the process.
    raise KitError(f'{what}: importing {module_name} called sys.exit'
                   f'({e.code!r}); a module the kit imports must not run a '
                   'program at import (put it under if __name__ == '
                   "'__main__':)") from e
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    # The user's module ran code at import and it failed: say so in a line.
    raise KitError(f'{what}: importing {module_name} raised '
                   f'{one_line(e)}') from e
  if not hasattr(module, attribute):
    raise KitError(f'{what}: {module_name} has no {attribute}')
  value = getattr(module, attribute)
  if not callable(value):
    raise KitError(f'{what}: {spec} is a {type(value).__name__}, not a '
                   'function or class')
  return value


def _imported(module_name: str):
  """The module, imported; a path of the kit's that moved, which it
  imports, said on stderr in a line (a DeprecationWarning outside __main__
  is otherwise not shown), every other warning as Python would."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always', DeprecationWarning)
    module = importlib.import_module(module_name)
  for warning in caught:
    if moved.is_ours(warning.message):
      print(printable(f'warning: {warning.filename}:{warning.lineno}: '
                      f'{warning.message}'), file=sys.stderr)
    else:
      warnings.warn_explicit(warning.message, warning.category,
                             warning.filename, warning.lineno)
  return module
