"""The one door to legacy code: a user's model_fn and input_fn, loaded by name
and run as TPUEstimator runs them on CPU.

What the model_fn is fed comes from the user's own input_fn: its
``element_spec`` gives the placeholders (features and labels: a tensor or a
dict of tensors of any rank and dtype; labels may be absent), its batches the
data. ``params`` are what TPUEstimator passes off a TPU: the user's own, plus
``batch_size`` (the global batch) and, for the model_fn, ``use_tpu=False``.
The tools that compare against legacy code (``convert_checkpoint --verify``,
``migration-compare``) run it here; nothing else in the kit touches
``tf.compat.v1.estimator``.
"""
# migration-scan: skip-file (it runs legacy code on purpose, to compare with it)
from __future__ import annotations

import copy
import inspect
import os
import re
import tempfile
from typing import Any, Callable

import numpy as np

from kit_core import lazy
from kit_core import process
from kit_core import timing
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools import outputs
from migration_tools.pair import legacy_clipping
from migration_tools.pair import legacy_optimizer
from migration_tools.pair import legacy_state
from migration_tools.pair import optimizers
from migration_tools.pair import random_ops
from migration_tools.pair import serving
from migration_tools.pair import side

# Keys TPUEstimator reserves in params; a user's params must not hold them.
RESERVED = ('batch_size', 'context', 'use_tpu')


def runs_here() -> bool:
  """Whether a model_fn can run here, as TPUEstimator ran it: TensorFlow
  with tf.estimator (2.15 and earlier). Asked without importing either."""
  return lazy.installed('tensorflow') and lazy.installed(
      'tensorflow_estimator')


def require_estimator(what: str, instead: str) -> None:
  """Raises KitError unless this TensorFlow still has tf.estimator (2.15 and
  earlier), which running the legacy model_fn needs.

  Args:
    what: what needs it ('migration-compare runs your model_fn').
    instead: what to do on this TensorFlow ('check against a bundle: ...').
  """
  if not hasattr(tf.compat.v1, 'estimator'):
    raise KitError(f'{what} as TPUEstimator did, and TensorFlow '
                   f'{tf.__version__} has no tf.estimator (removed in 2.16): '
                   'install the estimator profile (TF 2.15; README, Set-up), '
                   f'or {instead}')


def input_params(params: dict, global_batch: int) -> dict:
  """What the input_fn gets: the user's params and the global batch."""
  return {**params, 'batch_size': global_batch}


def model_params(params: dict, global_batch: int) -> dict:
  """What the model_fn gets: the input_fn's, and use_tpu=False."""
  return {**input_params(params, global_batch), 'use_tpu': False}


def _numpy(structure):
  return tf.nest.map_structure(lambda t: t.numpy(), structure)


def read_input_fn(input_fn, params: dict, global_batch: int,
                  count: int) -> side.Data:
  """Up to `count` whole batches from the legacy input_fn, in its order.

  A last batch smaller than global_batch (no drop_remainder) is left out.

  Raises:
    KitError: the input_fn raised (its line), returned no tf.data.Dataset,
      or gave no whole batch.
  """
  try:
    dataset = input_fn(input_params(params, global_batch))
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'the legacy input_fn raised {one_line(e)}') from e
  if not isinstance(dataset, tf.data.Dataset):
    raise KitError(f'the legacy input_fn returned a {type(dataset).__name__}, '
                   'not a tf.data.Dataset; give an input_fn that returns one '
                   '(as TPUEstimator requires)')
  spec = side.split_element(dataset.element_spec)
  batches = []
  try:
    for element in process.without_autotune_thread(dataset.take(count + 1)):
      features, labels = side.split_element(element)
      batch = (_numpy(features), None if labels is None else _numpy(labels))
      if len(tf.nest.flatten(batch[0])[0]) == global_batch:
        batches.append(batch)
      if len(batches) == count:
        break
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'reading the legacy input_fn raised {one_line(e)}') from e
  if not batches:
    raise KitError(f'the legacy input_fn gave no batch of {global_batch} '
                   'examples; check its data (see --params, --legacy_flags)')
  return side.Data(spec, batches)


def cycled(data: side.Data, steps: int) -> list:
  """`steps` batches: the input_fn's, again from the first if it ran out."""
  return [data.batches[i % len(data.batches)] for i in range(steps)]


def _placeholders(spec, batch_size: int):
  return tf.nest.map_structure(
      lambda s: tf.compat.v1.placeholder(s.dtype,
                                         [batch_size, *s.shape[1:]]), spec)


def predict(model_fn, checkpoint_path: str, features, params: dict,
            averages: bool = False,
            done: Callable[[int, int], None] | None = None) -> dict:
  """The model_fn's PREDICT outputs on features, with the checkpoint's
  weights, or its moving averages where it holds one for a variable
  ('<variable>/ExponentialMovingAverage'); {name: array}. The graph is
  built once for params['batch_size'] examples and run a batch at a time
  (outputs.in_batches; done is told as each batch ends)."""
  return predict_and_layers(model_fn, checkpoint_path, features, params,
                            averages, done, layers=False)[0]


