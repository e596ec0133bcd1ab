"""Import paths of an earlier release that moved, and where to.

What users import is a contract: a documented path that moves keeps
importing for a release, through a module left at the old path that warns
(``alias``) and hands over the new one. A path that moved and has no alias
(a module no release documented) is named in the ImportError's line
(``where``), with the path to import instead.

A documented path may also stay the one to import while its code lives
elsewhere (``public``): the port contracts, imported by every team's port,
live in their frameworks' folders (pair/frameworks/<name>/port.py).
"""
from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import warnings

# {old path: new path} of the documented modules that moved, each aliased by
# a module at the old path until the release after the one that moved it.
ALIASED = {'migration_tools.port': 'migration_tools.pair.port'}


# {documented path: where its code lives}: the path stays the one to import,
# with no warning, and names the same module object as its home.
PUBLIC = {
    'migration_tools.pair.port':
        'migration_tools.pair.frameworks.keras_tf.port',
    'migration_tools.pair.array_port':
        'migration_tools.pair.frameworks.arrays.port',
}

# {old path: new path} of undocumented modules that moved under another last
# name (where() finds the others by their last name).
RENAMED = {
    'migration_tools.pair.port_runner':
        'migration_tools.pair.frameworks.keras_tf.runner',
    'migration_tools.pair.array_runner':
        'migration_tools.pair.frameworks.arrays.runner',
    'migration_tools.pair.frameworks.keras_tf_precision':
        'migration_tools.pair.frameworks.keras_tf.precision',
    'migration_tools.pair.frameworks.keras_tf_tpu':
        'migration_tools.pair.frameworks.keras_tf.tpu',
    'migration_tools.pair.frameworks.arrays_precision':
        'migration_tools.pair.frameworks.arrays.precision',
    'migration_tools.pair.frameworks.arrays_tpu':
        'migration_tools.pair.frameworks.arrays.tpu',
    'migration_tools.pair.frameworks.pytorch_precision':
        'migration_tools.pair.frameworks.pytorch.precision',
}


def public(name: str) -> None:
  """Makes the module at name (whose code calls this) the one its code lives
  in (PUBLIC): both paths import the same module."""
  sys.modules[name] = importlib.import_module(PUBLIC[name])


def alias(old: str) -> None:
  """Makes the module at old (whose code calls this) the one at its new path,
  with a DeprecationWarning that names the new spelling."""
  new = ALIASED[old]
  package, _, name = new.rpartition('.')
  warnings.warn(f'{old} moved to {new}: import it as `from {package} '
                f'import {name}`; {old} goes in the next release',
                DeprecationWarning, stacklevel=3)
  sys.modules[old] = importlib.import_module(new)


def is_ours(message) -> bool:
  """Whether a warning's message is alias()'s."""
  return isinstance(message, DeprecationWarning) and any(
      str(message).startswith(f'{old} moved to ') for old in ALIASED)


# What an ImportError says of the name it could not import.
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '(migration_tools"
                      r"[\w.]*)'")
_NO_MODULE = re.compile(r"No module named '(migration_tools[\w.]*)'")


def where(error: ImportError) -> str:
  """', which is now NEW' for an ImportError of a kit module that lives at
  another path now (by its last name), or ''."""
  text = str(error)
  found = _NO_NAME.search(text)
  if found:
    wanted = f'{found[2]}.{found[1]}'
  else:
    found = _NO_MODULE.search(text)
    if not found:
      return ''
    wanted = found[1]
  if wanted in RENAMED:
    return f': {wanted} is now {RENAMED[wanted]}'
  last = wanted.rpartition('.')[2]
  # A package that cannot be imported here is passed by: this only words
  # an error.
  modules = pkgutil.walk_packages(
      importlib.import_module('migration_tools').__path__, 'migration_tools.',
      onerror=lambda name: None)
  now = sorted(m.name for m in modules
               if m.name.rpartition('.')[2] == last and m.name != wanted)
  return f': {wanted} is now {" or ".join(now)}' if now else ''
