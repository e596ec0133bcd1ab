"""The frameworks a port is written in, as registered adapters
(migration_tools/pair/frameworks/): which one a port is, what one that
accepts nothing says, and that the tools ask a port's framework, not its
type. Needs no framework: on every profile."""
import ast
import glob
import os

import pytest

from conftest import REPO
from kit_core.errors import KitError
from migration_tools.pair import array_port
from migration_tools.pair import frameworks
from migration_tools.pair import port as port_lib
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks import pytorch
from toy_array_model import Linear


def _keras_port():
  return port_lib.Port(build_model=lambda params: None,
                       make_optimizer=lambda params: None, trainer_class=object)


def test_each_port_is_its_frameworks():
  assert frameworks.framework_of(_keras_port()).name == 'keras_tf'
  assert frameworks.framework_of(array_port.ArrayPort(make=Linear)).name == (
      'arrays')
  assert [f.name for f in frameworks.registered()] == ['keras_tf', 'arrays',
                                                      'pytorch']


def test_a_torch_port_is_pytorchs_though_it_is_an_array_port_too():
  # The adapter built on another answers for its own ports; no torch needed.
  torch_port = pytorch.TorchPort(make=Linear)
  assert frameworks.framework_of(torch_port).name == 'pytorch'
  assert frameworks.framework_of(array_port.ArrayPort(make=Linear)).name == (
      'arrays')


def test_each_framework_emulates_a_precision_and_a_new_one_refuses_it():
  # --emulate_precision: each adapter of the kit rounds its ports' dots (no
  # framework is imported to say so); an adapter that does not say how
  # refuses it in one line.
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  by_name = {f.name: f for f in frameworks.registered()}
  for name in ('arrays', 'keras_tf', 'pytorch'):
    assert by_name[name].dots(precision.BF16).emulated == precision.BF16
    assert by_name[name].dots().emulated is None
    assert by_name[name].dots().rounded == 0

  class Newer(frameworks.Framework):
    name = 'newer'
    check = describe = placements = seeded = runner = None
    dropout_unaligned = ran_on = tpu_ready = accepts = None

  assert Newer().dots().emulated is None
  with pytest.raises(KitError) as e:
    Newer().dots(precision.TF32)
  assert str(e.value) == (
      '--emulate_precision rounds the dots of a port on Keras on '
      'TensorFlow, JAX or PyTorch; a newer port runs at its device\'s own '
      'precision: leave the flag out')


def test_an_adapter_whose_runner_takes_no_dots_still_runs_with_a_warning():
  # Written before runner() took dots: built as it was, and told what to add.
  class Older(frameworks.Framework):
    name = 'older'
    check = describe = placements = seeded = None
    dropout_unaligned = ran_on = tpu_ready = accepts = None

    def runner(self, port, placement, params, batches):
      return (port, placement, params, batches)

  with pytest.warns(DeprecationWarning, match=r'Older.runner\(port, '
                    r'placement, params, batches\) takes no dots: add '
                    'dots=None'):
    assert Older().build_runner('p', 1, {}, [], None) == ('p', 1, {}, [])
  arrays_adapter = {f.name: f for f in frameworks.registered()}['arrays']
  runner = arrays_adapter.build_runner(array_port.ArrayPort(make=Linear), 1,
                                       {'learning_rate': 0.1}, [],
                                       arrays_adapter.dots())
  assert runner.replicas == 1


def test_an_object_no_framework_takes_is_refused_naming_the_contracts():
  with pytest.raises(KitError) as e:
    frameworks.framework_of({'a': 1}, 'mine:make_port')
  assert str(e.value).startswith(
      '--port mine:make_port returned a dict, not a '
      'migration_tools.pair.port.Port or '
      'migration_tools.pair.array_port.ArrayPort (a port on JAX) or '
      'migration_tools.pair.frameworks.pytorch.TorchPort')


def test_a_new_framework_is_one_register_call(monkeypatch):
  monkeypatch.setattr(base, '_REGISTRY', list(base.registered()))

  class Mine:
    pass

  class MineFramework(frameworks.Framework):
    name = 'mine'
    contract = 'Mine'

    def accepts(self, port):
      return isinstance(port, Mine)

    check = describe = placements = runner = seeded = None
    dropout_unaligned = ran_on = tpu_ready = None

  frameworks.register(MineFramework())
  assert frameworks.framework_of(Mine()).name == 'mine'
  with pytest.raises(ValueError, match="a framework named 'mine'"):
    frameworks.register(MineFramework())


