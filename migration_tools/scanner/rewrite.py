"""The mechanical part of a migration, as a unified diff (migration-scan
--diff): only rewrites that keep the code's meaning, never a file edited in
place. Each has a kind (KINDS); tests/tools/test_scan_rewrite.py runs both
versions of a snippet of each kind under TF 2.15 and compares them.

- renamed: a TF 1 symbol TF 2 still has under another name, the same
  object (tf.log -> tf.math.log, tf.random_normal -> tf.random.normal);
- through-compat-v1: the rest of what TF 2's tf lacks, spelt through
  tf.compat.v1 (tf.Session -> tf.compat.v1.Session, tf.flags ->
  tf.compat.v1.flags, and so ``flags = tf.flags``), under a plain
  ``import tensorflow as tf``: step 1 of the plan, the code runs on TF 2.15;
- gfile: tf.gfile.X -> tf.io.gfile.x (the snake_case names);
- to-dtype: tf.to_float(x) and the other tf.to_* -> tf.cast(x, tf.float32);
- dimension-value: x.shape[-1].value -> tf.compat.dimension_value(
  x.shape[-1]), which reads a TF 1 Dimension and a TF 2 int alike (dropping
  .value would turn ``.value is None`` from True to False under
  disable_v2_behavior);
- contrib-home: a tf.contrib symbol that TF 2.15 has as the same object
  elsewhere (CONTRIB_HOMES: contrib.tpu.TPUEstimator ->
  tf.compat.v1.estimator.tpu.TPUEstimator, contrib.data.map_and_batch ->
  tf.data.experimental.map_and_batch), through ``tf.contrib.X`` or an
  import's alias (``from tensorflow.contrib import tpu as contrib_tpu``);
- unused-contrib-import: a module-level import of tf.contrib whose names
  nothing uses any more once the homes are written;
- layer-norm: contrib's layer_norm (tf.contrib.layers or slim, by any
  alias or import) -> a function of the same name's arguments, variables,
  epsilon and math, written once into the file after its imports
  (layer_norm.py);
- renamed-keyword: keep_dims= -> keepdims= and reduction_indices= -> axis=
  in a call of a TensorFlow function whose TF 1 signature already took both
  names for one parameter and whose TF 2 signature has the new one
  (tf.reduce_sum, tf.nn.moments; tf_api.py records both signatures).

Under ``import tensorflow.compat.v1 as tf`` (most TPU-era code after TF
1.14) the same rewrites are written in that spelling (tf.estimator.tpu.X,
no compat.v1 prefix). What has no home with the same meaning (slim,
tf.contrib.summary) is left: the report says what it
becomes. So is the move of tf.flags and tf.logging to absl, which the plan
calls mechanical but which is not the same code: tf.flags.FLAGS parses
sys.argv when first read where absl's raises, tf.flags' DEFINE_* take the
old keyword names, and tf.logging's levels (INFO = 20) and logger are not
absl's (INFO = 0): a meaning test caught it.
"""
import ast
import dataclasses
import difflib
import os
import tokenize

from migration_tools.scanner import engine
from migration_tools.scanner import layer_norm
from migration_tools.scanner import tf_api

KINDS = ('renamed', 'through-compat-v1', 'gfile', 'to-dtype',
         'dimension-value', 'contrib-home', 'unused-contrib-import',
         'renamed-keyword', 'layer-norm')

GFILE = {
    'Copy': 'copy', 'DeleteRecursively': 'rmtree', 'Exists': 'exists',
    'FastGFile': 'GFile', 'GFile': 'GFile', 'Glob': 'glob',
    'IsDirectory': 'isdir', 'ListDirectory': 'listdir', 'MakeDirs': 'makedirs',
    'MkDir': 'mkdir', 'Open': 'GFile', 'Remove': 'remove', 'Rename': 'rename',
    'Stat': 'stat', 'Walk': 'walk'}