def predict_and_layers(model_fn, checkpoint_path: str, features,
                       params: dict, averages: bool = False,
                       done: Callable[[int, int], None] | None = None,
                       layers: bool = True) -> tuple[dict, dict]:
  """predict's outputs, and {scope: the first example's output, flattened}
  of each layer (a variable's name scope, compare/layers) on the first
  batch (outputs.first_batch), in graph order, as the comparison's
  inference check reads them; {} for layers=False."""
  modes = tf.compat.v1.estimator.ModeKeys
  batch = params['batch_size']
  with tf.Graph().as_default():
    inputs = tf.nest.map_structure(
        lambda v: tf.compat.v1.placeholder(
            tf.string if v.dtype.kind in 'OSU' else tf.as_dtype(v.dtype),
            [batch, *v.shape[1:]]), features)
    spec = model_fn(inputs, None, modes.PREDICT, dict(params))
    saver = tf.compat.v1.train.Saver()
    if averages:
      stored = tf.train.load_checkpoint(checkpoint_path
                                        ).get_variable_to_shape_map()
      shadow = legacy_state.AVERAGE_SUFFIX
      saver = tf.compat.v1.train.Saver({
          (v.op.name + shadow if v.op.name + shadow in stored else
           v.op.name): v for v in tf.compat.v1.global_variables()})
    fetches = outputs.as_dict(spec.predictions)
    step = tf.compat.v1.train.get_global_step()
    names = [v.op.name for v in tf.compat.v1.global_variables()
             if step is None or v.op.name != step.op.name]
    layer_tensors = (_layer_tensors(tf.compat.v1.get_default_graph(), names,
                                    batch) if layers else {})
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, checkpoint_path)
      run = lambda wanted, chunk: sess.run(wanted, dict(zip(
          tf.nest.flatten(inputs), tf.nest.flatten(chunk))))
      predicted = outputs.in_batches(lambda chunk: run(fetches, chunk),
                                     features, batch, done)
      if not layer_tensors:
        return predicted, {}
      values = run(layer_tensors, outputs.first_batch(features, batch))
  return predicted, {name: _first_example(value, batch)
                     for name, value in values.items()}


def creation_order(model_fn, input_fn, params: dict) -> list[str]:
  """The model_fn's variables in the order it creates them (PREDICT mode),
  which a name-based checkpoint does not keep: it sorts them, so a query,
  key and value of one shape would pair with a port's in the wrong order.

  Raises:
    KitError: as read_input_fn, if the input_fn fails.
  """
  return list(_predict_variables(model_fn, input_fn, params))


def model_bytes(model_fn, input_fn, params: dict) -> int:
  """The bytes of the model_fn's variables (PREDICT mode: the weights and
  the model's state, no optimizer slot), from their shapes: what the tools
  reckon their disk and memory in, before any work.

  Raises:
    KitError: as read_input_fn, if the input_fn fails.
  """
  return sum(_predict_variables(model_fn, input_fn, params).values())


def _predict_variables(model_fn, input_fn, params: dict) -> dict[str, int]:
  """{variable name: bytes} of the model_fn in PREDICT mode, in creation
  order, the global step left out; its graph is built and dropped."""
  try:
    dataset = input_fn(input_params(params, 1))
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'the legacy input_fn raised {one_line(e)}') from e
  spec = side.split_element(dataset.element_spec)
  with tf.Graph().as_default():
    step = tf.compat.v1.train.create_global_step()
    model_fn(_placeholders(spec[0], 1), None,
             tf.compat.v1.estimator.ModeKeys.PREDICT, model_params(params, 1))
    return {v.op.name: v.shape.num_elements() * v.dtype.base_dtype.size
            for v in tf.compat.v1.global_variables() if v is not step}


# TensorFlow's seed for the graph of an op given its own seed where the
# graph has none (random_seed.DEFAULT_GRAPH_SEED). TPUEstimator leaves the
# graph unseeded unless RunConfig(tf_random_seed=...) says otherwise: then
# an initializer without a seed of its own (tf.compat.v1.get_variable's
# truncated normal in BERT's model_fn) starts elsewhere on every run, and a
# verdict that depends on the start (beyond_init's saturation) moves with
# it. Seeded with this, an op given its own seed draws what it drew in an
# unseeded graph; one without draws the same numbers on every run.
DEFAULT_GRAPH_SEED = 87654321


def graph_seed(seed: int) -> int:
  """The legacy graphs' seed for the comparison's --seed."""
  return DEFAULT_GRAPH_SEED + seed


