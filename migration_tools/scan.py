"""Finds what legacy TPUEstimator-era code still has to migrate.

  migration-scan PATH... [--format=text|json]
  python -m migration_tools.scan PATH...

Parses each Python file (the AST: the scanned code is never imported or run)
and reports every legacy construct with file, line, what it is, what it
becomes, and the section of docs/MIGRATION.md to read. Directories are walked.
Imports are followed through their aliases (``import tensorflow.compat.v1 as
tf``, ``from tensorflow.contrib import tpu as contrib_tpu``,
``tpu_estimator.TPUEstimator``). Files that do not parse (Python 2 code is
common in such repositories) are reported and skipped.

A file with a line ``# migration-scan: skip-file`` is skipped and listed as
such (for code that touches the legacy API on purpose, as the kit's own
comparison tools do); a line ending in ``# migration-scan: ignore`` is not
reported. It imports the standard library and absl only, so it runs where
TensorFlow is not installed.

Exit code: 0 nothing left to migrate, 1 findings or files that could not be
read or parsed (they are unchecked), 2 bad input. Files are read as Python
reads them (a PEP 263 coding line, else UTF-8).
"""
import ast
import dataclasses
import json
import os
import sys
import tokenize

from absl import app
from absl import flags

GUIDE = 'docs/MIGRATION.md'
SKIP_FILE = '# migration-scan: skip-file'
IGNORE_LINE = '# migration-scan: ignore'


@dataclasses.dataclass(frozen=True)
class Rule:
  construct: str
  becomes: str
  section: str  # An anchor of the guide.


# Rules on a resolved API path (canonical: 'estimator.tpu.TPUEstimator' for
# tf.compat.v1.estimator.tpu.TPUEstimator, tf.estimator.tpu.TPUEstimator,
# tensorflow_estimator...; 'contrib.tpu.X' for tf.contrib.tpu.X; ...).
TPU_ESTIMATOR = Rule('TPUEstimator', 'a Keras model trained under '
                     'TPUStrategy (fit, or a loop of strategy.run)',
                     'tpuestimator-model_fn-and-input_fn')
SPEC = Rule('TPUEstimatorSpec / EstimatorSpec', 'the return values of a '
            'train_step / eval_step; predictions from the model itself',
            'tpuestimator-model_fn-and-input_fn')
RUN_CONFIG = Rule('RunConfig / TPUConfig', 'a strategy, a CheckpointManager, '
                  'steps_per_execution', 'runconfig-tpuconfig-and-iterations_per_loop')
ITERATIONS = Rule('iterations_per_loop', 'compile(steps_per_execution=N) or '
                  'N steps in one tf.function (tf.range)',
                  'runconfig-tpuconfig-and-iterations_per_loop')
CROSS_SHARD = Rule('CrossShardOptimizer', 'a plain Keras optimizer: the '
                   'strategy sums the replicas\' gradients; scale the loss by '
                   'the global batch', 'crossshardoptimizer-and-loss-scaling')
CONTRIB = Rule('tf.contrib', 'removed in TF 2: its TPU parts are in '
               'tf.distribute / tf.tpu, the rest in Keras or add-on packages',
               'tpuestimator-model_fn-and-input_fn')
ESTIMATOR = Rule('tf.estimator', 'Keras and tf.distribute (tf.estimator is '
                 'gone from TF 2.16)', 'tpuestimator-model_fn-and-input_fn')
BATCH_SIZE = Rule("params['batch_size']", 'the global batch, split per '
                  'replica with InputContext.get_per_replica_batch_size',
                  'paramsbatch_size-global-and-per-replica-batch')
HOST_CALL = Rule('host_call', 'tf.summary inside the step, or a Keras '
                 'TensorBoard callback', 'host_call-and-summaries')
EVAL_METRICS = Rule('eval_metrics / metric_fn', 'Keras metrics updated in '
                    'eval_step (or compile(metrics=...))',
                    'eval_metrics-and-metric_fn')
SCAFFOLD = Rule('scaffold_fn / Scaffold', 'tf.train.Checkpoint restore '
                'before training; migration-convert-checkpoint for old '
                'checkpoints', 'scaffold_fn-warm-start-and-checkpoints')
EXPORT = Rule('export_saved_model / export_savedmodel', 'tf.saved_model.save '
              'with an explicit serving signature', 'export_saved_model')
HOOK = Rule('session hook', 'a Keras callback, or code in your own loop',
            'hooks-and-callbacks')
LAYERS = Rule('tf.layers', 'tf.keras.layers (same names keep checkpoint '
              'names)', 'tfcompatv1train-optimizers-and-layers')
