"""What the docs promise a user exists: every console script, every flag
shown with a command, every import of the kit's code.

The documented surface is read from the docs themselves (README.md,
docs/*.md, benchmarks/README.md), not from a list kept here: a flag that
moves or a module that is renamed fails here until the docs say so (or keep
the old spelling working, with a deprecation warning). Each command's flags
are what its own --help prints, so --help and the docs are held to each
other.
"""
import configparser
import functools
import glob
import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

DOCS = sorted([os.path.join(REPO, 'README.md'),
               os.path.join(REPO, 'benchmarks', 'README.md'),
               *glob.glob(os.path.join(REPO, 'docs', '*.md'))])
# absl's own flags, which every command takes.
ABSL_FLAGS = {'help', 'helpfull', 'helpshort', 'verbosity', 'v',
              'logtostderr', 'alsologtostderr', 'flagfile'}
# The framework each example package is written for: checked where it is.
NEEDS = {'migrate_jax': 'jax', 'estimator_mnist': 'tensorflow_estimator',
         'migrate': 'tensorflow', 'kit_pair': 'tensorflow'}


def _scripts() -> dict[str, str]:
  """{console script: the package `python -m` runs it as}."""
  config = configparser.ConfigParser()
  config.read(os.path.join(REPO, 'setup.cfg'))
  scripts = {}
  for line in config['options.entry_points']['console_scripts'].splitlines():
    if '=' in line:
      name, target = (part.strip() for part in line.split('='))
      scripts[name] = target.split(':')[0].rpartition('.')[0]
  return scripts


SCRIPTS = _scripts()
PACKAGES = {package: name for name, package in SCRIPTS.items()}


def _code(text: str) -> list[str]:
  """The code of a markdown text: each line of its fenced blocks (a
  backslash continuation joined) and each inline code span."""
  pieces = []
  for block in re.findall(r'^```[^\n]*\n(.*?)^```', text, re.S | re.M):
    pieces += block.replace('\\\n', ' ').splitlines()
  prose = re.sub(r'^```[^\n]*\n.*?^```', '', text, flags=re.S | re.M)
  pieces += re.findall(r'`([^`\n]+)`', prose)
  return pieces


@functools.lru_cache(maxsize=None)
def _documented_flags() -> dict[str, dict[str, set[str]]]:
  """{console script: {flag: the docs that show it with the command}}."""
  command = re.compile(
      r'(?:^|[\s(=])(?:python3?(?:\.\d+)? -m ([\w.]+)|(' +
      '|'.join(re.escape(name) for name in SCRIPTS) + r'))(?=\s|$)')
  found = {name: {} for name in SCRIPTS}
  for path in DOCS:
    with open(path) as f:
      text = f.read()
    for piece in _code(text):
      for match in command.finditer(piece):
        name = match.group(2) or PACKAGES.get(match.group(1))
        if name is None:
          continue
        # The command's own words: up to a pipe, a list or a comment.
        words = re.split(r'\s(?:\||&&|;|#)\s?|\s>', piece[match.end():])[0]
        for flag in re.findall(r'(?:^|\s)--([a-z][a-z0-9_]*)', words):
          found[name].setdefault(flag, set()).add(os.path.relpath(path, REPO))
  return found


@functools.lru_cache(maxsize=None)
def _help_flags(name: str) -> set[str]:
  """The flags `python -m PACKAGE --help` lists for a console script."""
  needs = NEEDS.get(SCRIPTS[name].split('.')[0])
  if needs and importlib.util.find_spec(needs) is None:
    pytest.skip(f'{name} needs {needs}, which this profile does not '
                'install: the profile that has it checks it')
  ran = subprocess.run([sys.executable, '-m', SCRIPTS[name], '--help'],
                       capture_output=True, text=True, cwd=REPO, timeout=300,
                       check=False)
  missing = re.search(r"No module named '(\w+)'", ran.stderr)
  if ran.returncode and missing:
    pytest.skip(f'{name} needs {missing.group(1)}, which this profile does '
                'not install: the profile that has it checks it')
  assert ran.returncode == 0, ran.stderr[-2000:]
  assert '\nflags:\n' in ran.stdout, (
      f'{name} --help lists no flags:\n{ran.stdout[:1000]}')
  return set(re.findall(r'^  --([a-z][a-z0-9_]*):', ran.stdout, re.M))


def test_every_console_script_is_documented_in_the_readme():
  with open(os.path.join(REPO, 'README.md')) as f:
    readme = f.read()
  assert len(SCRIPTS) >= 6
  assert [name for name in SCRIPTS if name not in readme] == []


def test_the_docs_show_the_commands_with_their_flags():
  shown = _documented_flags()
  # The reading finds what the docs show (a flag of each tool at least).
  for name in ('migration-compare', 'migration-scan',
               'migration-convert-checkpoint', 'migrate-mnist'):
    assert len(shown[name]) >= 2, (name, shown[name])


@pytest.mark.parametrize('name', sorted(SCRIPTS))
def test_every_flag_the_docs_show_with_a_command_is_in_its_help(name):
  documented = _documented_flags()[name]
  listed = _help_flags(name) | ABSL_FLAGS
  unknown = {flag: sorted(where) for flag, where in documented.items()
             if flag not in listed and not (
                 flag.startswith('no') and flag[2:] in listed)}
  assert unknown == {}, (
      f'{name} --help does not list flags the docs show with it')


OURS = ('migration_tools', 'kit_core', 'kit_pair', 'mnist_common',
        'estimator_mnist', 'migrate', 'migrate_jax')


def _imports() -> set[tuple[str, str]]:
  """(module, attribute path) of what the docs name of the kit's code:
  `package/module.py:Name.method`, `package.module`, and `from
  package.module import Name` in their code."""
  found = set()
  for path in DOCS:
    with open(path) as f:
      text = f.read()
    for file, name in re.findall(r'`([\w/]+)\.py:([\w.]+)`', text):
      if file.split('/')[0] in OURS:
        found.add((file.replace('/', '.').removesuffix('.__init__'), name))
    for module in re.findall(r'`([a-z_]+(?:\.[a-z_0-9]+)+)`', text):
      if module.split('.')[0] in OURS:
        found.add((module, ''))
    for piece in _code(text):
      for module, names in re.findall(
          r'^\s*from ([\w.]+) import ([\w, ]+)', piece):
        if module.split('.')[0] in OURS:
          found |= {(module, n.strip().split(' as ')[0])
                    for n in names.split(',') if n.strip()}
  return found


def test_the_docs_name_the_kits_code():
  assert len(_imports()) >= 50, _imports()


@pytest.mark.parametrize('module, name', sorted(_imports()))
def test_everything_the_docs_name_imports(module, name):
  needs = NEEDS.get(module.split('.')[0])
  if needs and importlib.util.find_spec(needs) is None:
    pytest.skip(f'{module} needs {needs}, which this profile does not '
                'install: the profile that has it checks it')
  try:
    imported = importlib.import_module(module)
  except ModuleNotFoundError as e:
    if e.name.split('.')[0] in ('tensorflow', 'jax', 'torch', 'keras',
                                'tensorflow_estimator', 'optax'):
      pytest.skip(f'{module} needs {e.name}, which this profile does not '
                  'install: the profile that has it checks it')
    raise
  value = imported
  for part in filter(None, name.split('.')):
    assert hasattr(value, part), f'{module}: {name}'
    value = getattr(value, part)
