"""The scanner's engine: each file's AST, matched against the rule table.

The code is parsed, never imported or run. Imports and aliases are resolved
(``import tensorflow.compat.v1 as tf``, ``from tensorflow.contrib import tpu
as contrib_tpu``, ``flags = tf.flags``), so every use is matched by its full
API path against rules.py and, where no row matches, against tf_api.py's
record of what TF 2 did to each TF 1 symbol. The engine holds no rule of its
own. It walks the tree without recursion, so a deeply nested expression never
aborts a scan; a file Python itself cannot parse is listed as unchecked with
the reason.
"""
import ast
import dataclasses
import fnmatch
import os
import stat
import tokenize
from typing import Callable

from migration_tools.scanner import notebooks
from migration_tools.scanner import rules as rules_lib
from migration_tools.scanner import shapes
from migration_tools.scanner import tf_api

GUIDE = 'docs/MIGRATION.md'
# The reason an unchecked file gives when it is Python 2 (or broken): the
# plan counts these in its step 1.
NOT_PYTHON3 = 'does not parse as Python 3'
SKIP_FILE = '# migration-scan: skip-file'
IGNORE_LINE = '# migration-scan: ignore'


@dataclasses.dataclass(frozen=True)
class Finding:
  """One legacy construct on one line."""
  path: str
  line: int
  column: int
  rule: str  # rules.Rule.id
  category: str
  severity: str  # rules.BREAKS, SILENT, COMPAT or STYLE
  construct: str
  code: str
  becomes: str
  section: str  # docs/MIGRATION.md#anchor
  cell: int = 0  # In a notebook: its cell (from 1), line being in the cell.
  step: int = 2  # rules.Rule.step
  mechanical: str = ''  # rules.Rule.mechanical

  @property
  def place(self) -> str:
    """'path:line:column', or 'path [cell N]:line:column' in a notebook."""
    cell = f' [cell {self.cell}]' if self.cell else ''
    return f'{self.path}{cell}:{self.line}:{self.column}'


@dataclasses.dataclass(frozen=True)
class Unchecked:
  """A file that could not be read, parsed or analysed: not clean."""
  path: str
  reason: str


@dataclasses.dataclass
class Result:
  findings: list[Finding]
  unchecked: list[Unchecked]
  skipped: list[str]  # Files with the skip-file pragma.
  files: int
  # Files in the folders walked that may hold TensorFlow code the scanner
  # does not read (a .md, a .sh), with the reason: listed, not failed.
  not_scanned: list[Unchecked] = dataclasses.field(default_factory=list)
  # Paths given in which there was nothing to scan at all.
  empty: list[str] = dataclasses.field(default_factory=list)


class Table:
  """The rule rows, indexed by kind of match, and the API table (tf_api.py's
  form: {path inside tf: entry}) that says what TF 2 did to each symbol.

  The engine reads nothing else: tests/tools/test_scan_engine.py drives it with
  toy tables.
  """

  def __init__(self, rules=rules_lib.RULES, api: dict | None = None,
               homes: dict | None = None):
    self.api_table = tf_api.API if api is None else api
    # {private module: its public home} (rules.PRIVATE_HOMES).
    self.homes = sorted((rules_lib.PRIVATE_HOMES if homes is None else
                         homes).items(), key=lambda kv: -len(kv[0]))
    self.api, self.keywords, self.methods = [], {}, {}
    self._api_cache = {}
    self.subscripts, self.imports, self.args, self.input_fn_calls = (
        {}, [], {}, {})
    self.method_args, self.shape_attributes, self.wrappers = {}, {}, {}
    for rule in rules:
      kind, _, what = rule.match.partition(':')
      if kind == 'api':
        self.api.append((tuple(what.split('.')), rule))
      elif kind == 'keyword':
        self.keywords[what] = rule
      elif kind in ('method', 'attribute'):
        for name in what.split('|'):
          self.methods[name] = rule
      elif kind == 'shape-attribute':
        self.shape_attributes[what] = rule
      elif kind == 'wrapper':
        self.wrappers[what] = rule
      elif kind == 'method-arg':
        method, _, argument = what.partition(':')
        self.method_args.setdefault(method, []).append(
            (_argument_key(argument), rule))
      elif kind == 'subscript':
        self.subscripts[what] = rule
      elif kind == 'import':
        self.imports.append((tuple(what.split('.')), rule))
      elif kind == 'arg':
        path, _, argument = what.rpartition(':')
        key = int(argument) if argument.isdigit() else argument
        self.args.setdefault(path, []).append((key, rule))
      elif kind == 'input_fn-call':
        methods, _, keywords = what.partition(':')
        for method in methods.split('|'):
          self.input_fn_calls[method] = (rule, set(keywords.split(',')) - {''})
      else:
        raise ValueError(f'rule {rule.id}: unknown match {rule.match!r}')

  def api_rule(self, parts: tuple,
               after: rules_lib.Rule | None = None) -> rules_lib.Rule | None:
    """The first row matching the path or one of its prefixes
    (tf.estimator.ModeKeys.TRAIN is a use of *.ModeKeys); after a row, the
    first below it."""
    key = (parts, after and after.id)
    if key not in self._api_cache:  # Code repeats its paths: match once.
      # TF's private modules (tensorflow.python...) are no API: only rows
      # that name them match there, not *.NAME guesses.
      private = parts[0] == 'python'
      rows = self.api
      if after is not None:
        rows = rows[[r for _, r in rows].index(after) + 1:]
      self._api_cache[key] = next(
          (rule for pattern, rule in rows
           if (not private or pattern[0] == 'python') and
           any(_matches(pattern, parts[:n])
               for n in range(len(parts), 0, -1))), None)
    return self._api_cache[key]


  def api_entry(self, parts: tuple) -> tuple[tuple | None, int]:
    """The API table's entry for the longest prefix of parts it knows, and
    that prefix's length."""
    for n in range(len(parts), 0, -1):
      entry = self.api_table.get('.'.join(parts[:n]))
      if entry:
        return entry, n
    return None, 0

  def public(self, path: str) -> str:
    """path with a private module it lies in replaced by its public home
    ('tensorflow.python.tpu.tpu_estimator.TPUEstimator' ->
    'tensorflow.estimator.tpu.TPUEstimator'); other paths as they are."""
    for private, home in self.homes:
      if path == private or path.startswith(private + '.'):
        return home + path[len(private):]
    return path

  def import_rule(self, module: str) -> rules_lib.Rule | None:
    parts = tuple(module.split('.'))
    return next((rule for pattern, rule in self.imports
                 if _matches(pattern, parts)), None)


