"""The mechanical part of a migration, as a unified diff (migration-scan
--diff): only rewrites that are safe by construction, never a file edited in
place.

- a TF 1 symbol TF 2 still has under another name, the same object
  (tf.log -> tf.math.log, tf.random_normal -> tf.random.normal);
- the rest of what TF 2's tf lacks, spelt through tf.compat.v1
  (tf.Session -> tf.compat.v1.Session): step 1 of the plan, the code runs
  on TF 2.15;
- tf.flags / tf.app.flags and tf.logging -> absl.flags and absl.logging
  (the same functions; the import is added), unless the file uses the name
  flags or logging for something else;
- tf.gfile.X -> tf.io.gfile.x (the snake_case names);
- tf.to_float(x) and the other tf.to_* -> tf.cast(x, tf.float32);
- .value dropped from an indexed shape (x.shape[-1].value -> x.shape[-1]).

Only plain ``import tensorflow as tf`` spellings are rewritten (through
tf.compat.v1 the code already runs). tf_upgrade_v2 leaves tf.contrib and
Estimator code alone, and so does this: the report's plan says what to do
with them.
"""
import ast
import dataclasses
import difflib
import os
import tokenize

from migration_tools.scanner import engine
from migration_tools.scanner import tf_api

GFILE = {
    'Copy': 'copy', 'DeleteRecursively': 'rmtree', 'Exists': 'exists',
    'FastGFile': 'GFile', 'GFile': 'GFile', 'Glob': 'glob',
    'IsDirectory': 'isdir', 'ListDirectory': 'listdir', 'MakeDirs': 'makedirs',
    'MkDir': 'mkdir', 'Open': 'GFile', 'Remove': 'remove', 'Rename': 'rename',
    'Stat': 'stat', 'Walk': 'walk'}
TO_DTYPE = {'to_float': 'float32', 'to_double': 'float64',
            'to_int32': 'int32', 'to_int64': 'int64',
            'to_bfloat16': 'bfloat16', 'to_complex64': 'complex64',
            'to_complex128': 'complex128'}
# What absl.logging has of tf.logging's names.
ABSL_LOGGING = {'debug', 'info', 'warning', 'warn', 'error', 'fatal', 'log',
                'vlog', 'log_every_n', 'log_first_n', 'log_if', 'flush',
                'set_verbosity', 'get_verbosity', 'DEBUG', 'INFO', 'WARN',
                'ERROR', 'FATAL'}


@dataclasses.dataclass(frozen=True)
class Edit:
  """Replace the source from start to end, (line, UTF-8 byte column) as ast
  gives them, with text."""
  start: tuple[int, int]
  end: tuple[int, int]
  text: str


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
  return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _bound_elsewhere(tree: ast.AST, name: str, names: dict) -> bool:
  """Whether the module uses name for something else than absl's module of
  that name: bound by another import, assigned, or a parameter."""
  if names.get(name, f'absl.{name}') != f'absl.{name}':
    return True
  for node in ast.walk(tree):
    if isinstance(node, ast.Name) and node.id == name and not isinstance(
        node.ctx, ast.Load):
      return True
    if isinstance(node, ast.arg) and node.arg == name:
      return True
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
      return True
  return False


class _Rewriter:
  """The edits of one parsed module."""

  def __init__(self, tree: ast.AST):
    self.tree = tree
    self.names = engine.names(tree)
    self.edits, self.imports = [], set()
    self.absl_ok = {name: not _bound_elsewhere(tree, name, self.names)
                    for name in ('flags', 'logging')}

  def run(self) -> list[Edit]:
    inside = set()
    for node in ast.walk(self.tree):  # Breadth first: outer chains first.
      if id(node) in inside:
        continue
      if isinstance(node, ast.Attribute):
        if self._chain(node):
          inside |= {id(n) for n in ast.walk(node)}
        elif node.attr == 'value' and engine.indexes_a_shape(node.value):
          self.edits.append(Edit(_span(node.value)[1], _span(node)[1], ''))
    return self.edits

  def _chain(self, node: ast.Attribute) -> bool:
    """Rewrites a chain tf.a.b...; True when it is TensorFlow's."""
    parts = engine.dotted(node)
    base = parts and self.names.get(parts[0])
    if base != 'tensorflow':
      return bool(parts and base and engine.canonical(base))
    inside_tf = parts[1:]
    replacement = self._replacement(parts[0], inside_tf)
    if replacement is not None:
      self.edits.append(Edit(*_span(node), replacement))
    return True

  def _replacement(self, tf: str, path: list[str]) -> str | None:
    head = path[0]
    if head == 'gfile' and len(path) == 2 and path[1] in GFILE:
      return f'{tf}.io.gfile.{GFILE[path[1]]}'
    absl = ('flags', path[1:]) if head == 'flags' else (
        ('flags', path[2:]) if path[:2] == ['app', 'flags'] else (
            ('logging', path[1:]) if head == 'logging' else None))
    if absl:
      return self._absl(*absl)
    if len(path) == 1 and head in TO_DTYPE:
      return None  # A call's rewrite (_call), not the name's.
    return self._renamed(tf, path)

  def _absl(self, module: str, rest: list[str]) -> str | None:
    if not self.absl_ok[module] or (
        module == 'logging' and rest and rest[0] not in ABSL_LOGGING):
      return None
    if module not in self.names:  # Not yet imported from absl.
      self.imports.add(module)
    return '.'.join([module] + rest)

  def _renamed(self, tf: str, path: list[str]) -> str | None:
    for n in range(len(path), 0, -1):
      entry = tf_api.API.get('.'.join(path[:n]))
      if entry:
        break
    else:
      return None
    if entry[1] != 'removed':
      return None
    if entry[2]:  # The same object under its TF 2 name.
      return '.'.join([tf, entry[2]] + path[n:])
    return '.'.join([tf, 'compat', 'v1'] + path)

  def calls(self) -> None:
    """tf.to_float(x[, name=...]) -> tf.cast(x, tf.float32[, name=...])."""
    for node in ast.walk(self.tree):
      if not isinstance(node, ast.Call):
        continue
      parts = engine.dotted(node.func)
      if (not parts or len(parts) != 2 or parts[1] not in TO_DTYPE or
          self.names.get(parts[0]) != 'tensorflow' or len(node.args) != 1 or
          isinstance(node.args[0], ast.Starred) or
          any(k.arg != 'name' for k in node.keywords)):
        continue
      self.edits.append(Edit(*_span(node.func), f'{parts[0]}.cast'))
      end = _span(node.args[0])[1]
      self.edits.append(Edit(end, end, f', {parts[0]}.{TO_DTYPE[parts[1]]}'))