class _Graph:
  """One mode of a model_fn in a graph and session of its own, initialised
  as TPUEstimator initialises it: the variables' initializers (which
  tf.compat.v1.train.init_from_checkpoint redirects to a checkpoint), after
  the spec's scaffold_fn ran in the graph, then the Scaffold's init_fn; in
  TRAIN, the Estimator's warm_start_from.

  Unless draws is True, the random masks of a TRAIN step are put at their
  expectation (random_ops.switch_off), and random_ops says what it did.
  The graph is seeded (graph_seed(seed)): its initializers draw the same
  start state on every run.
  """

  def __init__(self, model_fn, mode, params: dict, spec: tuple,
               batch_size: int, warm_start_from: str = '',
               draws: bool = True, seed: int = 0):
    self.random_ops = random_ops.Found({}, {})
    self.drawing: list[str] = []
    # (op, rule, mask) of each random mask a step that draws answers.
    self.masks: list = []
    with timing.spent('legacy graph building'):
      self._build(model_fn, mode, params, spec, batch_size, warm_start_from,
                  draws, seed)

  def _build(self, model_fn, mode, params: dict, spec: tuple,
             batch_size: int, warm_start_from: str, draws: bool,
             seed: int) -> None:
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.compat.v1.set_random_seed(graph_seed(seed))
      self.features = _placeholders(spec[0], batch_size)
      self.labels = (None if spec[1] is None or
                     mode == tf.compat.v1.estimator.ModeKeys.PREDICT else
                     _placeholders(spec[1], batch_size))
      self.global_step = tf.compat.v1.train.create_global_step()
      self.spec = model_fn(self.features, self.labels, mode, dict(params))
      self.scaffold = _scaffold(self.spec)
      if mode == tf.compat.v1.estimator.ModeKeys.TRAIN:
        roots = [self.spec.loss, self.spec.train_op]
        if draws:
          self.drawing = random_ops.drawing(roots)
          self.masks = random_ops.masks(roots)
        else:
          self.random_ops = random_ops.switch_off(roots)
      if warm_start_from:
        tf.compat.v1.train.warm_start(warm_start_from)
      self.all_variables = {v.op.name: v
                            for v in tf.compat.v1.global_variables()}
      self._feeds = {name: tf.compat.v1.placeholder(v.dtype.base_dtype,
                                                     v.shape)
                     for name, v in self.all_variables.items()}
      self._assign = {name: v.assign(self._feeds[name])
                      for name, v in self.all_variables.items()}
      self.warm_started = _warm_started(self.graph)
      self._initializer = tf.compat.v1.global_variables_initializer()
    self._start_session()

  def _start_session(self) -> None:
    """A session of its own, its variables initialised as TPUEstimator
    initialised them: their initializers, then the Scaffold's init_fn."""
    self.session = tf.compat.v1.Session(graph=self.graph)
    self.run(self._initializer)
    if self.scaffold is not None and self.scaffold.init_fn is not None:
      self.scaffold.init_fn(self.session)

  def fresh(self) -> _Graph:
    """The same graph in a new session, initialised as at its build: a
    start of its own (variables, and the random ops' state, are a
    session's) without building the model_fn again."""
    graph = copy.copy(self)
    graph._start_session()  # pylint: disable=protected-access
    return graph

  def without_session(self) -> _Graph:
    """The graph alone, to start fresh ones from (fresh), holding no
    session and so none of its variables' values."""
    graph = copy.copy(self)
    graph.session = None
    return graph

  def run(self, fetches, feed_dict=None):
    """session.run, its time counted (timing: 'legacy Session.run')."""
    with timing.spent('legacy Session.run'):
      return self.session.run(fetches, feed_dict)

  def feed(self, features, labels=None) -> dict:
    feed = dict(zip(tf.nest.flatten(self.features), tf.nest.flatten(features)))
    if self.labels is not None:
      feed.update(zip(tf.nest.flatten(self.labels), tf.nest.flatten(labels)))
    return feed

  def read(self, names) -> dict:
    return self.run({n: self.all_variables[n] for n in names})

  def write(self, values: dict) -> None:
    self.run([self._assign[n] for n in values],
                     {self._feeds[n]: v for n, v in values.items()})


def _scaffold(spec):
  """The spec's Scaffold: a TPUEstimatorSpec's scaffold_fn is called here,
  in the graph, as TPUEstimator calls it (its warm start with it)."""
  scaffold_fn = getattr(spec, 'scaffold_fn', None)
  if scaffold_fn is not None:
    return scaffold_fn()
  return getattr(spec, 'scaffold', None)


def _warm_started(graph: tf.Graph) -> dict[str, int]:
  """{checkpoint: variables} that init_from_checkpoint (or warm_start)
  initialises from it: each such variable's initializer is a restore op
  named checkpoint_initializer whose first input is the checkpoint."""
  found = {}
  for op in graph.get_operations():
    if op.type == 'RestoreV2' and 'checkpoint_initializer' in op.name:
      path = tf.get_static_value(op.inputs[0])
      if path is not None:
        path = np.asarray(path).item()
        path = path.decode() if isinstance(path, bytes) else str(path)
        found[path] = found.get(path, 0) + 1
  return found


# Ops a hyper-parameter computed from constants may pass through.
_FOLDABLE = ('Const', 'Identity', 'Add', 'AddV2', 'Sub', 'Mul', 'RealDiv',
             'Maximum', 'Minimum', 'Cast', 'Neg', 'Sqrt', 'Pow')


def constant_value(tensor) -> float | None:
  """The value of a tensor computed from constants alone (e.g. TF 1 Ftrl's
  l2 + beta / (2 * max(rate, 1e-36))), else None.

  Read apart from the session: ops made under the model_fn's
  control_dependencies(UPDATE_OPS) cannot run without a batch fed, so the
  constant ops behind the tensor are copied into a graph of their own,
  without their control inputs.
  """
  value = tf.get_static_value(tensor)
  if value is not None:
    return float(value)
  ops, todo = {}, [tensor.op]
  while todo:
    op = todo.pop()
    if op.name in ops:
      continue
    if op.type not in _FOLDABLE:
      return None
    ops[op.name] = op
    todo.extend(t.op for t in op.inputs)
  graph_def = tf.compat.v1.GraphDef()
  for node in tensor.graph.as_graph_def().node:
    if node.name in ops:
      copied = graph_def.node.add()
      copied.CopyFrom(node)
      del copied.input[:]
      copied.input.extend(i for i in node.input if not i.startswith('^'))
  with tf.Graph().as_default() as graph:
    tf.graph_util.import_graph_def(graph_def, name='')
    with tf.compat.v1.Session(graph=graph) as session:
      return float(session.run(graph.get_tensor_by_name(tensor.name)))