def _argument_key(argument: str) -> tuple:
  """'1:global_step:var_list' -> (1, 'global_step', 'var_list'): position
  1, TF 1's parameter there and TF 2's; 'global_step' -> the keyword."""
  position, _, names = argument.partition(':')
  if not position.isdigit():
    return (argument,)
  tf1, _, tf2 = names.partition(':')
  return (int(position), tf1, tf2)


def _matches(pattern: tuple, parts: tuple) -> bool:
  """'*.X' ends in X after one or more segments; 'a.*' is a or under it;
  other segments are shell patterns, one per segment, or alternatives of
  them separated by '|'."""
  lead = len(pattern) > 1 and pattern[0] == '*'
  trail = len(pattern) > 1 and pattern[-1] == '*'
  core = pattern[int(lead):len(pattern) - int(trail)]
  if lead:
    window = parts[-len(core):]
    ok_length = len(parts) > len(core)
  elif trail:
    window = parts[:len(core)]
    ok_length = len(parts) >= len(core)
  else:
    window, ok_length = parts, len(parts) == len(core)
  return ok_length and all(
      any(fnmatch.fnmatchcase(p, choice) for choice in c.split('|'))
      for p, c in zip(window, core))


_DEFAULT_TABLE = Table()


# How a use is spelt: through tf.compat.v1, through tf.compat.v2 (TF 2 by
# choice), or plain tf (TF 1 or TF 2, depending on the file).
V1, V2, PLAIN = 'v1', 'v2', 'plain'


def _canonical(path: str) -> tuple[tuple, str] | None:
  """'tensorflow.compat.v1.estimator.X' -> (('estimator', 'X'), V1): the
  path inside TF's API and its spelling; None for a path outside
  TensorFlow. tf.compat.v1 spelt out again under a tf that is already
  compat.v1 (tf.compat.v1.X after import tensorflow.compat.v1 as tf) is
  the same tf.compat.v1."""
  for prefix, spelling in (('tensorflow.compat.v1', V1),
                           ('tensorflow.compat.v2', V2),
                           ('tensorflow_estimator.compat.v1', V1),
                           ('tensorflow_estimator.python', PLAIN),
                           ('tensorflow', PLAIN)):
    if path == prefix or path.startswith(prefix + '.'):
      rest = path[len(prefix) + 1:]
      if prefix.startswith('tensorflow_estimator'):
        rest = 'estimator.' + rest if rest else 'estimator'
      parts = tuple(rest.split('.')) if rest else ()
      while parts[:2] in (('compat', 'v1'), ('compat', 'v2')):
        spelling = V1 if parts[1] == 'v1' else V2
        parts = parts[2:]
      return parts, spelling
  if path == 'tensorflow_estimator' or path.startswith('tensorflow_estimator.'):
    return ('estimator',) + tuple(path.split('.')[1:]), PLAIN
  return None


