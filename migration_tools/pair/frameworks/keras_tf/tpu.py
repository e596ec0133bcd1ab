"""TPU readiness of a Keras port on TensorFlow: will its step compile for a
TPU? Checked on the CPU (the keras_tf adapter's tpu_ready).

On a TPU, every step ``strategy.run`` runs and every prediction goes through
XLA, with static shapes and no host ops. A team without a TPU at hand finds
out here instead:

1. The inputs the step takes (the port's own input pipeline when it gives
   one) must have fully defined shapes: a batch without
   ``drop_remainder=True`` has none.
2. The port's own trainer takes one step on one CPU replica with
   ``strategy.run`` compiling its function with XLA (``jit_compile=True``), as
   ``TPUStrategy.run`` does; the predict function is compiled likewise.
3. The graphs traced for them are read for what XLA on a TPU refuses, so
   that the op is named with its name scope (which says the layer), not left
   to XLA's message: Python run on the host (``tf.py_function``), strings,
   shapes that depend on the data (``tf.boolean_mask``, ``tf.unique``).

What a CPU-side compile does not prove (docs/EQUIVALENCE.md): the TPU's op
set differs a little from the CPU's XLA, memory is not checked, and neither
is speed.

The rule table (``CAUSES``, the op sets) is apart from the reading (``check``,
``graph_problems``), as the scanner's rules are apart from its engine.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

from kit_core import framework_logs
from kit_core import process
from kit_core.errors import Interrupted
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools import outputs as outputs_lib
from migration_tools.pair.frameworks.keras_tf import port as port_lib
from migration_tools.pair.frameworks import tpu
from migration_tools.pair.frameworks.tpu import Cause
from migration_tools.pair.frameworks.tpu import Problem


CAUSES = {
    'input_shape': Cause(
        'has a shape that is not fully defined',
        'a TPU compiles the step for one shape: batch with '
        'drop_remainder=True, and pad variable-length features to a fixed '
        'length (padded_batch with padded_shapes)'),
    'host_op': Cause(
        'runs Python on the host',
        'a TPU runs no Python inside its step: write it with TensorFlow ops, '
        'or move it into the input pipeline (dataset.map) before the batch '
        'reaches the step'),
    'string': Cause(
        'works on strings',
        'a TPU has no strings: turn them into numbers in the input pipeline '
        '(a lookup table or tf.strings.to_number in dataset.map)'),
    'dynamic_shape': Cause(
        'makes a shape that depends on the data (a TPU pads it to its bound '
        'at best, and XLA may refuse what follows it)',
        'keep the shape fixed: mask instead of dropping (tf.where(mask, x, '
        '0), or weight the loss by the mask), or pad to a known maximum'),
    'xla': Cause(
        'is refused by XLA',
        'replace it with ops XLA compiles (tf.function(jit_compile=True) '
        'on the CPU shows the same error)'),
    'no_step': Cause(
        'was not run through strategy.run',
        'run the step with strategy.run, as the Trainer protocol asks '
        '(migration_tools/pair/port.py): it is what TPUStrategy compiles'),
}

HOST_OPS = frozenset({'EagerPyFunc', 'PyFunc', 'PyFuncStateless'})
# Ops whose output shape depends on the values of their input.
DYNAMIC_SHAPE_OPS = frozenset({
    'Where', 'Unique', 'UniqueV2', 'UniqueWithCounts', 'UniqueWithCountsV2',
    'ListDiff', 'DynamicPartition', 'Bincount', 'DenseBincount',
    'NonMaxSuppression', 'NonMaxSuppressionV2', 'NonMaxSuppressionV3',
    'NonMaxSuppressionV4', 'NonMaxSuppressionV5', 'SparseToDense',
    'DenseToDenseSetOperation', 'DenseToSparseSetOperation'})
# String constants that feed only assertions, and the assertions: XLA drops
# them, and Keras puts them in many steps.
_STRING_EXEMPT = frozenset({'Const', 'Assert', 'NoOp'})


def _function_names(op: tf.Operation) -> list[str]:
  """The functions an op calls (a while loop's body, a nested tf.function)."""
  names = []
  for value in op.node_def.attr.values():
    if value.HasField('func'):
      names.append(value.func.name)
    names += [f.name for f in value.list.func]
  return names


def operations(graph) -> Iterator[tf.Operation]:
  """Every op of graph and of the functions it calls, each graph once."""
  pending, seen = [graph], set()
  while pending:
    current = pending.pop()
    for op in current.get_operations():
      yield op
      for name in _function_names(op):
        function = current._get_function(name)  # pylint: disable=protected-access
        inner = getattr(function, 'graph', None)
        if inner is not None and name not in seen:
          seen.add(name)
          pending.append(inner)


def op_cause(op: tf.Operation, model_code: bool = False) -> str | None:
  """The key of CAUSES that op falls under, or None.

  Args:
    op: an op of a traced graph.
    model_code: op was traced from the port's model and loss (predict,
      loss_and_gradients), where a shape that depends on the data is the
      port's to fix. Elsewhere in a step XLA keeps such a shape bounded (a
      Keras optimizer's sparse update has Unique in it) and blamed_ops
      names one only when XLA refuses what follows it.
  """
  if op.type in HOST_OPS:
    return 'host_op'
  if op.type not in _STRING_EXEMPT and any(
      t.dtype == tf.string for t in [*op.inputs, *op.outputs]):
    return 'string'
  if model_code and _dynamic(op):
    return 'dynamic_shape'
  return None


def _dynamic(op: tf.Operation) -> bool:
  """A shape made from the data: NonMaxSuppressionV4 padded to its maximum
  is static, Where is not."""
  return op.type in DYNAMIC_SHAPE_OPS and not all(
      t.shape.is_fully_defined() for t in op.outputs)


def graph_problems(graph, part: str, model_code: bool = False
                   ) -> list[Problem]:
  """What a TPU refuses in a traced graph (see op_cause), first op first."""
  return [Problem(part, cause, op.type, op.name)
          for op in operations(graph)
          if (cause := op_cause(op, model_code))]


def _paths(structure, prefix: str = '') -> dict[str, Any]:
  """{path: leaf} of a nested dict / tuple of specs."""
  if isinstance(structure, dict):
    return {p: v for k in sorted(structure)
            for p, v in _paths(structure[k], f'{prefix}{k}/').items()}
  if isinstance(structure, (tuple, list)):
    names = ('features/', 'labels/') if len(structure) == 2 else None
    return {p: v for i, item in enumerate(structure)
            for p, v in _paths(item, prefix + (
                names[i] if names else f'{i}/')).items()}
  return {prefix.rstrip('/') or 'input': structure}


def input_problems(element_spec) -> tuple[list[Problem], list[str]]:
  """Inputs without a fully defined shape; and int64 ones (a note)."""
  problems, int64 = [], []
  for path, spec in _paths(element_spec).items():
    shape = getattr(spec, 'shape', None)
    if shape is not None and not shape.is_fully_defined():
      problems.append(Problem('the input pipeline', 'input_shape', path,
                              f'shape {shape}'))
    if getattr(spec, 'dtype', None) == tf.int64:
      int64.append(path)
  return problems, int64


_UNSUPPORTED = re.compile(
    r"Detected unsupported operations when trying to compile graph \S+ on "
    r"XLA_\w+: (\w+) \(No registered '\w+' OpKernel.*?\{\{node ([^}]+)\}\}")
# XLA names the ops of the TensorFlow graph its failing instructions came from.
_METADATA = re.compile(r'op_type="(\w+)" op_name="([^"]+)"')


def _upstream(op: tf.Operation) -> Iterator[tf.Operation]:
  """op and every op it reads from, in its graph."""
  pending, seen = [op], {op.name}
  while pending:
    current = pending.pop()
    yield current
    for tensor in current.inputs:
      if tensor.op.name not in seen:
        seen.add(tensor.op.name)
        pending.append(tensor.op)


def blamed_ops(error: Exception, graphs: list, part: str) -> list[Problem]:
  """The data-dependent shapes behind the instructions XLA refused: XLA
  keeps Where's bounded shape, and fails at an op further on (a reshape that
  cannot prove two sizes equal); the shape's source is what to change."""
  ops = {op.name: op for graph in graphs for op in operations(graph)}
  found = {}
  for _, name in _METADATA.findall(str(error)):
    for op in _upstream(ops[name]) if name in ops else ():
      if _dynamic(op):
        found.setdefault(op.name, Problem(part, 'dynamic_shape', op.type,
                                          op.name))
  return list(found.values())


def xla_problem(error: Exception, part: str) -> Problem:
  """XLA's refusal as a Problem: the op it names, and its own line."""
  message = str(error)
  found = _UNSUPPORTED.search(message)
  if found:
    return Problem(part, 'xla', found.group(1), found.group(2))
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  detail = next((line for line in lines if 'Graph execution error' not in line
                 and not line.startswith(('Detected at node', 'File ', '[[')))
                , one_line(error))
  # The metadata is for the op; the line, without it, for the reader.
  detail = _METADATA.sub('', re.sub(r', metadata=\{[^}]*\}', '', detail))
  named = _METADATA.search(message)
  op_type, name = named.groups() if named else (type(error).__name__, '?')
  return Problem(part, 'xla', op_type, name, detail[:300])


def _compile_problems(graphs: list, error: Exception | None, part: str,
                      model_code: bool = False) -> list[Problem]:
  """What a TPU refuses in the traced graphs, and why XLA failed if it did.

  Raises:
    Exception: the error, if it is not XLA's (the port's own code raised
      while being traced): the check then ERRORs with it.
  """
  if error is not None and not isinstance(error, tf.errors.OpError):
    raise error
  found = [p for graph in graphs
           for p in graph_problems(graph, part, model_code)]
  if error is not None and not found:
    found = blamed_ops(error, graphs, part) or [xla_problem(error, part)]
  return found


def _graph_of(inputs) -> Any:
  """The graph being traced, read from the tensors it was given."""
  return tf.nest.flatten(inputs)[0].graph


@contextlib.contextmanager
def _compiled_run(strategy: tf.distribute.Strategy, graphs: list):
  """While inside, strategy.run compiles its function with XLA, as
  TPUStrategy.run does, and appends each graph it traces to graphs."""
  real = strategy.run

  def run(fn, args=(), kwargs=None, options=None):
    def traced(*a, **k):
      graphs.append(_graph_of((a, k)))
      return fn(*a, **k)
    return real(tf.function(traced, jit_compile=True), args=args,
                kwargs=kwargs, options=options)

  strategy.run = run
  try:
    yield
  finally:
    del strategy.run


def _loss_problems(trainer, dataset, strategy) -> list[Problem]:
  """The port's model and loss (loss_and_gradients), traced, not run: the
  shapes they make from the data."""
  graphs = []

  def replica(*args):
    graphs.append(_graph_of(args))
    return trainer.loss_and_gradients(*args)[0]

  tf.function(lambda iterator: strategy.run(
      replica, args=next(iterator))).get_concrete_function(
          process.keep_alive(iter(dataset)))
  return [p for graph in graphs for p in graph_problems(
      graph, 'the training step', model_code=True)
          if p.cause == 'dynamic_shape']


def _step_problems(trainer, dataset, strategy) -> list[Problem]:
  """One training step of the port's own trainer, compiled with XLA."""
  graphs = []
  part = 'the training step'
  error = None
  with _compiled_run(strategy, graphs):
    try:
      trainer.train_steps(process.keep_alive(iter(dataset)), tf.constant(1))
    except Interrupted:  # A signal stops the command; never a finding.
      raise
    except Exception as e:  # pylint: disable=broad-except
      error = e
  if not graphs and error is None:
    return [Problem(part, 'no_step', 'train_steps', type(trainer).__name__)]
  return _compile_problems(graphs, error, part)


def _predict_problems(port: port_lib.Port, model, features) -> list[Problem]:
  """The port's predict function, compiled with XLA on one batch."""
  graphs = []

  def predict(inputs):
    graphs.append(_graph_of(inputs))
    if port.predict is not None:
      return outputs_lib.as_dict(port.predict(model, inputs))
    return outputs_lib.as_dict(model(inputs, training=False))

  part = 'predict'
  error = None
  try:
    tf.function(predict, jit_compile=True)(
        tf.nest.map_structure(tf.constant, features))
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    error = e
  return _compile_problems(graphs, error, part, model_code=True)


def check(port: port_lib.Port, params: dict, batches: list
          ) -> tpu.Readiness:
  """The tpu_ready check: the port built afresh on one CPU replica, its
  inputs' shapes read, its step and predict compiled with XLA.

  Args:
    port: the port's pieces (port.check_port has accepted it).
    params: the legacy model_fn's params (legacy.model_params).
    batches: the legacy (features, labels) batches; the first feeds predict,
      and the step when the port gives no input pipeline.
  """
  strategy = tf.distribute.OneDeviceStrategy('/cpu:0')
  global_batch = len(tf.nest.flatten(batches[0][0])[0])
  with strategy.scope():
    model = port.build_model(dict(params))
    optimizer = port.make_optimizer(dict(params))
  trainer = port.trainer_class(model, optimizer, strategy, global_batch)
  problems, int64 = [], []
  if port.input_pipeline is not None:  # What will feed the TPU.
    problems, int64 = input_problems(
        port.input_pipeline(strategy, dict(params)).element_spec)
  # The step takes the legacy batches, in the Trainer protocol's form.
  # Imported here: its tf.function steps need TensorFlow at import.
  from migration_tools.pair.frameworks.keras_tf import runner as port_runner  # pylint: disable=g-import-not-at-top
  dataset = port_runner.distribute_batches(strategy, batches[:1],
                                           global_batch)
  problems += _loss_problems(trainer, dataset, strategy)
  # XLA's first compile logs natively, past TF_CPP_MIN_LOG_LEVEL: its lines
  # go with the frameworks' other held-back ones.
  with process.native_stderr_held(framework_logs.hold_native_lines):
    problems += _step_problems(trainer, dataset, strategy)
    problems += _predict_problems(port, model, batches[0][0])
  note = (f'int64 inputs ({", ".join(int64)}): TPU-era pipelines cast them to '
          'int32 (BERT\'s _decode_record), as TPUs handle int64 slowly'
          if int64 else '')
  inputs = (', on inputs of fully defined shapes' if port.input_pipeline
            else '; the port gives no input_pipeline, so its input shapes '
            'are not checked')
  return tpu.judged(problems, CAUSES,
                    f'the step and predict compile with XLA{inputs}',
                    {'int64_inputs': int64,
                     'input_shapes_checked': port.input_pipeline is not None},
                    note)