OPTIMIZER = Rule('tf.train optimizer', 'tf.keras.optimizers (schedules count '
                 'optimizer.iterations)', 'tfcompatv1train-optimizers-and-layers')
TRAIN_V1 = Rule('tf.compat.v1.train (global step, decay, Saver)',
                'optimizer.iterations, keras schedules, tf.train.Checkpoint',
                'tfcompatv1train-optimizers-and-layers')
LOSSES = Rule('tf.losses (v1)', 'tf.keras.losses, reduced over the global '
              'batch', 'crossshardoptimizer-and-loss-scaling')
METRICS = Rule('tf.metrics (v1)', 'tf.keras.metrics',
               'eval_metrics-and-metric_fn')
FLAGS_APP = Rule('tf.flags / tf.app / tf.logging', 'absl.flags, absl.app, '
                 'absl.logging', 'tfflags-tfapp-tflogging')
SESSION = Rule('tf.Session / placeholder', 'eager code and tf.function',
               'sessions-and-placeholders')
TPU_RESOLVER = Rule('TPUClusterResolver', 'TPUClusterResolver + '
                    'tf.tpu.experimental.initialize_tpu_system + TPUStrategy',
                    'tpuclusterresolver-and-tpu-initialisation')
COMPAT_V1 = Rule('import of tensorflow.compat.v1', 'import tensorflow as tf '
                 '(TF 2 behaviour)', 'tpuestimator-model_fn-and-input_fn')
BFLOAT16 = Rule('tpu.bfloat16_scope', "a Keras mixed-precision policy, "
                "'mixed_bfloat16' (python -m migrate --precision=mixed_bfloat16)",
                'tfcompatv1train-optimizers-and-layers')
TRAIN_AND_EVALUATE = Rule('train_and_evaluate', 'fit(validation_data=...) or '
                          'your loop\'s evaluation', 'train_and_evaluate')

_V1_TRAIN = {'get_global_step', 'get_or_create_global_step',
             'create_global_step', 'exponential_decay', 'piecewise_constant',
             'polynomial_decay', 'cosine_decay', 'natural_exp_decay',
             'inverse_time_decay', 'Saver', 'MonitoredTrainingSession',
             'MonitoredSession', 'init_from_checkpoint', 'get_checkpoint_state',
             'SessionRunArgs', 'global_step'}
_V1_LOSSES = {'softmax_cross_entropy', 'sparse_softmax_cross_entropy',
              'sigmoid_cross_entropy', 'log_loss', 'absolute_difference',
              'compute_weighted_loss', 'get_total_loss', 'add_loss',
              'get_losses', 'hinge_loss', 'cosine_distance',
              'mean_pairwise_squared_error', 'get_regularization_loss',
              'get_regularization_losses', 'Reduction'}
_V2_METRIC_FUNCTIONS = {'binary_accuracy', 'categorical_accuracy',
                        'sparse_categorical_accuracy',
                        'top_k_categorical_accuracy',
                        'sparse_top_k_categorical_accuracy', 'mse', 'mae',
                        'mape', 'msle', 'kld', 'mean_squared_error',
                        'mean_absolute_error', 'binary_crossentropy',
                        'categorical_crossentropy',
                        'sparse_categorical_crossentropy', 'kl_divergence',
                        'poisson', 'hinge', 'squared_hinge', 'get',
                        'serialize', 'deserialize'}
_PROTOS = {'Example', 'SequenceExample', 'Features', 'Feature', 'BytesList',
           'Int64List', 'FloatList', 'FeatureList', 'FeatureLists'}
_KEYWORDS = {'iterations_per_loop': ITERATIONS, 'host_call': HOST_CALL,
             'eval_metrics': EVAL_METRICS, 'scaffold_fn': SCAFFOLD}
_METHODS = {'export_saved_model': EXPORT, 'export_savedmodel': EXPORT,
            'export_estimator_savedmodel': EXPORT}


def _canonical(path: str) -> tuple[str, bool] | None:
  """'tensorflow.compat.v1.estimator.X' -> ('estimator.X', True): the path
  inside TensorFlow's API, and whether it is the v1 API; None: not TF."""
  for prefix, v1 in (('tensorflow.compat.v1.', True),
                     ('tensorflow.compat.v2.', False),
                     ('tensorflow_estimator.compat.v1.', True),
                     ('tensorflow.contrib.', True), ('tensorflow.', False)):
    if path.startswith(prefix):
      rest = path[len(prefix):]
      return ('contrib.' + rest if prefix == 'tensorflow.contrib.' else rest,
              v1)
  if path.startswith('tensorflow_estimator.'):
    return 'estimator.' + path.split('.', 1)[1], True
  return None