# TF 1 keyword -> TF 2's name for the same parameter (what tf_upgrade_v2
# renames in the reductions).
KEYWORDS = {'keep_dims': 'keepdims', 'reduction_indices': 'axis'}
TO_DTYPE = {'to_float': 'float32', 'to_double': 'float64',
            'to_int32': 'int32', 'to_int64': 'int64',
            'to_bfloat16': 'bfloat16', 'to_complex64': 'complex64',
            'to_complex128': 'complex128'}


def _same_names(home: str, names: str) -> dict[str, str]:
  return {name: f'{home}.{name}' for name in names.split()}


# tf.contrib symbols that TF 1.15 exported as the same object under a core
# name, and that TF 2.15's tf.compat.v1 has under it: {path inside tf:
# path inside tf.compat.v1}. A path under a key moves with it
# (contrib.tpu.InputPipelineConfig.PER_HOST_V2). A test checks each target
# in the installed TensorFlow and against tf_upgrade_v2's own renames.
CONTRIB_HOMES = {
    **{f'contrib.tpu.{k}': v for k, v in _same_names(
        'estimator.tpu', 'TPUEstimator TPUEstimatorSpec RunConfig TPUConfig '
        'InputPipelineConfig').items()},
    **{f'contrib.tpu.{k}': v for k, v in _same_names(
        'tpu', 'CrossShardOptimizer bfloat16_scope rewrite shard replicate '
        'batch_parallel cross_replica_sum initialize_system shutdown_system '
        'outside_compilation core').items()},
    **{f'contrib.cluster_resolver.{k}': v for k, v in _same_names(
        'distribute.cluster_resolver', 'TPUClusterResolver ClusterResolver '
        'SimpleClusterResolver TFConfigClusterResolver '
        'KubernetesClusterResolver SlurmClusterResolver').items()},
    'contrib.cluster_resolver.GceClusterResolver':
        'distribute.cluster_resolver.GCEClusterResolver',
    'contrib.cluster_resolver.UnionClusterResolver':
        'distribute.cluster_resolver.UnionResolver',
    **{f'contrib.data.{k}': v for k, v in _same_names(
        'data.experimental', 'map_and_batch parallel_interleave '
        'shuffle_and_repeat AUTOTUNE unbatch ignore_errors prefetch_to_device '
        'sample_from_datasets choose_from_datasets bucket_by_sequence_length '
        'group_by_window scan Counter CsvDataset make_csv_dataset '
        'TFRecordWriter get_single_element copy_to_device '
        'dense_to_sparse_batch enumerate_dataset rejection_resample unique '
        'group_by_reducer Reducer make_batched_features_dataset '
        'parse_example_dataset SqlDataset RandomDataset Optional '
        'get_next_as_optional').items()},
    **{f'contrib.framework.nest.{k}': v for k, v in _same_names(
        'nest', 'flatten map_structure pack_sequence_as '
        'assert_same_structure').items()},
    **{f'contrib.framework.{k}': v for k, v in _same_names(
        'train', 'get_or_create_global_step get_global_step '
        'load_variable').items()},
    'contrib.framework.is_tensor': 'is_tensor',
    'contrib.framework.sort': 'sort',
    'contrib.framework.argsort': 'argsort',
    'contrib.util.constant_value': 'get_static_value',
    'contrib.training.checkpoints_iterator': 'train.checkpoints_iterator',
    **{f'contrib.rnn.{k}': v for k, v in _same_names(
        'nn.rnn_cell', 'BasicLSTMCell LSTMCell GRUCell MultiRNNCell RNNCell '
        'BasicRNNCell LSTMStateTuple DropoutWrapper ResidualWrapper').items()},
    **{f'contrib.rnn.{k}': v for k, v in _same_names(
        'nn', 'static_rnn static_bidirectional_rnn '
        'static_state_saving_rnn').items()},
    **{f'contrib.estimator.{k}': v for k, v in _same_names(
        'estimator.experimental', 'stop_if_higher_hook stop_if_lower_hook '
        'stop_if_no_decrease_hook stop_if_no_increase_hook '
        'make_early_stopping_hook').items()},
}

