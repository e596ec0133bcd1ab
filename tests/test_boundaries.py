"""The house's boundaries, read from the code: the tools and the core import
nothing of the example, the example nothing of the tools, the core nothing of the tools, and no module of the
kit imports itself back through others. BUILD's dependencies hold the same
lines for Bazel."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('kit_core', 'mnist_common', 'estimator_mnist', 'migrate',
            'migrate_jax', 'migration_tools', 'kit_pair')
EXAMPLE = ('mnist_common', 'estimator_mnist', 'migrate', 'migrate_jax')
HALVES = ('estimator_mnist', 'migrate', 'migrate_jax')


def _module_name(path: str) -> str:
  name = os.path.relpath(path, ROOT)[:-len('.py')].replace(os.sep, '.')
  return name[:-len('.__init__')] if name.endswith('.__init__') else name


def _sources() -> dict[str, str]:
  """{module name: path} of every module of the kit's packages."""
  found = {}
  for package in PACKAGES:
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      for name in files:
        if name.endswith('.py'):
          path = os.path.join(folder, name)
          found[_module_name(path)] = path
  return found


def imports(path: str, known: set[str]) -> set[str]:
  """The kit modules path imports, anywhere in it (in functions too)."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module)
      names.update(f'{node.module}.{alias.name}' for alias in node.names)
  return {name for name in names if name in known}


SOURCES = _sources()
GRAPH = {module: imports(path, set(SOURCES)) for module, path in
         SOURCES.items()}


def _crossing(packages: tuple[str, ...], forbidden: tuple[str, ...]
              ) -> list[str]:
  return sorted(f'{module} imports {target}'
                for module, targets in GRAPH.items()
                if module.split('.')[0] in packages
                for target in targets if target.split('.')[0] in forbidden)


def test_the_graph_is_read_from_the_code():
  # A failure here means the reader above is broken, not the house.
  assert 'migration_tools.compare.harness' in GRAPH
  assert 'migration_tools.pair.side' in GRAPH['migration_tools.compare.harness']
  assert 'kit_core.errors' in GRAPH['kit_core.exits']


def test_the_tools_import_nothing_of_the_example():
  assert _crossing(('migration_tools', 'kit_core'), EXAMPLE) == []


def test_the_tools_stand_on_the_pair_and_the_pair_on_no_tool():
  # compare/ and checkpoint/ are tools on top of pair/ (both sides, the
  # port contract, the maps); pair/ imports neither.
  pair = [m for m in GRAPH if m.startswith('migration_tools.pair.')]
  assert pair and not any(
      t.startswith(('migration_tools.compare', 'migration_tools.checkpoint'))
      for m in pair for t in GRAPH[m]), pair
  for tool in ('migration_tools.compare.harness',
               'migration_tools.checkpoint.estimator'):
    assert any(t.startswith('migration_tools.pair.') for t in GRAPH[tool])


def test_the_ports_keras_pieces_are_for_ports_alone():
  # tf1_keras/ is what a port takes (TF 1's optimizers and batch norm in
  # Keras); no tool stands on it, and it stands on no tool.
  pieces = 'migration_tools.tf1_keras'
  assert any(m.startswith(pieces + '.') for m in GRAPH), GRAPH.keys()
  crossing = sorted(
      f'{module} imports {target}' for module, targets in GRAPH.items()
      for target in targets
      if module.startswith('migration_tools.') and
      module.startswith(pieces) != target.startswith(pieces) and
      target.startswith('migration_tools.'))
  assert crossing == []


def test_the_core_imports_nothing_of_the_tools():
  assert _crossing(('kit_core',), ('migration_tools',)) == []


def test_the_cores_map_names_each_of_its_modules():
  # kit_core/__init__.py is where a reader finds what the core holds.
  with open(os.path.join(ROOT, 'kit_core', '__init__.py'),
            encoding='utf-8') as f:
    named = set(re.findall(r'\b\w+\b', ast.get_docstring(ast.parse(f.read()))))
  modules = {m.split('.')[1] for m in SOURCES if m.startswith('kit_core.')}
  assert sorted(modules - named) == []


def test_the_example_imports_nothing_of_the_tools():
  # Both halves stand without the tools; the kit's own pair (kit_pair/),
  # which hands them to the tools, lives apart from both.
  assert _crossing(EXAMPLE, ('migration_tools', 'kit_pair')) == []


def test_each_half_of_the_example_imports_no_other_half():
  # What the halves share lives once, in mnist_common/ and kit_core/.
  for half in HALVES:
    others = tuple(h for h in HALVES if h != half)
    assert _crossing((half,), others) == []


def test_the_pair_is_the_one_package_that_meets_both():
  assert _crossing(('kit_pair',), ('migration_tools',))
  assert _crossing(('kit_pair',), EXAMPLE)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in graph.get(node, ()):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return found


@pytest.mark.parametrize('graph, expected', [
    ({'a': {'b'}, 'b': {'c'}, 'c': set()}, []),
    ({'a': {'b'}, 'b': {'a'}, 'c': {'a'}}, [['a', 'b']]),
    ({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}, [['a', 'b', 'c']]),
])
def test_cycles_finds_each_cycle(graph, expected):
  assert cycles(graph) == expected


def test_no_module_of_the_kit_imports_itself_back():
  # A package imports its own __init__ (a docstring) implicitly; that is no
  # cycle.
  graph = {module: {t for t in targets if not module.startswith(t + '.')}
           for module, targets in GRAPH.items()}
  assert cycles(graph) == []