class _Scanner:
  """Collects the findings of one parsed file."""

  def __init__(self, path: str, tree: ast.AST, table: Table):
    self.path, self.table = path, table
    self.nodes = list(ast.walk(tree))  # Breadth first, without recursion.
    self.aliases = {}  # local name -> full dotted path
    self.findings = []
    # id of a call's func node -> shapes.TF1, TF2, UNDECIDED or SAME, for
    # the calls of symbols TF 2 redefined, spelt plain tf.X.
    self.eras = {}
    self.wrapped = {}  # 'contrib.tpu()' -> (first use, rule, attributes)
    self._parents = None  # id(node) -> its parent, made when first asked.
    self.inside_chain = set()  # ids of nodes inside a resolved chain
    self.params_subscripts = _params_subscripts(self.nodes)

  def _add(self, node, rule, code, compat_v1=False, era=shapes.TF1,
           step=None, **names):
    """A finding, unless era says the construct is TF 2 code; names fill a
    generated rule's templates; step overrides the rule's."""
    severity = self._severity(rule, era, compat_v1, node)
    if severity is None:
      return
    fill = (lambda text: text.format(**names)) if names else str
    self.findings.append(Finding(
        self.path, node.lineno, node.col_offset + 1, rule.id, rule.category,
        severity, fill(rule.construct), code, fill(rule.becomes),
        f'{GUIDE}#{rule.section}', step=step or rule.step,
        mechanical=rule.mechanical))

  def _severity(self, rule, era: str, compat_v1: bool,
                node: ast.AST) -> str | None:
    """rule's severity for a construct of that era; None for TF 2 code. A
    call its shape leaves open is decided by what encloses it
    (Rule.enclosing), else takes the rule's default (Rule.undecided):
    never by the rest of the file."""
    if era in (shapes.UNDECIDED, shapes.SAME):
      era = next((verdict for mark, verdict in rule.enclosing
                  if self._enclosed_by(node, mark)), rule.undecided)
    if era == shapes.TF2:
      return None
    if era == rules_lib.REVIEW:
      return rules_lib.REVIEW
    return rule.severity_via(compat_v1)

  def _enclosed_by(self, node: ast.AST, mark: str) -> bool:
    """Whether a statement around node holds mark (rules.Rule.enclosing)."""
    kind, _, what = mark.partition(':')
    current = self._parent(node)
    while current is not None:
      if kind == 'with' and isinstance(current, (ast.With, ast.AsyncWith)):
        name, _, keyword = what.partition(':')
        if any(isinstance(item.context_expr, ast.Call) and
               _callee(item.context_expr) == name and
               (not keyword or any(k.arg == keyword
                                   for k in item.context_expr.keywords))
               for item in current.items):
          return True
      if kind == 'decorator' and isinstance(
          current, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if any(self._api_path(d.func if isinstance(d, ast.Call) else d) ==
               what for d in current.decorator_list):
          return True
      current = self._parent(current)
    return False

  def _api_path(self, node: ast.AST) -> str | None:
    parts = _dotted(node)
    full = parts and self._resolve(parts)
    resolved = full and _canonical(full)
    return '.'.join(resolved[0]) if resolved else None

  def bind_names(self) -> None:
    """Imports and aliases first: a name is used after its import, but
    the walk of run goes breadth first."""
    for node in self.nodes:
      if isinstance(node, ast.Import):
        self._import(node)
      elif isinstance(node, ast.ImportFrom):
        self._import_from(node)
      elif isinstance(node, ast.Assign):
        self._alias(node)

  def run(self) -> list[Finding]:
    self.bind_names()
    for node in self.nodes:
      if id(node) in self.inside_chain:
        continue
      if isinstance(node, ast.Attribute):
        self._attribute(node)
      elif isinstance(node, ast.Name):
        self._name(node)
      elif isinstance(node, ast.Call):
        self._call(node)
      elif isinstance(node, ast.keyword):
        self._keyword(node)
      elif isinstance(node, ast.Subscript):
        self._subscript(node)
    for wrapper, (node, rule, attributes) in self.wrapped.items():
      self._add(node, rule, wrapper, wrapper=wrapper, count=len(attributes),
                uses=', '.join(sorted(set(attributes))))
    return self.findings

  # Names.

  def _resolve(self, parts: list[str]) -> str | None:
    base = self.aliases.get(parts[0])
    return None if base is None else '.'.join([base] + parts[1:])

  def _import(self, node: ast.Import) -> None:
    for alias in node.names:
      if alias.asname:
        self.aliases[alias.asname] = self.table.public(alias.name)
      else:
        top = alias.name.split('.')[0]
        self.aliases[top] = top
      self._imported(node, alias.name)

  def _import_from(self, node: ast.ImportFrom) -> None:
    if node.level or not node.module:
      return
    for alias in node.names:
      full = f'{node.module}.{alias.name}'
      self.aliases[alias.asname or alias.name] = self.table.public(full)
      self._imported(node, full)

  def _imported(self, node: ast.AST, full: str) -> None:
    code = ast.unparse(node)
    if self.table.public(full) != full:
      # A private module with a public home: what the home is (an import of
      # tf.estimator.tpu breaks on TF 2.16), not a note on the form.
      self._use(node, self.table.public(full), code)
      return
    rule = self.table.import_rule(full)
    resolved = _canonical(full)
    # A construct of its own (tensorflow.python.estimator) before a note on
    # the import's form (a private module).
    if rule and not (rule.severity == rules_lib.STYLE and resolved and
                     self.table.api_rule(resolved[0])):
      self._add(node, rule, code)
    else:
      self._use(node, full, code)

  def _alias(self, node: ast.Assign) -> None:
    """``flags = tf.flags``, ``slim = tf.contrib.slim``: later uses of the
    name are uses of the module. ``FLAGS = tf.flags.FLAGS`` binds an object,
    whose attributes are the user's own."""
    parts = _dotted(node.value)
    full = parts and self._resolve(parts)
    resolved = full and _canonical(full)
    if not resolved:
      return
    entry, n = self.table.api_entry(resolved[0])
    is_object = (entry[0] == 'object' if entry and n == len(resolved[0])
                 else parts[-1].isupper())
    if is_object:
      return
    for target in node.targets:
      if isinstance(target, ast.Name):
        self.aliases[target.id] = full

  # Uses.

  def _use(self, node: ast.AST, full: str, code: str) -> bool:
    """Reports the use of full (a dotted path) if it is legacy TF; True when
    it is TensorFlow at all."""
    resolved = _canonical(full)
    if resolved is None:
      return False
    parts, spelling = resolved
    if not parts or parts[-1].startswith('__'):
      return True  # tf itself; tf.__version__.
    entry, n = self.table.api_entry(parts)
    status = entry[1] if entry else 'unknown'
    rule = self.table.api_rule(parts)
    while rule and rule.unless_given and all(
        self._given(node, *given) for given in rule.unless_given):
      rule = self.table.api_rule(parts, after=rule)
    if status == 'same':
      # TF 2 has it unchanged: at most a style note (tf.feature_column).
      if rule and rule.severity == rules_lib.STYLE:
        self._add(node, rule, code)
      return True
    if status == 'changed' and (spelling == V2 or
                                (n < len(parts) and not rule)):
      return True  # TF 2's own (tf2.summary.scalar, tf.data.Dataset.range).
    if spelling == V2 and '.'.join(parts) in rules_lib.IN_COMPAT_V2_ONLY:
      return True  # tf.compat.v2.enable_v2_behavior: still there.
    # A symbol TF 2 redefined, spelt plain tf.X: its call's shape says
    # which TensorFlow it was written for (the walk meets a call before its
    # func); any other use is open.
    era = shapes.TF1
    if status == 'changed' and spelling == PLAIN:
      # Not called here (a reference, dict(fn=tf.summary.scalar)): how it
      # will be called decides, so it is for review, never silent.
      era = self.eras.get(id(node), rules_lib.REVIEW)
    if rule and rule.unless_given and self._call_of(node) is None:
      # What the call passes decides (optimizer=tf.train.AdamOptimizer, a
      # default argument): for review.
      era = rules_lib.REVIEW
    # Through a tf.compat.v1 that no longer has it (tf.compat.v1.estimator,
    # what Keras 3 took out of tf.compat.v1.layers), it breaks all the same.
    compat_v1 = spelling == V1 and bool(entry) and entry[3]
    # Whatever the row (tf.contrib.tpu.TPUEstimator is a TPUEstimator),
    # tf.contrib stops the code on TF 2.15 first.
    step = 1 if parts[0] == 'contrib' else None
    if rule:
      self._add(node, rule, code, compat_v1, era, step)
    elif status == 'removed':
      name = 'tf.' + '.'.join(parts[:n])
      target = (f'tf.{entry[2]} (the same {entry[0]}, renamed)' if entry[2]
                else f'tf.compat.v1.{".".join(parts[:n])} keeps it running; '
                'rewrite it the TF 2 way')
      self._add(node, rules_lib.REMOVED_SYMBOL, code, compat_v1, name=name,
                target=target)
    return True

  def _attribute(self, node: ast.Attribute) -> None:
    parts = _dotted(node)
    full = parts and self._resolve(parts)
    if full and _canonical(full):
      self._skip_inside(node)
      self._use(node, full, '.'.join(parts))
    elif node.attr in self.table.methods:
      self._add(node, self.table.methods[node.attr], f'.{node.attr}')
    elif (node.attr in self.table.shape_attributes and
          _indexes_a_shape(node.value)):
      self._add(node, self.table.shape_attributes[node.attr],
                f'{ast.unparse(node.value)}.{node.attr}')
    if isinstance(node.value, ast.Call):
      self._wrapped(node)

  def _given(self, node: ast.AST, keyword: str, position: int) -> bool:
    """Whether node is called here with keyword= or more than position
    positional arguments (rules.Rule.unless_given)."""
    call = self._call_of(node)
    if call is None:
      return False
    return (any(k.arg == keyword for k in call.keywords) or
            len(call.args) > position)

  def _call_of(self, node: ast.AST) -> ast.Call | None:
    """The call of node where node is what it calls (tf.X(...)); None for
    a reference (optimizer=tf.X)."""
    call = self._parent(node)
    return call if isinstance(call, ast.Call) and call.func is node else None

  def _wrapped(self, node: ast.Attribute) -> None:
    """X().attr where X is a wrapper the scanner cannot follow
    (tensor2tensor's contrib.tpu() returns tf.contrib.tpu): collected, and
    named once per file and wrapper (run)."""
    parts = _dotted(node.value.func)
    full = parts and self._resolve(parts)
    if not parts or (full and _canonical(full)):
      return
    for segment, rule in self.table.wrappers.items():
      if segment in parts:
        key = '.'.join(parts) + '()'
        self.wrapped.setdefault(key, (node, rule, []))[2].append(node.attr)

  def _name(self, node: ast.Name) -> None:
    full = self.aliases.get(node.id)
    if full and full != node.id and isinstance(node.ctx, ast.Load):
      self._use(node, full, node.id)

  def _skip_inside(self, node: ast.AST) -> None:
    """The prefixes of a resolved chain (tf.estimator in
    tf.estimator.tpu.X) are not reported again."""
    while isinstance(node, ast.Attribute):
      node = node.value
      self.inside_chain.add(id(node))

  def _call(self, node: ast.Call) -> None:
    parts = _dotted(node.func)
    full = parts and self._resolve(parts)
    resolved = full and _canonical(full)
    if resolved:
      self._call_arguments(node, '.'.join(parts), *resolved)
    if isinstance(node.func, ast.Attribute):
      self._method_call(node, node.func.attr)

  def _method_call(self, node: ast.Call, method: str) -> None:
    """A method's call: Estimator.train(input_fn) and the like, and
    arguments whose meaning TF 2 changed (minimize's global_step)."""
    if method in self.table.input_fn_calls:
      rule, keywords = self.table.input_fn_calls[method]
      if _gets_input_fn(node, keywords):
        self._add(node, rule, f'.{method}(input_fn)')
    for key, rule in self.table.method_args.get(method, ()):
      if len(key) == 1:
        if any(k.arg == key[0] for k in node.keywords):
          self._add(node, rule, f'.{method}({key[0]}=)')
      elif len(node.args) > key[0] and not any(
          isinstance(a, ast.Starred) for a in node.args):
        # TF 2's parameter may go by several names (var_list|variables).
        leans = {shapes.lean(node.args[key[0]], key[1], tf2)
                 for tf2 in key[2].split('|')}
        era = (shapes.TF2 if shapes.TF2 in leans else
               leans.pop() if len(leans) == 1 else shapes.UNDECIDED)
        self._add(node, rule, f'.{method}(..., {key[1]})', era=era)

  def _call_arguments(self, node: ast.Call, code: str, parts: tuple,
                      spelling: str) -> None:
    """Arguments whose meaning TF 2 changed: the table's rows, else what
    tf_api.py records of both signatures."""
    if spelling == V2:
      return  # TF 2's signature by choice.
    path = '.'.join(parts)
    entry = self.table.api_table.get(path)
    if not entry or entry[1] != 'changed' or spelling == V1:
      era = shapes.TF1
    elif len(entry) > 4:
      era = shapes.era(node, *entry[4:7])
    else:
      era = shapes.SAME  # One signature for both: only the symbol changed.
    self.eras[id(node.func)] = era
    positional = len(node.args)
    if any(isinstance(a, ast.Starred) for a in node.args):
      positional = 0  # Unknown: do not guess.
    keywords = [k.arg for k in node.keywords if k.arg]
    compat_v1 = spelling == V1 and bool(entry) and entry[3]
    rows = self.table.args.get(path)
    if rows:
      for key, rule in rows:
        if (positional > key if isinstance(key, int) else key in keywords):
          self._add(node, rule, code, compat_v1, era)
      return
    if (not entry or entry[1] != 'changed' or len(entry) < 5 or
        self.table.api_rule(parts)):
      return  # A row for the symbol itself says it all (tf.summary.scalar).
    self._generated_arguments(node, code, path, entry, era, compat_v1,
                              positional, keywords)

  def _generated_arguments(self, node, code, path, entry, era, compat_v1,
                           positional, keywords) -> None:
    """Keywords TF 2 refuses, positional arguments beyond what it takes, and
    the first positional argument whose meaning moved."""
    (v1_names, *_), v2s, moved = entry[4:7]
    name = 'tf.' + path
    if era == shapes.SAME:
      return
    # An open call still breaks on a keyword TF 2 refuses: report those.
    certain = shapes.TF1 if era == shapes.UNDECIDED else era
    for keyword in keywords:
      if keyword in v1_names and not any(keyword in s[0] or s[4]
                                         for s in v2s):
        self._add(node, rules_lib.REMOVED_KEYWORD, code, compat_v1,
                  certain, name=name, keyword=keyword)
    most = max(s[1] for s in v2s)  # What the more lenient TF 2 takes.
    if most < positional and not any(s[3] for s in v2s):
      self._add(node, rules_lib.TOO_MANY_POSITIONAL, code, compat_v1,
                certain, name=name, most=most, given=positional)
      return
    first = next((m for m in moved if m[0] < positional), None)
    if first is not None:
      position, v1, v2 = first
      self._add(node, rules_lib.MOVED_POSITIONAL, code, compat_v1, era,
                name=name, position=position + 1, v1=v1, v2=v2)

  def _keyword(self, node: ast.keyword) -> None:
    if node.arg in self.table.keywords and self._takes_estimator_keywords(
        self._parent(node)):
      self._add(node.value, self.table.keywords[node.arg], f'{node.arg}=')

  def _takes_estimator_keywords(self, call: ast.AST) -> bool:
    """Whether call is of a TensorFlow API or of an Estimator's or a TPU
    API's name (rules.ESTIMATOR_CALLEES): dict(host_call=...) is not."""
    if not isinstance(call, ast.Call):
      return False
    parts = _dotted(call.func)
    full = parts and self._resolve(parts)
    return bool(full and _canonical(full)) or (
        _callee(call) in rules_lib.ESTIMATOR_CALLEES)

  def _parent(self, node: ast.AST) -> ast.AST | None:
    if self._parents is None:
      self._parents = {id(child): parent for parent in self.nodes
                       for child in ast.iter_child_nodes(parent)}
    return self._parents.get(id(node))

  def _subscript(self, node: ast.Subscript) -> None:
    # TPUEstimator passes params to model_fn and input_fn: only a name
    # params in a file with such a function is that dictionary.
    key = node.slice
    if (isinstance(key, ast.Constant) and
        key.value in self.table.subscripts and
        isinstance(node.value, ast.Name) and node.value.id == 'params' and
        id(node) in self.params_subscripts):
      self._add(node, self.table.subscripts[key.value],
                f"params[{key.value!r}]")


# A function that takes params beside one of these is TF 2 code (a
# strategy's input pipeline, the kit's Port.input_pipeline), not an
# Estimator's model_fn or input_fn.
_TF2_PARAMETERS = {'strategy', 'input_context', 'ctx'}


def _handed_to_an_estimator(nodes: list[ast.AST]) -> tuple[set, set]:
  """(names, ids of lambdas) given as model_fn=/input_fn=, to one of
  rules.ESTIMATOR_CALLEES, or to a functools.partial handed on so."""
  names, lambdas = set(), set()
  for node in nodes:
    if not isinstance(node, ast.Call):
      continue
    given = [k.value for k in node.keywords
             if k.arg in ('model_fn', 'input_fn')]
    if _callee(node) in rules_lib.ESTIMATOR_CALLEES:
      given += node.args
    for value in given:
      if isinstance(value, ast.Call) and _callee(value) == 'partial':
        value = value.args[0] if value.args else value
      if isinstance(value, ast.Lambda):
        lambdas.add(id(value))
      elif (parts := _dotted(value)):
        names.add(parts[-1])
  return names, lambdas


def _params_subscripts(nodes: list[ast.AST]) -> set[int]:
  """ids of the subscripts inside the functions that take params as
  TPUEstimator passes it: a model_fn (features, mode and params) or an
  input_fn, by its name or by being handed to an Estimator."""
  handed, lambdas = _handed_to_an_estimator(nodes)
  inside = set()
  for node in nodes:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      names = {a.arg for a in node.args.args + node.args.kwonlyargs}
      if 'params' not in names or names & _TF2_PARAMETERS:
        continue
      name = getattr(node, 'name', '')
      if ({'features', 'mode'} <= names or
          name.endswith(('model_fn', 'input_fn')) or name in handed or
          id(node) in lambdas):
        inside |= {id(n) for n in ast.walk(node)
                   if isinstance(n, ast.Subscript)}
  return inside


def _indexes_a_shape(node: ast.AST) -> bool:
  """x.shape[i], x.get_shape()[i], input_shape[i]: where TF 1 gave a
  Dimension and TF 2 gives an int or None. (x.shape.dims[i] is a Dimension
  in TF 2 too: its .value is right.)"""
  if not isinstance(node, ast.Subscript):
    return False
  shape = node.value
  if isinstance(shape, ast.Call):
    shape = shape.func
  if isinstance(shape, ast.Attribute):
    return shape.attr in ('shape', 'get_shape')
  return isinstance(shape, ast.Name) and shape.id.endswith('shape')


def _dotted(node: ast.AST) -> list[str] | None:
  """a.b.c -> ['a', 'b', 'c']; None when the chain is not names all along."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if not isinstance(node, ast.Name):
    return None
  return [node.id] + parts[::-1]


def _gets_input_fn(node: ast.Call, keywords: set[str]) -> bool:
  """train(input_fn=...), train(train_input_fn, ...), train(lambda: ...),
  with no keyword outside keywords (the Estimator method's own, when given:
  a repository's executor.evaluate(eval_input_fn, metric_fn=...) is not
  one) and no other function passed positionally."""
  if keywords and any(k.arg and k.arg not in keywords for k in node.keywords):
    return False
  if any((_dotted(a) or [''])[-1].endswith('_fn') for a in node.args[1:]):
    return False
  if any(k.arg == 'input_fn' for k in node.keywords):
    return True
  if not node.args:
    return False
  first = node.args[0]
  if isinstance(first, ast.Lambda):
    return True
  if isinstance(first, ast.Call) and first.args:  # functools.partial(f, ..)
    first = first.args[0]
  parts = _dotted(first)
  return bool(parts) and parts[-1].endswith('input_fn')


def _callee(node: ast.Call) -> str | None:
  """The name a call calls: f in f(x), m in obj.m(x)."""
  if isinstance(node.func, ast.Attribute):
    return node.func.attr
  return node.func.id if isinstance(node.func, ast.Name) else None


def _dedupe(findings: list[Finding]) -> list[Finding]:
  """One finding per construct per line."""
  seen, kept = set(), []
  for f in sorted(findings, key=lambda f: (f.line, f.column)):
    key = (f.line, f.rule, f.construct)
    if key not in seen:
      seen.add(key)
      kept.append(f)
  return kept


def names(tree: ast.AST) -> dict[str, str]:
  """The local names a module binds to dotted paths, as the scanner follows
  them (import tensorflow as tf: {'tf': 'tensorflow'})."""
  scanner = _Scanner('', tree, _DEFAULT_TABLE)
  scanner.bind_names()
  return scanner.aliases


def base_name(node: ast.AST) -> ast.AST:
  """The node a chain a.b.c starts from (a)."""
  while isinstance(node, ast.Attribute):
    node = node.value
  return node


# For the rewrites (rewrite.py), which follow names as the scanner does.
canonical, dotted, indexes_a_shape = _canonical, _dotted, _indexes_a_shape


def scan_source(source: str, path: str,
                table: Table | None = None) -> list[Finding]:
  """Findings in one file's text, by table (the kit's rules by default).

  Raises:
    SyntaxError, ValueError: it does not parse.
    RecursionError, MemoryError: Python cannot build its tree.
  """
  tree = ast.parse(source, filename=path)
  ignored = {number for number, line in enumerate(source.splitlines(), 1)
             if line.rstrip().endswith(IGNORE_LINE)}
  scanner = _Scanner(path, tree, table or _DEFAULT_TABLE)
  return [f for f in _dedupe(scanner.run())
          if f.line not in ignored]


NOTEBOOK = '.ipynb'
# Files that may hold TensorFlow code the scanner does not read; listed when
# they mention it (in their first _PEEK bytes).
_TEXT_SUFFIXES = ('.md', '.rst', '.txt', '.sh', '.pyx', '.pxd', '.pyi',
                  '.cfg', '.yaml', '.yml', '.json', '.bzl', '.cc', '.h')
_PEEK = 65536


def _mentions_tensorflow(path: str) -> bool:
  try:
    with open(path, 'rb') as f:
      head = f.read(_PEEK)
  except OSError:
    return False
  return b'tensorflow' in head or b'import tf' in head


def python_files(paths: list[str]) -> tuple[list[str], list[Unchecked]]:
  """The .py files and notebooks under paths, sorted, and what could not
  be looked at: a folder that cannot be listed, a special file (a FIFO
  would block a read for ever), each unchecked rather than taken for
  clean. A file named on its own is read unless its suffix says it is not
  Python (a README.md, a run.sh: not scanned, and said); a script with no
  suffix is read.

  Raises:
    ValueError: a path does not exist.
  """
  files, unchecked, _ = walk(paths)
  return files, unchecked


def walk(paths: list[str]
         ) -> tuple[list[str], list[Unchecked], list[Unchecked]]:
  """python_files' two lists, and the files in the folders walked that
  mention TensorFlow but are not read (not_scanned)."""
  files, unchecked, not_scanned = [], [], []

  def cannot_list(error: OSError) -> None:
    unchecked.append(Unchecked(error.filename, 'cannot list this folder: '
                               f'{error.strerror}'))

  def take(path: str) -> None:
    try:
      mode = os.stat(path).st_mode
    except OSError as e:
      unchecked.append(Unchecked(path, f'cannot read: {e.strerror}'))
      return
    if stat.S_ISREG(mode):
      files.append(path)
    else:
      unchecked.append(Unchecked(path, 'not read: a special file (FIFO, '
                                 'socket or device), not a regular file'))

  for path in paths:
    if os.path.isdir(path):
      for root, dirs, names in os.walk(path, onerror=cannot_list):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        for name in sorted(names):
          full = os.path.join(root, name)
          if name.endswith(('.py', NOTEBOOK)):
            take(full)
          elif (name.endswith(_TEXT_SUFFIXES) and os.path.isfile(full) and
                _mentions_tensorflow(full)):
            suffix = os.path.splitext(name)[1]
            not_scanned.append(Unchecked(full, (
                f'not scanned: a {suffix} file that mentions TensorFlow; '
                'the scanner reads .py files and notebooks only, so read '
                'its code yourself')))
    elif os.path.lexists(path):
      suffix = os.path.splitext(path)[1]
      if suffix and suffix not in ('.py', NOTEBOOK) and (
          suffix in _TEXT_SUFFIXES or not _python_script(path)):
        not_scanned.append(Unchecked(path, (
            f'not scanned: a {suffix} file; the scanner reads .py files and '
            'notebooks (and scripts with no suffix) only')))
      else:
        take(path)
    else:
      raise ValueError(f'no such file or directory: {path}')
  return files, unchecked, not_scanned


def _python_script(path: str) -> bool:
  """Whether path starts with a Python shebang (#!/usr/bin/env python)."""
  try:
    with open(path, 'rb') as f:
      first = f.readline(200)
  except OSError:
    return True  # Read it: the reading says what is wrong.
  return first.startswith(b'#!') and b'python' in first


def read_source(path: str) -> str:
  """The file's text as Python reads a module: a PEP 263 coding line or a
  BOM, else UTF-8."""
  with tokenize.open(path) as f:
    return f.read()


# What one file may hold for the scanner's memory to stay bounded: a
# module's syntax tree takes about 200 times its source (a 50 MB file took
# 11 GB), so a .py file, or a notebook's code cells together, past
# MAX_SOURCE_BYTES are listed as unchecked, unread; a notebook's JSON (its
# outputs, images included) is read up to MAX_NOTEBOOK_BYTES.
MAX_SOURCE_BYTES = 4 * 2**20
MAX_NOTEBOOK_BYTES = 64 * 2**20


def _too_large(path: str, limit: int, what: str) -> str | None:
  """Why path is not read (over limit bytes), or None."""
  try:
    size = os.stat(path).st_size
  except OSError:
    return None  # The read says what is wrong.
  if size <= limit:
    return None
  return (f'not read: {size / 2**20:.1f} MiB, over the scanner\'s limit of '
          f'{limit // 2**20} MiB for {what} (its syntax tree would take '
          'about 200 times that in memory); read it yourself, or scan the '
          'code it was generated from')


def _scan_notebook(path: str, result: Result) -> None:
  reason = _too_large(path, MAX_NOTEBOOK_BYTES, 'a notebook')
  if reason:
    result.unchecked.append(Unchecked(path, reason))
    return
  try:
    notebook = notebooks.read(path, MAX_SOURCE_BYTES)
  except (OSError, ValueError, UnicodeDecodeError) as e:
    result.unchecked.append(Unchecked(path, f'cannot read the notebook: {e}'))
    return
  except RecursionError:
    result.unchecked.append(Unchecked(path, 'cannot read the notebook: its '
                                      'JSON is nested too deeply'))
    return
  for cell, reason in notebook.bad_cells:
    result.unchecked.append(Unchecked(
        path, f'cell {cell} {NOT_PYTHON3} ({reason}); the other cells were '
        'scanned'))
  try:
    found = scan_source(notebook.source, path)
  except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
    result.unchecked.append(Unchecked(path, f'cannot be analysed: {e}'))
    return
  for f in found:
    cell, line = notebook.locate(f.line)
    result.findings.append(dataclasses.replace(f, line=line, cell=cell))


def _scan_file(path: str, result: Result) -> None:
  reason = _too_large(path, MAX_SOURCE_BYTES, 'one file')
  if reason:
    result.unchecked.append(Unchecked(path, reason))
    return
  try:
    source = read_source(path)
  except (OSError, SyntaxError, UnicodeDecodeError) as e:
    result.unchecked.append(Unchecked(path, f'cannot read: {e}'))
    return
  if any(line.strip().startswith(SKIP_FILE) for line in source.splitlines()):
    result.skipped.append(path)
    return
  try:
    result.findings += scan_source(source, path)
  except (SyntaxError, ValueError) as e:
    result.unchecked.append(Unchecked(
        path, f'{NOT_PYTHON3} (line '
        f'{getattr(e, "lineno", "?")}): {getattr(e, "msg", e)}'))
  except (RecursionError, MemoryError):
    result.unchecked.append(Unchecked(
        path, 'cannot be analysed: an expression is nested too deeply for '
        "Python's parser"))


def under(path: str, root: str) -> bool:
  """Whether path is root or inside it."""
  return path == root or path.startswith(os.path.join(root, ''))


def scan(paths: list[str],
         on_file: Callable[[str], None] | None = None) -> Result:
  """Scans files and directories.

  Args:
    paths: files and directories (walked for .py files and notebooks).
    on_file: told each file's path as its scan begins (progress).

  Returns:
    The findings, the files left unchecked, skipped or not scanned, and the
    paths that held nothing to scan.

  Raises:
    ValueError: a path does not exist.
  """
  files, unchecked, not_scanned = walk(paths)
  result = Result([], unchecked, [], 0, not_scanned)
  for path in files:
    result.files += 1
    if on_file is not None:
      on_file(path)
    if path.endswith(NOTEBOOK):
      _scan_notebook(path, result)
    else:
      _scan_file(path, result)
  looked_at = files + [u.path for u in unchecked]
  named = [u.path for u in not_scanned if u.path in paths]
  result.empty = [p for p in paths
                  if not any(under(f, p) for f in looked_at + named)]
  if not looked_at:
    result.empty += named  # Nothing else was read: the run has no subject.
  return result
