"""Which TensorFlow a call was written for, judged by the call's own shape.

TF 2 redefined some symbols under their TF 1 names (tf.nn.dropout,
tf.summary.scalar, tf.shape). A call of one, spelt ``tf.X`` in a file that
imports plain ``tensorflow``, may be TF 1 code (it computes something else
on TF 2) or TF 2 code (fine). The rest of the file cannot tell: a file
migrated construct by construct holds both. The call can, often:

- it binds to one signature only (``step=`` exists in TF 2 alone,
  ``keep_prob=`` in TF 1 alone, tf.saved_model.load(path) lacks TF 1's
  required arguments);
- an argument at a position whose meaning moved is spelt like one of the
  two parameters (``keep_prob``, ``rate``; a string where one of them is
  ``name``, a bool where one takes a string; ``1 - p``, TF 1's idiom for a keep probability; a dtype where
  one of them is ``out_type``).

What the call leaves open is UNDECIDED: the caller reports it for review
rather than guessing. Signatures are tf_api.py's tuples: (names, how many
positional, how many required, takes *args, takes **kwargs).
"""
import ast

# SAME: the call binds to both and nothing it passes changed meaning; a
# symbol redefined as a whole (tf.summary.scalar) is still open then.
TF1, TF2, UNDECIDED, SAME = 'tf1', 'tf2', 'undecided', 'same'

# Parameters that take a string; a bool is never one of them.
_STRING_PARAMETERS = ('name', 'scope', 'data_format', 'padding', 'message',
                      'msg', 'partition_strategy', 'sep', 'separator', 'unit',
                      'combiner', 'mode')
_DTYPE_PARAMETERS = ('out_type', 'output_type', 'dtype', 'out_idx',
                     'output_dtype')
_DTYPES = {'float16', 'bfloat16', 'float32', 'float64', 'int8', 'int16',
           'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'bool',
           'string', 'complex64', 'complex128', 'half', 'double'}


def binds(signature: tuple, call: ast.Call) -> bool:
  """Whether call's arguments bind to signature (as far as the source
  shows: a *args or **kwargs in the call binds to anything)."""
  names, positional, required, varargs, varkw = signature
  if any(isinstance(a, ast.Starred) for a in call.args):
    return True
  given = len(call.args)
  if given > positional and not varargs:
    return False
  keywords = [k.arg for k in call.keywords if k.arg]
  for keyword in keywords:
    if keyword not in names and not varkw:
      return False
    if keyword in names[:min(given, positional)]:
      return False  # Given twice: positionally and by keyword.
  if any(k.arg is None for k in call.keywords):
    return True  # **kwargs may hold the required ones.
  return all(name in keywords for name in names[given:required])


def _tokens(text: str) -> set[str]:
  return {t for t in text.lower().split('_') if t}


def _identifier(node: ast.AST) -> str | None:
  if isinstance(node, ast.Call):  # tf.train.get_or_create_global_step()
    return _identifier(node.func)
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    return node.attr
  return None


def _spelt_like(node: ast.AST, parameter: str) -> bool:
  """The argument reads as that parameter: every word of the parameter's
  name is in the argument's (keep_prob in hidden_keep_prob, rate in
  dropout_rate)."""
  name = _identifier(node)
  return bool(name) and _tokens(parameter) <= _tokens(name)


def _is_string(node: ast.AST) -> bool:
  return isinstance(node, ast.JoinedStr) or (
      isinstance(node, ast.Constant) and isinstance(node.value, str))


def _is_bool(node: ast.AST) -> bool:
  return isinstance(node, ast.Constant) and isinstance(node.value, bool)


def _is_complement(node: ast.AST) -> bool:
  """1 - p, 1.0 - p: TF 1's keep probability from a drop probability."""
  return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and
          isinstance(node.left, ast.Constant) and node.left.value == 1)


def _is_dtype(node: ast.AST) -> bool:
  return isinstance(node, ast.Attribute) and node.attr in _DTYPES


def lean(argument: ast.AST, v1: str, v2: str) -> str:
  """Which parameter, TF 1's v1 or TF 2's v2, an argument at a position
  whose meaning changed reads as."""
  tests = (
      lambda p: _spelt_like(argument, p),
      lambda p: _is_string(argument) and p in _STRING_PARAMETERS,
      lambda p: _is_bool(argument) and p not in _STRING_PARAMETERS,
      lambda p: _is_complement(argument) and 'keep' in _tokens(p),
      lambda p: _is_dtype(argument) and p in _DTYPE_PARAMETERS,
  )
  for test in tests:
    first, second = test(v1), test(v2)
    if first != second:
      return TF1 if first else TF2
  return UNDECIDED


def era(call: ast.Call, v1: tuple, v2s: tuple, moved: tuple) -> str:
  """TF1, TF2, UNDECIDED or SAME for a call of a symbol TF 2 redefined,
  from tf_api.py's signatures and moved positions."""
  fits_v1 = binds(v1, call)
  fits_v2 = any(binds(s, call) for s in v2s)
  if fits_v1 != fits_v2:
    return TF1 if fits_v1 else TF2
  given = len(call.args)
  if any(isinstance(a, ast.Starred) for a in call.args):
    given = 0  # Unknown positions: nothing to judge by.
  # Every position whose name differs, moved or renamed in place, may show
  # which signature the author had in mind (step in summary.scalar's third).
  differing = {i: (v1[0][i], v2[0][i])
               for v2 in v2s for i in range(min(given, v1[1], v2[1]))
               if v1[0][i] != v2[0][i]}
  leans = {lean(call.args[i], a, b) for i, (a, b) in differing.items()}
  leans.discard(UNDECIDED)
  if len(leans) == 1:
    return leans.pop()
  if any(position < given for position, _, _ in moved):
    return UNDECIDED
  return SAME if not leans else UNDECIDED
