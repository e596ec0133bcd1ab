"""contrib's layer_norm as a function --diff writes into the file that calls
it (the rewrite kind 'layer-norm').

TF 2.15 has nothing that is tf.contrib.layers.layer_norm: Keras's
LayerNormalization names its variables after the layer and defaults to
epsilon 1e-3, where contrib makes <scope>/beta and <scope>/gamma (scope
'LayerNorm' unless given) and divides by sqrt(variance + 1e-12). A BERT
checkpoint is keyed by those names, and its outputs by that epsilon. So the
patch defines HELPER once in the file, after its imports, and the calls call
it with their arguments as they are. It is contrib's math in tf.compat.v1
(moments and batch_normalization, as contrib called them), for the graph
code that called contrib; tests/tools/test_rewrite_meaning.py holds it to
contrib's own code as tf-slim keeps it: outputs, variable names,
collections.
"""
import ast
import io
import tokenize

NAME = 'contrib_layer_norm'
# The paths inside tf that are contrib's layer_norm.
PATHS = frozenset({'contrib.layers.layer_norm', 'contrib.slim.layer_norm'})

# Written with two spaces a level (continuations four); reindented to the
# file's own unit.
HELPER = '''\
def contrib_layer_norm(
    inputs, center=True, scale=True, activation_fn=None, reuse=None,
    variables_collections=None, outputs_collections=None, trainable=True,
    begin_norm_axis=1, begin_params_axis=-1, scope=None):
  """tf.contrib.layers.layer_norm on TF 2.15, written by migration-scan
  --diff: the same variables (<scope>/beta, <scope>/gamma, model variables),
  epsilon (1e-12; 1e-3 in float16) and math, in tf.compat.v1 graph code."""
  import tensorflow.compat.v1 as tf1
  with tf1.variable_scope(scope, 'LayerNorm', [inputs], reuse=reuse) as sc:
    inputs = tf1.convert_to_tensor(inputs)
    rank = inputs.shape.ndims
    if rank is None:
      raise ValueError(f'Inputs {inputs.name} has undefined rank.')
    if begin_norm_axis < 0:
      begin_norm_axis += rank
    if begin_params_axis >= rank or begin_norm_axis >= rank:
      raise ValueError(
          f'begin_params_axis ({begin_params_axis}) and begin_norm_axis '
          f'({begin_norm_axis}) must be < rank(inputs) ({rank})')
    params_shape = inputs.shape[begin_params_axis:]
    if not params_shape.is_fully_defined():
      raise ValueError(
          f'Inputs {inputs.name}: shape(inputs)[{begin_params_axis}:] is '
          f'not fully defined: {inputs.shape}')
    dtype = inputs.dtype.base_dtype

    def variable(name, initializer):
      collections = variables_collections
      if isinstance(collections, dict):
        collections = collections.get(name)
      collections = list(collections or []) + [
          tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES]
      return tf1.get_variable(
          name, params_shape, dtype, initializer, trainable=trainable,
          collections=collections)

    beta = variable('beta', tf1.zeros_initializer()) if center else None
    gamma = variable('gamma', tf1.ones_initializer()) if scale else None
    mean, variance = tf1.nn.moments(
        inputs, list(range(begin_norm_axis, rank)), keepdims=True)
    epsilon = 1e-3 if dtype == tf1.float16 else 1e-12
    outputs = tf1.nn.batch_normalization(
        inputs, mean, variance, offset=beta, scale=gamma,
        variance_epsilon=epsilon)
    outputs.set_shape(inputs.shape)
    if activation_fn is not None:
      outputs = activation_fn(outputs)
    if outputs_collections:
      outputs.aliases = list(getattr(outputs, 'aliases', [])) + [
          sc.name.rstrip('/')]
      tf1.add_to_collections(outputs_collections, outputs)
    return outputs
'''


def _indent_unit(source: str) -> str:
  """The file's first indentation (two spaces, four, a tab); four if none."""
  try:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
      if token.type == tokenize.INDENT:
        return token.string
  except (tokenize.TokenError, SyntaxError):
    pass
  return '    '


def helper_text(source: str, after: int) -> str:
  """HELPER in source's indentation and line endings, to stand after line
  after, two blank lines on each side."""
  unit = _indent_unit(source)
  lines = []
  for line in HELPER.splitlines():
    stripped = line.lstrip(' ')
    lines.append(unit * ((len(line) - len(stripped)) // 2) + stripped)
  newline = '\r\n' if '\r\n' in source.split('\n', 1)[0] + '\n' else '\n'
  following = source.splitlines()[after:after + 1]
  # A blank line already follows the import: it keeps the helper apart.
  trailing = newline * (2 if following and not following[0].strip() else 3)
  return newline * 2 + newline.join(lines) + trailing


def insertion_line(tree: ast.Module, first_use: int) -> int | None:
  """The line after which the helper goes: the last top-level import before
  first_use; None if there is none (nothing imported TensorFlow yet)."""
  before = [node.end_lineno for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) and
            node.end_lineno < first_use]
  return max(before) if before else None


def bound(tree: ast.Module) -> bool:
  """Whether the module already binds NAME (then nothing is written)."""
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)) and node.name == NAME:
      return True
    if isinstance(node, ast.Name) and node.id == NAME:
      return True
    if isinstance(node, ast.alias) and (node.asname or node.name) == NAME:
      return True
  return False