def test_a_framework_must_answer_every_question():
  class Half(frameworks.Framework):
    name = 'half'

    def accepts(self, port):
      return False

  with pytest.raises(TypeError, match='abstract'):
    Half()  # pylint: disable=abstract-class-instantiated


# The port's type is asked in one place: its framework's adapter.
def _type_questions(path):
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and getattr(node.func, 'id', '') ==
        'isinstance' and len(node.args) == 2 and
        'ArrayPort' in ast.unparse(node.args[1])):
      yield node.lineno, ast.unparse(node)
    if isinstance(node, (ast.Attribute, ast.Name)) and (
        getattr(node, 'attr', None) or getattr(node, 'id', None)) in (
            'on_arrays',):
      yield node.lineno, ast.unparse(node)


def test_no_tool_asks_a_ports_type_outside_the_adapters():
  found = []
  for folder in ('migration_tools', 'kit_pair'):
    for root, _, names in os.walk(os.path.join(REPO, folder)):
      if os.path.join('pair', 'frameworks') in root:
        continue
      for name in names:
        if name.endswith('.py'):
          path = os.path.join(root, name)
          found += [f'{os.path.relpath(path, REPO)}:{line}: {code}'
                    for line, code in _type_questions(path)]
  assert not found, found


# What only a framework's adapter may name, in the tools: its contracts (the
# public paths of pair/frameworks/<name>/port.py) and TensorFlow's placement
# and Keras's random-number tools.
_FRAMEWORK_ONLY = ('migration_tools.pair.port', 'migration_tools.pair.array_port')
_FRAMEWORK_APIS = ('tf.distribute.', 'tf.keras.', 'tf.compat.v1.keras.')


def _framework_mentions(path: str, names: list[str], strict: bool) -> list:
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  where = os.path.relpath(path, REPO)
  found = {}  # {line: what}: the first thing found on each line.
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and node.value in names:
      found.setdefault(node.lineno, f'{where}:{node.lineno}: {node.value!r}')
    if isinstance(node, ast.ImportFrom):
      module = node.module or ''
      imported = [f'{module}.{alias.name}' for alias in node.names]
      if any(m.startswith('migration_tools.pair.frameworks.') for m in
             [module + '.', *imported]
             if m != 'migration_tools.pair.frameworks.'):
        found.setdefault(node.lineno, f'{where}:{node.lineno}: from {module}')
      if strict and any(m in _FRAMEWORK_ONLY for m in imported):
        found.setdefault(node.lineno,
                         f'{where}:{node.lineno}: a contract, from {module}')
    if strict and isinstance(node, ast.Attribute):
      text = ast.unparse(node)
      if text.startswith(_FRAMEWORK_APIS):
        found.setdefault(node.lineno, f'{where}:{node.lineno}: {text}')
  return [found[line] for line in sorted(found)]


def test_the_commands_name_no_framework():
  # A new framework is its folder and one register call: compare/ (the live
  # comparison and every check) and checkpoint/ ask the adapter, and key
  # nothing by a framework's name; compare/ names no framework's contract
  # or placement either (the converter reads Keras 2 checkpoints and
  # converts to each contract: it may name them).
  names = [f.name for f in frameworks.registered()]
  found = []
  for folder, strict in (('compare', True), ('checkpoint', False)):
    for path in sorted(glob.glob(os.path.join(REPO, 'migration_tools', folder,
                                              '**', '*.py'), recursive=True)):
      found += _framework_mentions(path, names, strict)
  assert not found, found


def test_the_framework_check_finds_what_it_looks_for(tmp_path):
  # The check above can fail: a check that makes a Keras strategy and
  # imports a framework's module is found, line by line.
  path = tmp_path / 'check.py'
  path.write_text('from migration_tools.pair.frameworks import keras_tf\n'
                  'from migration_tools.pair import port\n'
                  'x = tf.distribute.OneDeviceStrategy("/cpu:0")\n'
                  'name = "pytorch"\n')
  found = _framework_mentions(str(path), ['pytorch'], strict=True)
  assert [line.split(': ', 1)[0].rsplit(':', 1)[1] for line in found] == [
      '1', '2', '3', '4'], found


def test_the_guides_table_has_a_column_per_registered_framework():
  # The frameworks are listed from the registry in --help and in lines; the
  # guide's table of what an adapter answers is held to it here.
  with open(os.path.join(REPO, 'docs', 'EQUIVALENCE.md'),
            encoding='utf-8') as f:
    header = next(line for line in f if line.startswith('| question |'))
  columns = [c.strip() for c in header.strip().strip('|').split('|')]
  assert columns[2:] == [f.title for f in frameworks.registered()]