def _offsets(data: bytes) -> list[int]:
  """The byte offset of each line's start (lines as ast counts them)."""
  starts, at = [0], 0
  for line in data.splitlines(keepends=True):
    at += len(line)
    starts.append(at)
  return starts


def apply(source: str, edits: list[Edit]) -> str:
  """source with edits made (they may not overlap)."""
  data = source.encode('utf-8')
  starts = _offsets(data)
  spans = sorted(((starts[s[0] - 1] + s[1], starts[e[0] - 1] + e[1], text)
                  for s, e, text in ((x.start, x.end, x.text) for x in edits)),
                 reverse=True)
  for begin, end, text in spans:
    data = data[:begin] + text.encode('utf-8') + data[end:]
  return data.decode('utf-8')


def _with_imports(source: str, tree: ast.Module, modules: set[str]) -> str:
  """source with `from absl import M` for each of modules, after the
  module's docstring and __future__ imports."""
  if not modules:
    return source
  body = tree.body
  at = 0
  while at < len(body) and (
      (at == 0 and isinstance(body[0], ast.Expr) and
       isinstance(body[0].value, ast.Constant) and
       isinstance(body[0].value.value, str)) or
      (isinstance(body[at], ast.ImportFrom) and
       body[at].module == '__future__')):
    at += 1
  line = body[at].lineno if at < len(body) else len(source.splitlines()) + 1
  lines = source.splitlines(keepends=True)
  newline = '\r\n' if lines and lines[0].endswith('\r\n') else '\n'
  added = ''.join(f'from absl import {m}{newline}' for m in sorted(modules))
  return ''.join(lines[:line - 1]) + added + ''.join(lines[line - 1:])


def rewrite(source: str) -> str:
  """source with its safe rewrites made.

  Raises:
    SyntaxError, ValueError: it does not parse.
  """
  tree = ast.parse(source)
  rewriter = _Rewriter(tree)
  rewriter.run()
  rewriter.calls()
  if not rewriter.edits:
    return source
  return _with_imports(apply(source, rewriter.edits), tree,
                       rewriter.imports)


def _read(path: str) -> tuple[str, str]:
  """The file's text with its line endings as they are, and its encoding."""
  with open(path, 'rb') as f:
    encoding, _ = tokenize.detect_encoding(f.readline)
  with open(path, encoding=encoding, newline='') as f:
    return f.read(), encoding


def file_diff(path: str) -> bytes:
  """The unified diff of path's safe rewrites (b'' if none), in the file's
  own encoding, its path relative to the working directory as git writes
  it (apply with git apply, or patch -p1).

  Raises:
    OSError, SyntaxError, ValueError, UnicodeDecodeError: it cannot be
      read or parsed.
  """
  text, encoding = _read(path)
  # utf-8-sig read the BOM off, for Python's parser; the diff keeps it.
  bom = '\ufeff' if encoding == 'utf-8-sig' else ''
  new, text = bom + rewrite(text), bom + text
  if new == text:
    return b''
  name = os.path.relpath(path).replace(os.sep, '/')
  old_lines = text.splitlines(keepends=True)
  new_lines = new.splitlines(keepends=True)
  lines = list(difflib.unified_diff(old_lines, new_lines, f'a/{name}',
                                    f'b/{name}'))
  for i, line in enumerate(lines):
    if not line.endswith('\n'):
      lines[i] = line + '\n\\ No newline at end of file\n'
  return ''.join(lines).encode('utf-8' if bom else encoding)