def rule_for(path: str) -> Rule | None:
  """The rule a fully resolved dotted path falls under, if any."""
  resolved = _canonical(path)
  if resolved is None:
    return None
  name, v1 = resolved
  parts = name.split('.')
  last = parts[-1]
  if last.startswith('__'):
    return None  # A module's __file__ or __version__ is no API use.
  if last in ('TPUEstimator',):
    return TPU_ESTIMATOR
  if last in ('TPUEstimatorSpec', 'EstimatorSpec'):
    return SPEC
  if last in ('TPUConfig', 'RunConfig') and ('tpu' in parts or
                                             'estimator' in parts):
    return RUN_CONFIG
  if last == 'CrossShardOptimizer':
    return CROSS_SHARD
  if last == 'TPUClusterResolver' and v1:
    return TPU_RESOLVER
  if last.endswith('Hook') and parts[0] in ('train', 'estimator', 'contrib'):
    return HOOK
  if last == 'Scaffold':
    return SCAFFOLD
  if last == 'train_and_evaluate':
    return TRAIN_AND_EVALUATE
  if last == 'bfloat16_scope':
    return BFLOAT16
  if parts[0] == 'contrib':
    return CONTRIB
  if parts[0] == 'estimator' or 'estimator' in parts[:3]:
    return ESTIMATOR
  if parts[0] == 'layers' and len(parts) > 1:
    return LAYERS
  if parts[0] == 'train' and len(parts) > 1:
    if last.endswith('Optimizer'):
      return OPTIMIZER
    if last in _V1_TRAIN or (v1 and last not in _PROTOS):
      return TRAIN_V1
  if parts[0] == 'losses' and len(parts) > 1 and (v1 or last in _V1_LOSSES):
    return LOSSES
  if parts[0] == 'metrics' and len(parts) > 1 and (
      v1 or (last[:1].islower() and last not in _V2_METRIC_FUNCTIONS)):
    return METRICS
  if parts[0] in ('flags', 'app', 'logging') and len(parts) > 1:
    return FLAGS_APP
  if last in ('Session', 'InteractiveSession', 'placeholder',
              'placeholder_with_default') and len(parts) == 1:
    return SESSION
  return None


@dataclasses.dataclass
class Finding:
  path: str
  line: int
  construct: str
  code: str
  becomes: str
  section: str


def _dotted(node: ast.AST) -> list[str] | None:
  """a.b.c -> ['a', 'b', 'c']; None when the chain is not names all along."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if not isinstance(node, ast.Name):
    return None
  return [node.id] + parts[::-1]


class _Visitor(ast.NodeVisitor):
  """Collects findings; resolves names through the file's imports."""

  def __init__(self, path: str, ignored: set):
    self.path, self.ignored = path, ignored
    self.aliases = {}  # local name -> full dotted path
    self.findings = []

  def _add(self, node: ast.AST, rule: Rule, code: str) -> None:
    if node.lineno not in self.ignored:
      self.findings.append(Finding(self.path, node.lineno, rule.construct,
                                   code, rule.becomes,
                                   f'{GUIDE}#{rule.section}'))

  def visit_Import(self, node: ast.Import) -> None:
    for alias in node.names:
      if alias.asname:
        self.aliases[alias.asname] = alias.name
      else:
        top = alias.name.split('.')[0]
        self.aliases[top] = top
      self._import(node, alias.name, ast.unparse(node))

  def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
    if node.level or not node.module:
      return
    for alias in node.names:
      full = f'{node.module}.{alias.name}'
      self.aliases[alias.asname or alias.name] = full
      self._import(node, full, ast.unparse(node))

  def _import(self, node: ast.AST, full: str, code: str) -> None:
    if full == 'tensorflow.compat.v1':
      self._add(node, COMPAT_V1, code)
    elif full.startswith(('tensorflow.contrib', 'tensorflow_estimator',
                          'tensorflow.python.estimator',
                          'tensorflow.compat.v1.estimator')):
      rule = rule_for(full)
      if rule:
        self._add(node, rule, code)

  def _resolve(self, parts: list[str]) -> str | None:
    base = self.aliases.get(parts[0])
    return None if base is None else '.'.join([base] + parts[1:])

  def visit_Attribute(self, node: ast.Attribute) -> None:
    parts = _dotted(node)
    if parts is None:
      self.generic_visit(node)
      return
    full = self._resolve(parts)
    rule = rule_for(full) if full else None
    if rule is None and parts[-1] in _METHODS:
      rule = _METHODS[parts[-1]]
    if rule:
      self._add(node, rule, '.'.join(parts))
    # The chain's inner prefixes (tf.estimator in tf.estimator.tpu.X) are
    # not reported again: no generic_visit into a resolved chain.

  def visit_Name(self, node: ast.Name) -> None:
    full = self.aliases.get(node.id)
    if full and full != node.id and isinstance(node.ctx, ast.Load):
      rule = rule_for(full)
      if rule:
        self._add(node, rule, node.id)

  def visit_keyword(self, node: ast.keyword) -> None:
    if node.arg in _KEYWORDS:
      self._add(node.value, _KEYWORDS[node.arg], f'{node.arg}=')
    self.generic_visit(node)

  def visit_Subscript(self, node: ast.Subscript) -> None:
    key = node.slice
    if isinstance(key, ast.Constant) and key.value == 'batch_size':
      self._add(node, BATCH_SIZE, f"{ast.unparse(node.value)}['batch_size']")
    self.generic_visit(node)