V1, PLAIN = 'tensorflow.compat.v1', 'tensorflow'


@dataclasses.dataclass(frozen=True)
class Edit:
  """Replace the source from start to end, (line, UTF-8 byte column) as ast
  gives them, with text; kind is one of KINDS."""
  start: tuple[int, int]
  end: tuple[int, int]
  text: str
  kind: str = ''


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
  return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


class _Rewriter:
  """The edits of one parsed module."""

  def __init__(self, tree: ast.Module, source: str = ''):
    self.tree, self.source = tree, source
    self.names = engine.names(tree)
    self.edits = []
    # Names bound to TensorFlow itself, by spelling: the first of each.
    self.tf = {}
    for name, full in self.names.items():
      if full in (V1, PLAIN):
        self.tf.setdefault(full, name)
    self.consumed = set()  # ids of Name nodes whose chain was rewritten.
    self.layer_norms = []  # Nodes that name contrib's layer_norm.

  def _add(self, node: ast.AST, text: str, kind: str) -> None:
    """Replaces node's source with text."""
    self.edits.append(Edit(*_span(node), text, kind))

  def run(self) -> list[Edit]:
    inside = set()
    for node in ast.walk(self.tree):  # Breadth first: outer chains first.
      if id(node) in inside:
        continue
      if isinstance(node, ast.Attribute):
        if self._chain(node):
          inside |= {id(n) for n in ast.walk(node)}
        elif node.attr == 'value' and engine.indexes_a_shape(node.value):
          self._dimension_value(node)
      elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            and self._layer_norm_path(self.names.get(node.id))):
        self.layer_norms.append(node)  # from ...layers import layer_norm
    self._layer_norm()
    self._calls()
    self._unused_contrib_imports()
    return self.edits

  @staticmethod
  def _layer_norm_path(full: str | None) -> bool:
    resolved = full and engine.canonical(full)
    return bool(resolved) and '.'.join(resolved[0]) in layer_norm.PATHS

  def _layer_norm(self) -> None:
    """Each use of contrib's layer_norm calls the helper, written once
    after the file's imports; none if the file binds the helper's name,
    imports nothing before the first use, or names layer_norm anywhere but
    in a call of it: slim's arg_scope([slim.layer_norm], ...) takes only
    ops made for it (a ValueError for the helper), and its defaults would no
    longer reach the calls the helper took over."""
    if not self.layer_norms or layer_norm.bound(self.tree):
      return
    called = {id(n.func) for n in ast.walk(self.tree)
              if isinstance(n, ast.Call)}
    if any(id(node) not in called for node in self.layer_norms):
      return
    first = min(node.lineno for node in self.layer_norms)
    after = layer_norm.insertion_line(self.tree, first)
    if after is None:
      return
    for node in self.layer_norms:
      self._add(node, layer_norm.NAME, kind='layer-norm')
      self.consumed.add(id(engine.base_name(node)))
    self.edits.append(Edit((after + 1, 0), (after + 1, 0),
                           layer_norm.helper_text(self.source, after),
                           'layer-norm'))

  def _dimension_value(self, node: ast.Attribute) -> None:
    tf = self.tf.get(PLAIN) or self.tf.get(V1)
    if tf is None:
      return  # No name for TensorFlow here to call it through.
    self._add(node, f'{tf}.compat.dimension_value('
              f'{ast.unparse(node.value)})', kind='dimension-value')

  def _chain(self, node: ast.Attribute) -> bool:
    """Rewrites a chain tf.a.b... or contrib_alias.b...; True when it is
    TensorFlow's."""
    parts = engine.dotted(node)
    base = parts and self.names.get(parts[0])
    if not base:
      return False
    resolved = engine.canonical('.'.join([base] + parts[1:]))
    if not resolved:
      return False
    path = list(resolved[0])
    if path and path[0] == 'contrib':
      return self._contrib(node, parts, path) or True
    if base not in (V1, PLAIN) or not path:
      return True  # An alias of a module inside TensorFlow: left.
    found = self._replacement(parts[0], path, base == V1)
    if found is not None:
      self._add(node, found[0], kind=found[1])
      self.consumed.add(id(engine.base_name(node)))
    return True

  def _contrib(self, node: ast.Attribute, parts: list[str],
               path: list[str]) -> bool:
    if '.'.join(path) in layer_norm.PATHS:
      self.layer_norms.append(node)
      return True
    for n in range(len(path), 1, -1):
      home = CONTRIB_HOMES.get('.'.join(path[:n]))
      if home:
        break
    else:
      return False
    target = '.'.join([home] + path[n:])
    if V1 in self.tf:
      text = f'{self.tf[V1]}.{target}'
    elif PLAIN in self.tf:
      entry = tf_api.API.get(home)
      same = entry and entry[1] == 'same'
      text = (f'{self.tf[PLAIN]}.{target}' if same else
              f'{self.tf[PLAIN]}.compat.v1.{target}')
    else:
      return False  # No name for TensorFlow here to write the home with.
    self._add(node, text, kind='contrib-home')
    self.consumed.add(id(engine.base_name(node)))
    return True

  def _replacement(self, tf: str, path: list[str],
                   v1: bool) -> tuple[str, str] | None:
    head = path[0]
    if head == 'gfile' and len(path) == 2 and path[1] in GFILE:
      return f'{tf}.io.gfile.{GFILE[path[1]]}', 'gfile'
    if len(path) == 1 and head in TO_DTYPE:
      return None  # A call's rewrite (_calls), not the name's.
    return self._renamed(tf, path, v1)

  def _renamed(self, tf: str, path: list[str],
               v1: bool) -> tuple[str, str] | None:
    for n in range(len(path), 0, -1):
      entry = tf_api.API.get('.'.join(path[:n]))
      if entry:
        break
    else:
      return None
    if entry[1] != 'removed':
      return None
    if entry[2]:  # The same object under its TF 2 name.
      if v1 and tf_api.API.get(entry[2], ('', ''))[1] != 'same':
        # Through tf.compat.v1 the TF 2 name must be TF 2's own object
        # (compat.v1.io.parse_single_example is not io.parse_single_example).
        return None
      return '.'.join([tf, entry[2]] + path[n:]), 'renamed'
    if v1:
      return None  # Through tf.compat.v1 already.
    return '.'.join([tf, 'compat', 'v1'] + path), 'through-compat-v1'

  def _calls(self) -> None:
    """tf.to_float(x[, name=...]) -> tf.cast(x, tf.float32[, name=...]);
    keyword renames (KEYWORDS)."""
    for node in ast.walk(self.tree):
      if not isinstance(node, ast.Call):
        continue
      self._keywords(node)
      parts = engine.dotted(node.func)
      if (not parts or len(parts) != 2 or parts[1] not in TO_DTYPE or
          self.names.get(parts[0]) not in (PLAIN, V1) or
          len(node.args) != 1 or isinstance(node.args[0], ast.Starred) or
          any(k.arg != 'name' for k in node.keywords)):
        continue
      self._add(node.func, f'{parts[0]}.cast', kind='to-dtype')
      end = _span(node.args[0])[1]
      self.edits.append(Edit(end, end, f', {parts[0]}.{TO_DTYPE[parts[1]]}',
                             'to-dtype'))

  def _keywords(self, node: ast.Call) -> None:
    """keep_dims= -> keepdims= where TF 1 took both and TF 2 takes the
    new name: the same parameter under both."""
    parts = engine.dotted(node.func)
    base = parts and self.names.get(parts[0])
    resolved = base and engine.canonical('.'.join([base] + parts[1:]))
    if not resolved or resolved[1] == 'v2':
      return
    entry = tf_api.API.get('.'.join(resolved[0]))
    if not entry or len(entry) < 6:
      return
    tf1_names = entry[4][0]
    given = {k.arg for k in node.keywords}
    for keyword in node.keywords:
      new = KEYWORDS.get(keyword.arg)
      if (new and new not in given and new in tf1_names and
          all(new in signature[0] for signature in entry[5])):
        start = (keyword.lineno, keyword.col_offset)
        self.edits.append(Edit(start, (start[0], start[1] + len(keyword.arg)),
                               new, 'renamed-keyword'))

  def _unused_contrib_imports(self) -> None:
    """Removes each module-level import of tf.contrib whose names nothing
    uses once its uses have their homes."""
    used = {n.id for n in ast.walk(self.tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and
            id(n) not in self.consumed}
    for node in self.tree.body:
      if not isinstance(node, (ast.Import, ast.ImportFrom)):
        continue
      bound = _contrib_names(node)
      if bound and not set(bound) & used:
        # The whole lines: an import stands alone on its lines here.
        self.edits.append(Edit((node.lineno, 0), (node.end_lineno + 1, 0),
                               '', 'unused-contrib-import'))


def _contrib_names(node: ast.AST) -> list[str]:
  """The names an import binds if all it imports is tf.contrib; else []."""
  if isinstance(node, ast.ImportFrom):
    if node.level or not node.module:
      return []
    modules = [f'{node.module}.{a.name}' for a in node.names]
  else:
    modules = [a.name for a in node.names]
    if any(not a.asname for a in node.names):
      return []  # import tensorflow.contrib.x binds tensorflow: kept.
  if not all(m == 'tensorflow.contrib' or m.startswith('tensorflow.contrib.')
             for m in modules):
    return []
  return [a.asname or a.name for a in node.names]


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
  starts.append(starts[-1])  # A removal may end after the last line.
  spans = sorted(((starts[s[0] - 1] + s[1], starts[e[0] - 1] + e[1], text)
                  for s, e, text in ((x.start, x.end, x.text) for x in edits)),
                 reverse=True)
  for begin, end, text in spans:
    data = data[:begin] + text.encode('utf-8') + data[end:]
  return data.decode('utf-8')


def edits(source: str) -> list[Edit]:
  """The rewrites of source, each with its kind.

  Raises:
    SyntaxError, ValueError: it does not parse.
  """
  return _Rewriter(ast.parse(source), source).run()


def rewrite(source: str) -> str:
  """source with its safe rewrites made.

  Raises:
    SyntaxError, ValueError: it does not parse.
  """
  found = edits(source)
  return apply(source, found) if found else source


def _read(path: str) -> tuple[str, str]:
  """The file's text with its line endings as they are, and its encoding."""
  with open(path, 'rb') as f:
    encoding, _ = tokenize.detect_encoding(f.readline)
  with open(path, encoding=encoding, newline='') as f:
    return f.read(), encoding


# What git's C-style quoting of a path writes for a character (quote.c).
_GIT_ESCAPES = {'\a': 'a', '\b': 'b', '\t': 't', '\n': 'n', '\v': 'v',
                '\f': 'f', '\r': 'r', '"': '"', '\\': '\\'}


def git_quoted(name: str) -> str:
  """A path as a diff header names it: as it is, or, when it holds a
  control character, a quote or a backslash, in double quotes with C-style
  escapes (what git diff writes and git apply reads)."""
  if not any(c in _GIT_ESCAPES or ord(c) < 0x20 or ord(c) == 0x7f
             for c in name):
    return name
  out = []
  for c in name:
    if c in _GIT_ESCAPES:
      out.append('\\' + _GIT_ESCAPES[c])
    elif ord(c) < 0x20 or ord(c) == 0x7f:
      out.append(f'\\{ord(c):03o}')
    else:
      out.append(c)
  return '"' + ''.join(out) + '"'


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
  lines = list(difflib.unified_diff(old_lines, new_lines,
                                    git_quoted(f'a/{name}'),
                                    git_quoted(f'b/{name}')))
  for i, line in enumerate(lines):
    if not line.endswith('\n'):
      lines[i] = line + '\n\\ No newline at end of file\n'
  return ''.join(lines).encode('utf-8' if bom else encoding)