class LegacyRunner(side.LegacySide):
  """A model_fn as TPUEstimator runs it on CPU: a graph per mode, and one
  ``session.run(train_op)`` per training step; warm-started as TPUEstimator
  warm-started it (scaffold_fn, init_from_checkpoint, warm_start_from).

  Its state is the model's variables (those its PREDICT graph creates:
  weights and, e.g., batch-norm moving statistics), the optimizer's slots
  and the global step.
  """

  def __init__(self, model_fn, params: dict, spec: tuple, batch_size: int,
               shards: int = 1, warm_start_from: str = '',
               serving_input_fn=None, serving_inputs_fn=None,
               draws: bool = False, seed: int = 0):
    """Builds the TRAIN, PREDICT and EVAL graphs.

    Args:
      model_fn: the (TPU)Estimator model_fn.
      params: the user's params (model_params adds batch_size and use_tpu).
      spec: the input_fn's (features spec, labels spec or None).
      batch_size: the global batch.
      shards: take each training step as TPUEstimator did on this many TPU
        cores (see step): the model_fn sees batch_size // shards examples.
      warm_start_from: the Estimator's warm_start_from checkpoint, if any.
      serving_input_fn: the serving_input_receiver_fn the Estimator exported
        with (receiver_spec, serve); None if it was not given.
      serving_inputs_fn: (params) -> {receiver tensor: examples}, the
        user's inputs for the receiver (e.g. JPEG bytes); None: made from
        the data (serving.inputs).
      draws: the TRAIN step draws its random numbers (for the dropout
        check, which aligns them with the port's); else its random masks
        are put at their expectation, and what could not be is named
        (random_ops.switch_off, describe_run).
      seed: the comparison's seed; every graph is seeded with
        graph_seed(seed), so the initial state is the same on every run.

    Raises:
      KitError: the model_fn has no trainable variable or no train_op.
    """
    modes = tf.compat.v1.estimator.ModeKeys
    self.model_fn, self.params, self.shards = model_fn, params, shards
    self.serving_input_fn = serving_input_fn
    self.serving_inputs_fn = serving_inputs_fn
    self.spec, self.batch_size = spec, batch_size
    self.warm_start_from, self.draws = warm_start_from, draws
    self.seed = seed
    self._steps_taken = 0  # Its start is restored with its averages.
    # How the steps are taken, for the report.
    self.reference = 'on the whole batch'
    # Every graph is built here: building tf.compat.v1.layers in a graph
    # invalidates Keras models made earlier in the process (the port's).
    self._build_train()
    if shards > 1:
      unfed = self._unfed()
      if unfed and self.update_ops:
        raise KitError(
            'the legacy model updates batch statistics (UPDATE_OPS) and the '
            f'gradient of {unfed[0]} reaches no optimizer the kit can feed, so '
            'it cannot be run as on TPU cores; compare one replica '
            '(--replicas=1)')
      if unfed:
        self.reference = (
            f'on the whole batch, not as on {shards} TPU cores: the gradient '
            f'of {unfed[0]} reaches no tf.compat.v1.train.Optimizer\'s '
            'apply_gradients, so the cores\' gradients cannot be combined as '
            'CrossShardOptimizer combined them')
        self.shards = 1
        self._build_train()
      else:
        self.reference = f'as on {shards} TPU cores'
    params = model_params(self.params, batch_size)
    self.infer = _Graph(model_fn, modes.PREDICT, params, spec, batch_size,
                        seed=seed)
    self.eval = _Graph(model_fn, modes.EVAL, params, spec, batch_size,
                       seed=seed)
    step = self.train.global_step.op.name
    self.model_names = [n for n in self.infer.all_variables if n != step and
                        n in self.train.all_variables]
    with self.eval.graph.as_default():
      self.eval_metrics = _eval_metric_ops(self.eval.spec)
      self.eval_init = tf.compat.v1.local_variables_initializer()
    self.predictions = outputs.as_dict(self.infer.spec.predictions)
    self._layers = _layer_tensors(self.infer.graph, self.model_names,
                                  batch_size)

  def graphs_only(self) -> LegacyRunner:
    """This run's graphs, with no session (none of their variables'
    values held): what fresh() starts further runs from."""
    runner = copy.copy(self)
    runner.train, runner.infer, runner.eval = (
        graph.without_session()
        for graph in (self.train, self.infer, self.eval))
    return runner

  def fresh(self) -> LegacyRunner:
    """A run from the start, as a new LegacyRunner of the same arguments
    would be, on this one's graphs (built once: most of a run's cost at
    BERT's size), each in a new session initialised as at its build."""
    runner = copy.copy(self)
    runner.train, runner.infer, runner.eval = (
        graph.fresh() for graph in (self.train, self.infer, self.eval))
    runner._steps_taken = 0  # pylint: disable=protected-access
    return runner

  def _build_train(self) -> None:
    """The TRAIN graph at the shards' batch, its gradients and optimizer."""
    batch = self.batch_size // self.shards
    with legacy_optimizer.watch(self.shards) as watched, \
        legacy_state.watch_averages() as self.averages_of, \
        legacy_clipping.watch() as self.clips:
      self.train = _Graph(self.model_fn,
                          tf.compat.v1.estimator.ModeKeys.TRAIN,
                          model_params(self.params, batch), self.spec, batch,
                          self.warm_start_from, self.draws, self.seed)
    with self.train.graph.as_default():
      trainable = tf.compat.v1.trainable_variables()
      if not trainable or self.train.spec.train_op is None:
        raise KitError('the legacy model_fn built no trainable variable or no '
                       'train_op in TRAIN mode')
      gradients = tf.gradients(self.train.spec.loss, trainable)
      # A variable the loss never reaches (a bias made and not used) has no
      # gradient: zero, as a port's tape.gradient None is read, and no
      # optimizer is expected to take it.
      self.unreached = sorted(v.op.name for v, g in zip(trainable, gradients)
                              if g is None)
      # Dense, also for embeddings (IndexedSlices), to be compared.
      self.gradients = {
          v.op.name: tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
          for v, g in zip(trainable, gradients)}
      self.update_ops = tf.compat.v1.get_collection(
          tf.compat.v1.GraphKeys.UPDATE_OPS)
    self.host_call = _host_call_tensors(self.train.spec)
    self.optimizer = legacy_optimizer.read(
        self.train.graph, self.train.all_variables, watched)
    # What the optimizer receives on the cores, in units of the mean
    # gradient: the mean where CrossShardOptimizer's compute_gradients (or
    # minimize) took the loss, the cores' sum where the model_fn took its
    # own gradients (BERT's tf.gradients) and the cores' were summed.
    self.received_scale = 1 if (self.shards == 1 or watched.scaled & set(
        self.optimizer.applied)) else self.shards

  def _clip_tensors(self) -> list:
    """[norm, threshold] of each clip the model_fn made (legacy_clipping):
    a step answers them as 'clipping'."""
    return [[clip.norm, clip.threshold] for clip in self.clips]

  def _unfed(self) -> list[str]:
    """The variables whose applied gradient the kit cannot feed."""
    return sorted(set(self.gradients) - set(self.optimizer.applied) -
                  set(self.unreached))

  def train_variables(self) -> dict[str, dict]:
    """Every global variable of the TRAIN graph (side.py)."""
    trainable = {v.op.name for v in self.train.graph.get_collection(
        tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
    names = list(self.train.all_variables)
    roles = legacy_state.roles(
        names, set(self.model_names), trainable,
        self.train.global_step.op.name, set(self.optimizer.slots.values()),
        self.averages_of)
    moved = legacy_state.written(self.train.spec.train_op)
    found = {}
    for name in names:
      entry = {'role': roles[name], 'moved': name in moved,
               'shape': list(self.train.all_variables[name].shape)}
      if name in self.averages_of.shadows:
        of, decay, num_updates = self.averages_of.shadows[name]
        if isinstance(decay, (tf.Tensor, tf.Variable)):
          decay = constant_value(decay)
        entry.update(of=of, decay=None if decay is None else float(decay),
                     num_updates=num_updates)
      found[name] = entry
    return found

  def describe_run(self) -> dict[str, Any]:
    """How the steps are taken and where the run started (side.py)."""
    return {'reference': self.reference,
            'warm_start': dict(self.train.warm_started),
            'optimizer': self.optimizer.name,
            'rate_source': self.optimizer.rate_source,
            'evaluates_with': self.evaluates_with(),
            'exports': self.evaluates_with(self.infer),
            'host_call': list(self.host_call),
            'random_ops': self.train.random_ops.to_json(),
            # Where the step draws (the dropout check's run): its random ops.
            'draws': list(self.train.drawing),
            'mask_ops': [name for name, _, _ in self.train.masks],
            'clipping': [clip.to_json() for clip in self.clips]}

  def state(self) -> dict[str, np.ndarray]:
    """The model's variables, trainable or not, by name."""
    return self.train.read(self.model_names)

  @property
  def replicas(self) -> int:
    """The TPU cores its steps are taken as on (1: the whole batch)."""
    return self.shards

  def set_state(self, values: dict[str, np.ndarray]) -> None:
    """Sets the model's variables. Before the run's first step (its start)
    the moving averages of those variables start at them too, as TF 1
    starts a shadow at its variable's initial value (a fresh graph draws its
    own initial weights)."""
    self.train.write({n: values[n] for n in self.model_names})
    if not self._steps_taken:
      self.set_averages(values)

  def _slot_names(self) -> dict[tuple, str]:
    """{(variable, slot): slot variable} of the slots that carry state
    (optimizers.legacy_unused_slots)."""
    description = self.describe_optimizer()
    unused = (set() if description is None else
              optimizers.legacy_unused_slots(description))
    return {key: name for key, name in self.optimizer.slots.items()
            if key[1] not in unused}

  def slots(self, rate: float = 0.0) -> dict[tuple, np.ndarray]:
    """{(variable name, canonical slot name): value} of the optimizer (TF 1's
    own convention: rate is not needed)."""
    del rate
    names = self._slot_names()
    values = self.train.read(set(names.values()))
    return {key: values[name] for key, name in names.items()}

  def set_slots(self, values: dict[tuple, np.ndarray]) -> None:
    self.train.write({self.optimizer.slots[k]: v for k, v in values.items()})

  def global_step(self) -> int:
    return int(self.train.run(self.train.global_step))

  def schedule(self) -> dict[str, list]:
    """The rate tensor the optimizer applies, read at each global step of
    side.SCHEDULE_STEPS (the global step set, nothing trained, then set
    back); {} where the rate cannot be read.

    A rate made under the train_op's control dependencies (a model_fn's
    `with control_dependencies(UPDATE_OPS)`: batch norm's) needs the batch
    fed: it is fed zeros, and the statistics those updates move are this
    run's own (the check reads it on a run of its own)."""
    if self.optimizer.rate is None:
      return {}
    name = self.train.global_step.op.name
    before = self.global_step()
    feed = None
    rates = []
    try:
      for step in side.SCHEDULE_STEPS:
        self.train.write({name: step})
        try:
          rates.append(float(self.train.run(self.optimizer.rate, feed)))
        except tf.errors.InvalidArgumentError:  # It reads the batch.
          if feed is not None:
            raise
          feed = self._zero_feed()
          rates.append(float(self.train.run(self.optimizer.rate, feed)))
    except tf.errors.InvalidArgumentError:
      return {}
    finally:
      self.train.write({name: before})
    return {'steps': list(side.SCHEDULE_STEPS), 'rates': rates}

  def _zero_feed(self) -> dict:
    """Zeros for every placeholder of the TRAIN graph's batch."""
    holders = tf.nest.flatten(self.train.features) + (
        [] if self.train.labels is None else
        tf.nest.flatten(self.train.labels))
    return {h: np.zeros([d or 1 for d in h.shape.as_list()],
                        h.dtype.as_numpy_dtype)
            for h in holders}

  def averages(self) -> dict[str, np.ndarray]:
    """{variable: its ExponentialMovingAverage shadow} of the TRAIN graph."""
    values = self.train.read(list(self.averages_of.shadows))
    return {of: values[shadow]
            for shadow, (of, _, _) in self.averages_of.shadows.items()}

  def set_averages(self, values: dict[str, np.ndarray]) -> None:
    """Sets the shadows of the variables named in values."""
    self.train.write({shadow: values[of] for shadow, (of, _, _) in
                      self.averages_of.shadows.items() if of in values})

  def predict(self, features) -> dict[str, np.ndarray]:
    """The PREDICT outputs at the current state."""
    self.infer.write(self.state())
    return self.infer.run(self.predictions, self.infer.feed(features))

  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    """{scope: the first example's output, flattened} of each layer (a
    variable's name scope) in PREDICT mode, in graph order (compare/layers)."""
    self.infer.write(self.state())
    values = self.infer.run(self._layers, self.infer.feed(features))
    return {name: _first_example(value, self.batch_size)
            for name, value in values.items()}

  def step(self, features, labels) -> dict[str, Any]:
    """The loss, gradients and learning rate of one step, which it takes.

    One session.run, as TPUEstimator's: the values fetched are those of the
    forward pass the update uses (and its UPDATE_OPS), and a dropout layer
    draws one mask per step. With shards, as on TPU cores (``_sharded``).
    """
    if self.shards > 1:
      return self._sharded(features, labels)
    fetches = {'loss': self.train.spec.loss, 'gradients': self.gradients,
               'train_op': self.train.spec.train_op}
    if self.optimizer.rate is not None:
      fetches['learning_rate'] = self.optimizer.rate
    if self.host_call:
      # In the step's own run, as TPUEstimator's outfeed took them.
      fetches['host_call'] = self.host_call
    if self.clips:
      fetches['clipping'] = self._clip_tensors()
    if self.train.masks:
      # The masks this step drew, for a port that takes them (dropout).
      fetches['masks'] = [mask for _, _, mask in self.train.masks]
    values = self.train.run(fetches, self.train.feed(features, labels))
    if 'masks' in values:
      values['masks'] = [np.asarray(m) != 0 for m in values['masks']]
    self._steps_taken += 1
    del values['train_op']
    if 'clipping' in values:
      values['clipping'] = [[float(norm), float(threshold)]
                            for norm, threshold in values['clipping']]
    values['examples'] = len(tf.nest.flatten(features)[0])
    return values

  def train_only(self, features, labels) -> None:
    """One step and nothing else fetched, as TPUEstimator ran it off a TPU:
    one session.run(train_op) on the whole batch (for timing)."""
    self.train.run(self.train.spec.train_op,
                           self.train.feed(features, labels))
    self._steps_taken += 1

  def _sharded(self, features, labels) -> dict[str, Any]:
    """One step as TPUEstimator took it on `shards` TPU cores.

    Each core ran the model_fn on its consecutive share of the batch
    (batch-norm statistics are the share's) up to the gradients it hands its
    optimizer (clipped, if the model_fn clips); CrossShardOptimizer summed
    those across the cores and applied the sum once (the optimizer's own
    compute_gradients had scaled the loss by 1/cores: legacy_optimizer).
    Each core moved its own statistics; Keras reads mirrored statistics as
    their mean across replicas, and so are they kept here. The gradients
    returned are the mean of the cores' (of the loss / global batch);
    received_scale says what the optimizer received in those units.
    """
    def part(structure, i):
      size = len(tf.nest.flatten(structure)[0]) // self.shards
      return tf.nest.map_structure(lambda a: a[i * size:(i + 1) * size],
                                   structure)
    feeds = [self.train.feed(part(features, i),
                             None if labels is None else part(labels, i))
             for i in range(self.shards)]
    # Not the rate here: made under the model_fn's
    # control_dependencies(UPDATE_OPS), fetching it moves the statistics.
    fetches = {'loss': self.train.spec.loss, 'gradients': self.gradients,
               'applied': self.optimizer.applied, 'host_call': self.host_call,
               'clipping': self._clip_tensors()}
    start = self.state()
    moved = [n for n in self.model_names if n not in self.gradients]
    shards, statistics = [], []
    for feed in feeds:
      # One run: the applied gradients may be made under the model_fn's
      # control_dependencies(UPDATE_OPS), so each run that fetches them
      # moves the statistics.
      shards.append(self.train.run(
          {'values': fetches, 'update': self.update_ops}, feed)['values'])
      statistics.append(self.train.read(moved))
      self.set_state(start)
    gradients = {name: np.mean([s['gradients'][name] for s in shards], axis=0)
                 for name in self.gradients}
    applied = dict(feeds[0])
    for name, tensor in self.optimizer.applied.items():
      # Summed in core order, as cross_replica_sum summed them.
      applied[tensor] = np.sum([s['applied'][name] for s in shards], axis=0)
    rate = {'learning_rate': self.optimizer.rate} if (
        self.optimizer.rate is not None) else {}
    averaged = self._averages_of_moved(moved)
    before = self.train.read(list(averaged))
    rate = self.train.run({'train_op': self.train.spec.train_op,
                                   **rate}, applied)
    self._steps_taken += 1
    mean = {n: np.mean([s[n] for s in statistics], axis=0) for n in moved}
    self.train.write(mean)
    self.train.write(self._averaged_again(averaged, before, mean))
    values = {'loss': float(np.mean(np.array([s['loss'] for s in shards],
                                             np.float32))),
              'gradients': gradients, 'received_scale': self.received_scale,
              'examples': len(tf.nest.flatten(features)[0])}
    if 'learning_rate' in rate:
      values['learning_rate'] = rate['learning_rate']
    if self.clips:
      # Each clip's largest norm on any core: each core clipped its own.
      values['clipping'] = [
          [max(float(s['clipping'][i][0]) for s in shards),
           float(shards[0]['clipping'][i][1])]
          for i in range(len(self.clips))]
    if self.host_call:
      # Each core's, concatenated in core order, as the host dequeued them.
      values['host_call'] = {
          name: np.concatenate([np.atleast_1d(s['host_call'][name])
                                for s in shards]) for name in self.host_call}
    return values

  def _averages_of_moved(self, moved: list[str]) -> dict[str, str]:
    """{shadow: its variable} of the moving averages of state the step
    moves outside the optimizer (batch-norm statistics)."""
    return {shadow: of for shadow, (of, _, _) in
            self.averages_of.shadows.items() if of in moved}

  def _averaged_again(self, averaged: dict, before: dict,
                      mean: dict) -> dict:
    """The shadows of the statistics, moved from before toward the cores'
    mean statistics: the train_op averaged the first core's (its
    UPDATE_OPS ran on that core's batch), and an average is linear in what
    it averages, so the cores' mean average is the average of their mean."""
    values = {}
    for shadow, of in averaged.items():
      _, decay, _ = self.averages_of.shadows[shadow]
      num_updates = self.averages_of.num_updates[shadow]
      if num_updates is not None:
        num_updates = self.train.run(num_updates)
      values[shadow] = legacy_state.moved_average(
          before[shadow], mean[of], legacy_state.decay_at(
              constant_value(decay) if isinstance(
                  decay, (tf.Tensor, tf.Variable)) else decay, num_updates))
    return values

  def describe_optimizer(self) -> optimizers.Description | None:
    """The optimizer's kind and hyper-parameters; None if it is not read by
    its ops (legacy_optimizer). Read once: the graph does not change."""
    # Kept on the run, not in a functools.cache on the method: that cache,
    # keyed by the run, held every run (its graphs and sessions, the model
    # and its slots three times over) until the process ended.
    if not hasattr(self, '_optimizer_description'):
      self._optimizer_description = self._describe_optimizer()
    return self._optimizer_description

  def _describe_optimizer(self) -> optimizers.Description | None:
    if self.optimizer.kind is None:
      return None
    hyper = {}
    for key, value in self.optimizer.hyper.items():
      if isinstance(value, (tf.Tensor, tf.Variable)):
        value = constant_value(value)
      if value is not None:
        hyper[key] = value
    return optimizers.Description(self.optimizer.kind, hyper)

  def _restore_as_the_estimator(self, graph: _Graph) -> None:
    """What Estimator.evaluate and export restore: a checkpoint of the TRAIN
    graph through the spec's Scaffold saver, when it gives one (e.g.
    EfficientNet's, which restores the moving averages over the weights:
    Saver(ema.variables_to_restore())); else the model's variables."""
    graph.write(self.state())
    saver = None if graph.scaffold is None else graph.scaffold.saver
    if saver is None:
      return
    with tempfile.TemporaryDirectory() as folder:
      with self.train.graph.as_default():
        path = tf.compat.v1.train.Saver().save(
            self.train.session, os.path.join(folder, 'model.ckpt'),
            write_meta_graph=False)
      with graph.graph.as_default():
        saver.restore(graph.session, path)

  def evaluates_with(self, graph: _Graph | None = None) -> str:
    """legacy_state.EVALUATES_AVERAGES when the EVAL (or graph's) spec's
    Scaffold saver restores a shadow into a variable, else
    EVALUATES_WEIGHTS."""
    graph = graph or self.eval
    saver = None if graph.scaffold is None else graph.scaffold.saver
    names = getattr(saver, '_var_list', None)
    if isinstance(names, dict) and any(
        key in self.averages_of.shadows for key in names):
      return legacy_state.EVALUATES_AVERAGES
    return legacy_state.EVALUATES_WEIGHTS

  def evaluate(self, batches: list) -> dict[str, float]:
    """The model_fn's EVAL metrics over batches, as Estimator.evaluate reports
    them: each metric accumulated over all batches, 'loss' the batch mean,
    on what the Estimator restores (_restore_as_the_estimator)."""
    self._restore_as_the_estimator(self.eval)
    return self._evaluate(batches)

  def evaluate_weights(self, batches: list) -> dict[str, float]:
    """The EVAL metrics on the weights themselves (side.py)."""
    self.eval.write(self.state())
    return self._evaluate(batches)

  def _evaluate(self, batches: list) -> dict[str, float]:
    graph = self.eval
    graph.run(self.eval_init)
    updates = {name: update for name, (_, update) in self.eval_metrics.items()}
    losses = []
    for features, labels in batches:
      losses.append(graph.run([graph.spec.loss, updates],
                                      graph.feed(features, labels))[0])
    results = graph.run({name: value for name, (value, _) in
                                 self.eval_metrics.items()})
    results['loss'] = float(np.mean(losses))
    return {name: float(value) for name, value in results.items()}

  def _serving_input_fn(self):
    if self.serving_input_fn is None:
      raise KitError('no legacy serving_input_receiver_fn was given: name '
                     'it (--legacy_serving_input_fn) to compare the served '
                     'predictions')
    return self.serving_input_fn

  def receiver_spec(self) -> dict[str, tf.TensorSpec]:
    """{name: spec} of the serving receiver's tensors (the signature's
    inputs the Estimator exports)."""
    with tf.Graph().as_default():
      receiver = self._serving_input_fn()()
      tensors = getattr(receiver, 'receiver_tensors', None)
      if tensors is None:
        raise KitError('the legacy serving_input_receiver_fn returned a '
                       f'{type(receiver).__name__}, not a '
                       'ServingInputReceiver; return '
                       'tf.estimator.export.ServingInputReceiver(features, '
                       'receiver_tensors)')
      if not isinstance(tensors, dict):
        tensors = {'input': tensors}
      return {name: tf.TensorSpec(t.shape, t.dtype)
              for name, t in tensors.items()}

  def serving_inputs(self, data: side.Data, seed: int
                     ) -> dict[str, np.ndarray]:
    """The receiver's inputs: the user's, checked against its tensors, else
    made from the data (side.py)."""
    receiver = self.receiver_spec()
    if self.serving_inputs_fn is None:
      return serving.inputs(receiver, data, seed)
    try:
      values = self.serving_inputs_fn(input_params(self.params,
                                                   self.batch_size))
    except Interrupted:  # A signal stops the command; never a finding.
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise KitError(f'--legacy_serving_inputs raised {one_line(e)}') from e
    return serving.given(values, receiver, '--legacy_serving_inputs')

  def export(self, base_dir: str) -> str:
    """Exports the current state through the Estimator's own export path
    (the model_fn in PREDICT mode, the serving_input_fn's receiver).

    It builds a graph of layers: Keras models made before it are unusable
    after it (see __init__).
    """
    with timing.spent('exports'):
      return self._export(base_dir)

  def _export(self, base_dir: str) -> str:
    model_dir = os.path.join(base_dir, 'legacy_model')
    with self.train.graph.as_default():
      saver = tf.compat.v1.train.Saver()
      saver.save(self.train.session, os.path.join(model_dir, 'model.ckpt'),
                 global_step=self.global_step())
    params = {k: v for k, v in self.params.items() if k not in RESERVED}
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=self.model_fn, params=params, use_tpu=False,
        config=tf.compat.v1.estimator.tpu.RunConfig(model_dir=model_dir),
        export_to_tpu=False)
    return estimator.export_saved_model(os.path.join(base_dir, 'legacy_export'),
                                        self._serving_input_fn()).decode()

  def serve(self, base_dir: str, inputs: dict) -> dict:
    """The served outputs on inputs of the current state's export (export,
    loaded back)."""
    return serving.serve(self.export(base_dir), inputs)


# Ops whose output is no layer's: variables, their reads, constants.
_NOT_OUTPUTS = ('VarHandleOp', 'VariableV2', 'ReadVariableOp', 'Const',
                'Placeholder', 'NoOp', 'AssignVariableOp', 'Assign')


def _variable_scope_path(op_name: str, prefixes: set[str]) -> list[str]:
  """The variable scopes an op's name lies in: its name's parts, each
  read as a variable scope's where it is one, else without the '_1' that
  TF 1 appends to a name scope entered again (a variable scope re-entered,
  reuse=AUTO_REUSE: ALBERT's shared layer; 'encoder_1' of 'encoder'),
  as far as they lead into a scope of prefixes."""
  path = []
  for part in op_name.split('/')[:-1]:
    for name in (part, re.sub(r'_\d+$', '', part)):
      if '/'.join([*path, name]) in prefixes:
        path.append(name)
        break
    else:
      break
  return ['/'.join(path[:end]) for end in range(1, len(path) + 1)]


def _layer_tensors(graph: tf.Graph, names: list[str], batch: int) -> dict:
  """{scope: tensor} of each variable's scope: the last float tensor made
  inside it (nested scopes included; a scope entered again, its last call's)
  whose first dimension counts examples (batch, or batch times a sequence),
  ordered by that tensor, the deeper scope first when two end on the same
  one."""
  scopes = {name.rpartition('/')[0] for name in names} - {''}
  prefixes = {'/'.join(s.split('/')[:end]) for s in scopes
              for end in range(1, s.count('/') + 2)}
  last = {}
  for index, op in enumerate(graph.get_operations()):
    if (op.type in _NOT_OUTPUTS or not op.outputs or '/Initializer/' in op.name
        or op.name.endswith('/read')):
      continue
    tensor = op.outputs[0]
    shape = tensor.shape
    if (not tensor.dtype.is_floating or shape.rank is None or
        shape.rank < 1 or shape[0] is None or shape[0] % batch):
      continue
    for prefix in _variable_scope_path(op.name, prefixes):
      if prefix in scopes:
        last[prefix] = (index, tensor)
  ordered = sorted(last, key=lambda s: (last[s][0], -s.count('/')))
  return {name: last[name][1] for name in ordered}


def _first_example(value, batch: int) -> np.ndarray:
  """A layer output's first example, flattened (its first size // batch
  numbers: the same whether the output is [batch, ...] or [batch * n, ...])."""
  flat = np.asarray(value).ravel()
  return flat[:flat.size // batch]


def _host_call_tensors(spec) -> dict:
  """{name: tensor} a TPUEstimatorSpec's host_call receives at each step:
  its dict's keys, or its function's parameter names for a list; {} if it
  gives none."""
  host_call = getattr(spec, 'host_call', None)
  if not host_call:
    return {}
  function, tensors = host_call
  if isinstance(tensors, dict):
    return dict(tensors)
  names = list(inspect.signature(function).parameters)[:len(tensors)]
  return dict(zip(names, tensors))


def _eval_metric_ops(spec) -> dict:
  """{name: (value, update_op)} of an EstimatorSpec or a TPUEstimatorSpec."""
  if getattr(spec, 'eval_metrics', None):
    metric_fn, tensors = spec.eval_metrics
    return (metric_fn(**tensors) if isinstance(tensors, dict) else
            metric_fn(*tensors))
  return dict(getattr(spec, 'eval_metric_ops', None) or {})