@dataclasses.dataclass
class Result:
  findings: list
  unparsable: list  # (path, reason)
  skipped: list  # paths with the skip-file pragma
  files: int


def python_files(paths: list[str]) -> list[str]:
  """The .py files under paths, sorted; raises ValueError on a missing path."""
  files = []
  for path in paths:
    if os.path.isdir(path):
      for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        files += [os.path.join(root, n) for n in sorted(names)
                  if n.endswith('.py')]
    elif os.path.isfile(path):
      files.append(path)
    else:
      raise ValueError(f'no such file or directory: {path}')
  return files


def scan_source(source: str, path: str) -> list[Finding]:
  """Findings in one file's text; raises SyntaxError if it does not parse."""
  tree = ast.parse(source, filename=path)
  ignored = {number for number, line in enumerate(source.splitlines(), 1)
             if line.rstrip().endswith(IGNORE_LINE)}
  visitor = _Visitor(path, ignored)
  visitor.visit(tree)
  return sorted(visitor.findings, key=lambda f: (f.line, f.code))


def scan(paths: list[str]) -> Result:
  result = Result([], [], [], 0)
  for path in python_files(paths):
    result.files += 1
    try:
      # As Python reads a module: a PEP 263 coding line, else UTF-8.
      with tokenize.open(path) as f:
        source = f.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
      result.unparsable.append((path, f'cannot read: {e}'))
      continue
    if any(line.strip().startswith(SKIP_FILE) for line in source.splitlines()):
      result.skipped.append(path)
      continue
    try:
      result.findings += scan_source(source, path)
    except (SyntaxError, ValueError) as e:
      result.unparsable.append((path, f'does not parse as Python 3 '
                                f'(line {getattr(e, "lineno", "?")}): '
                                f'{getattr(e, "msg", e)}'))
    except (RecursionError, MemoryError):
      # A deeply nested expression: this file is unchecked, the rest go on.
      result.unparsable.append((path, 'cannot be analysed: an expression is '
                                'nested too deeply'))
  return result


def format_text(result: Result) -> str:
  lines = [f'{f.path}:{f.line}: {f.construct}: `{f.code}` -> {f.becomes} '
           f'(see {f.section})' for f in result.findings]
  lines += [f'{path}: skipped: {reason}' for path, reason in result.unparsable]
  lines += [f'{path}: skipped: {SKIP_FILE}' for path in result.skipped]
  lines.append(f'{len(result.findings)} legacy construct(s) in '
               f'{len({f.path for f in result.findings})} of {result.files} '
               f'file(s); {len(result.unparsable)} not parsed, '
               f'{len(result.skipped)} skipped by pragma.')
  return '\n'.join(lines)


def format_json(result: Result) -> str:
  return json.dumps({
      'findings': [dataclasses.asdict(f) for f in result.findings],
      'unparsable': [{'path': p, 'reason': r} for p, r in result.unparsable],
      'skipped': result.skipped, 'files': result.files}, indent=1)


def _define_flags() -> None:
  """Defined only when run as a command: importing this module defines none."""
  flags.DEFINE_enum('format', 'text', ['text', 'json'], 'Output format.')


FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  paths = argv[1:]
  if not paths:
    print('error: give one or more files or directories to scan, e.g. '
          'migration-scan my_model/', file=sys.stderr)
    sys.exit(2)
  try:
    result = scan(paths)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print(format_json(result) if FLAGS.format == 'json' else format_text(result))
  # A file that could not be read or parsed is unchecked, not clean.
  sys.exit(1 if result.findings or result.unparsable else 0)


def run() -> None:
  """Console-script entry point (``migration-scan``)."""
  _define_flags()
  app.run(main)


if __name__ == '__main__':
  run()
