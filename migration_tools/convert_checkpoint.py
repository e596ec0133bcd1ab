r"""Carries a trained Estimator checkpoint over to the port, or the port's
own checkpoint from TF 2.15 (Keras 2) over to Keras 3.

  migration-convert-checkpoint --estimator_dir=OLD_MODEL_DIR \
      --output=NEW_MODEL_DIR [--port=my_port:make_port] [--params=JSON] \
      [--variable_map=map.json] [--verify]
  migration-convert-checkpoint --keras2_dir=PORT_MODEL_DIR_ON_TF_2_15 \
      --output=NEW_MODEL_DIR [--port=my_port:make_port] [--params=JSON]

Reads the latest name-based checkpoint in --estimator_dir and writes an
object-based checkpoint (model and optimizer) into --output, a directory the
port restores and resumes from (the kit's: ``python -m migrate
--model_dir=NEW_MODEL_DIR``). What is carried: every model variable (weights
and e.g. batch-norm moving statistics), paired by the port's variable map,
--variable_map, or inferred from names and shapes (``variable_map``); the
optimizer's slots (TF 1 Momentum and Adam, in the port's convention:
``optimizers``); the global step, as the optimizer's step. Anything left
unpaired on either side is an error that lists it. --verify then feeds the
same batches of the legacy input_fn to the legacy model_fn in PREDICT mode
(old checkpoint) and to the port's predict (new checkpoint), and requires
every output to agree (floats within tolerances.CONVERSION_ATOL, integers
exactly).

--keras2_dir reads a checkpoint the port wrote with Keras 2 (its layout,
``model/layer_with_weights-N/...``, is not Keras 3's) by the names the object
graph kept, and writes the same weights, optimizer slots and step in the
layout of the same port built on Keras 3.
"""
import dataclasses
import os
import shutil
import tempfile

from mnist_common import process

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2
# pylint: enable=g-import-not-at-top,wrong-import-position

from migration_tools import checks
from migration_tools import cli
from migration_tools import kit_pair
from migration_tools import legacy
from migration_tools import optimizers
from migration_tools import port as port_lib
from migration_tools import tolerances
from migration_tools import variable_map as variable_map_lib
from mnist_common import checkpoint_files
from mnist_common import keras_compat
from mnist_common.errors import KitError
from mnist_common.errors import one_line

STEP_NAME = 'global_step'  # -> optimizer.iterations
OBJECT_GRAPH_KEY = '_CHECKPOINTABLE_OBJECT_GRAPH'


@dataclasses.dataclass(frozen=True)
class LegacyCheckpoint:
  """A name-based checkpoint, split as the converter reads it.

  model: {variable name: value}, in the checkpoint's (sorted) order.
  slots: {(variable name, canonical slot): value}; kind: their optimizer's.
  step: the global step (0 if absent).
  """
  path: str
  model: dict
  slots: dict
  kind: str | None
  step: int


class _CheckedReader:
  """A checkpoint reader over checkpoint_files.read_all: a truncated or
  corrupt checkpoint fails here, in one line, not halfway through."""

  def __init__(self, path: str):
    self._values = checkpoint_files.read_all(path)

  def get_variable_to_shape_map(self) -> dict:
    return {name: np.shape(value) for name, value in self._values.items()}

  def get_tensor(self, name: str):
    return self._values[name]


def read_checkpoint(estimator_dir: str) -> LegacyCheckpoint:
  """The latest checkpoint in estimator_dir, split into model, slots, step.

  Raises:
    KitError: no checkpoint, or one already object-based (TF 2).
  """
  path = tf.train.latest_checkpoint(estimator_dir)
  if path is None:
    raise KitError(f'no checkpoint in --estimator_dir {estimator_dir}')
  reader = _CheckedReader(path)
  names = reader.get_variable_to_shape_map()
  if OBJECT_GRAPH_KEY in names:
    raise KitError(f'{path} is already a TF 2 (object-based) checkpoint: '
                   'restore it with tf.train.Checkpoint; if the port wrote '
                   'it on TF 2.15 (Keras 2) and now runs on Keras 3, carry it '
                   'over with --keras2_dir')
  model, slots, kinds = {}, {}, set()
  for name in sorted(names):
    if (name == STEP_NAME or
        name.rpartition('/')[2] in optimizers.LEGACY_DERIVED):
      continue
    found = optimizers.legacy_slot(name, names)
    if found:
      kinds.add(found[1])
      slots[(found[0], found[2])] = reader.get_tensor(name)
    else:
      model[name] = reader.get_tensor(name)
  if len(kinds) > 1:
    raise KitError(f'{path} holds slots of several optimizers '
                   f'({", ".join(sorted(kinds))}); the converter carries one')
  step = int(reader.get_tensor(STEP_NAME)) if STEP_NAME in names else 0
  return LegacyCheckpoint(path, model, slots, kinds.pop() if kinds else None,
                          step)


def _current_rate(optimizer) -> float:
  """The optimizer's learning rate at its step."""
  current = getattr(optimizer, '_get_current_learning_rate', None)
  rate = current() if current else optimizer.learning_rate
  return float(tf.convert_to_tensor(rate).numpy())


def _carry_slots(checkpoint: LegacyCheckpoint, optimizer,
                 names: dict[str, str]) -> int:
  """Assigns the checkpoint's slots to the port optimizer's; returns how
  many. names: {port variable name: legacy name}."""
  theirs = optimizers.describe_port(optimizer).kind
  ours = optimizers.port_slots(optimizer, names)
  if checkpoint.slots and checkpoint.kind != theirs:
    raise KitError(f'the checkpoint holds {checkpoint.kind} slots and the '
                   f'port\'s optimizer is {theirs}: give the port the legacy '
                   'optimizer, or convert without slots by building the port '
                   'with a plain SGD optimizer')
  missing = sorted('/'.join(k) for k in set(ours) - set(checkpoint.slots))
  extra = sorted('/'.join(k) for k in set(checkpoint.slots) - set(ours))
  if missing or extra:
    raise KitError('the optimizer slots do not pair: ' + '; '.join(
        f'{label}: {", ".join(items[:4])}' for label, items in (
            ('not in the checkpoint', missing), ('not in the port', extra))
        if items))
  rate = _current_rate(optimizer) if ours else 0.0
  for key, variable in ours.items():
    try:
      value = optimizers.to_port(theirs, key[1], checkpoint.slots[key], rate)
    except ValueError as e:
      raise KitError(f'{e}; give the port its learning rate (--params)') from e
    variable.assign(value)
  return len(ours)


def convert(estimator_dir: str, output: str, port: port_lib.Port,
            params: dict | None = None) -> str:
  """Writes the converted checkpoint into the new directory output.

  Args:
    estimator_dir: an Estimator model_dir (its latest checkpoint is read).
    output: a new (or empty) directory.
    port: builds the model and optimizer; its variable_map (or an inferred
      one) pairs the variables.
    params: the legacy params, handed to port.build_model and
      port.make_optimizer (batch_size and use_tpu are not added: there is no
      batch here).

  Returns:
    The checkpoint path. Nothing is left at output on failure.

  Raises:
    KitError: no checkpoint, an output in the way, or a checkpoint that does
      not match the port's model (every mismatch listed).
  """
  output = _check_output(output)
  checkpoint = read_checkpoint(estimator_dir)
  model, optimizer = _build(port, params)
  ours = port_lib.state_variables(model)
  pairs = port.variable_map
  if pairs is None:
    try:
      pairs = variable_map_lib.infer(
          {k: v.shape for k, v in checkpoint.model.items()},
          {k: tuple(v.shape) for k, v in ours.items()}).pairs
    except KitError as e:
      raise KitError(f'the checkpoint does not match the port\'s model: {e}'
                     ) from e
  _check_pairs(checkpoint.model, ours, pairs)
  for name, target in pairs.items():
    ours[target].assign(checkpoint.model[name])
  optimizer.iterations.assign(checkpoint.step)
  slots = _carry_slots(checkpoint, optimizer,
                       {v: k for k, v in pairs.items()})
  path = _save(model, optimizer, output, checkpoint.step)
  logging.info('Converted %s (step %d, %d variables, %d slots) into %s',
               checkpoint.path, checkpoint.step, len(pairs), slots, path)
  return path


# Keras 2 optimizer variables that are no state to carry: the step is read
# apart, and a schedule's rate is derived from it.
_KERAS2_STEP = 'iteration'
_KERAS2_DERIVED = ('current_learning_rate', 'learning_rate', 'save_counter')


@dataclasses.dataclass(frozen=True)
class Keras2Checkpoint:
  """A checkpoint the port wrote with Keras 2 (TF 2.15), by variable name.

  model: {variable path: value}; slots: {(variable path, Keras 2 slot
  token): value}; step: the optimizer's step.
  """
  path: str
  model: dict
  slots: dict
  step: int


def read_keras2_checkpoint(model_dir: str) -> Keras2Checkpoint:
  """The latest object-based checkpoint in model_dir, read by the names its
  variables had when Keras 2 saved them (the object graph keeps them).

  Raises:
    KitError: no checkpoint, a name-based one, or one not written by Keras 2.
  """
  path = tf.train.latest_checkpoint(model_dir)
  if path is None:
    raise KitError(f'no checkpoint in --keras2_dir {model_dir}')
  reader = _CheckedReader(path)
  keys = reader.get_variable_to_shape_map()
  if OBJECT_GRAPH_KEY not in keys:
    raise KitError(f'{path} is a name-based (Estimator or TF 1) checkpoint: '
                   'convert it with --estimator_dir')
  if not keras_compat.written_by_keras2(keys):
    raise KitError(f'{path} was not written by Keras 2 (no model/layer... '
                   'keys); a Keras 3 checkpoint restores as it is')
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
  # Dropout's random state (migrate saves it as 'random') is Keras 2's own
  # generator's; Keras 3 draws from another kind, which starts afresh.
  values = {attribute.full_name: reader.get_tensor(attribute.checkpoint_key)
            for node in graph.nodes for attribute in node.attributes
            if attribute.name == 'VARIABLE_VALUE' and
            not attribute.checkpoint_key.startswith('random/')}
  tokens = {token for _, token in optimizers.PORT_SLOTS[2]}
  model, slots, step = {}, {}, 0
  for name, value in values.items():
    parts = name.split('/')
    # A slot is '<token>/<variable>', behind the optimizer's name when Keras
    # 2 built it inside fit ('Adam/m/dense/kernel').
    for start in (0, 1):
      owner = '/'.join(parts[start + 1:])
      if parts[start:start + 1] and parts[start] in tokens and owner in values:
        slots[(owner, parts[start])] = value
        break
    else:
      if parts[-1] == _KERAS2_STEP:
        step = int(value)
      elif parts[-1] not in _KERAS2_DERIVED:
        model[name] = value
  return Keras2Checkpoint(path, model, slots, step)


def _carry_keras2_slots(checkpoint: Keras2Checkpoint, optimizer) -> int:
  """Assigns the Keras 2 slots to the optimizer's; returns how many."""
  kind = optimizers.describe_port(optimizer).kind
  table = optimizers.PORT_SLOTS[2]
  theirs, unused = {}, []
  for (name, token), value in checkpoint.slots.items():
    if (kind, token) in table:
      theirs[(name, table[(kind, token)])] = value
    elif (kind, token) not in optimizers.PORT_UNUSED_SLOTS[2]:
      unused.append(f'{token}/{name}')
  if unused:
    raise KitError(f'the checkpoint holds optimizer slots the port\'s {kind} '
                   f'has no use for ({", ".join(sorted(unused)[:4])}): give '
                   'the port the optimizer it was trained with')
  ours = optimizers.port_slots(optimizer,
                               {n: n for n in checkpoint.model})
  missing = sorted('/'.join(k) for k in set(ours) - set(theirs))
  if missing:
    raise KitError(f'the checkpoint lacks optimizer slots of the port\'s '
                   f'{kind}: {", ".join(missing[:4])}')
  for key, variable in ours.items():
    variable.assign(theirs[key])
  return len(ours)


def convert_keras2(model_dir: str, output: str, port: port_lib.Port,
                   params: dict | None = None) -> str:
  """Carries a checkpoint the port wrote with Keras 2 (TF 2.15) over to the
  same port on Keras 3: weights, optimizer slots and step, by name.

  Args:
    model_dir: the port's model_dir on TF 2.15 (its latest checkpoint).
    output: a new (or empty) directory.
    port: builds the model and optimizer (the same code as on TF 2.15).
    params: handed to port.build_model and port.make_optimizer.

  Returns:
    The checkpoint path. Nothing is left at output on failure.

  Raises:
    KitError: no Keras 2 checkpoint, an output in the way, or one that does
      not match the port (every mismatch listed).
  """
  output = _check_output(output)
  checkpoint = read_keras2_checkpoint(model_dir)
  model, optimizer = _build(port, params)
  ours = port_lib.state_variables(model)
  pairs = {name: name for name in checkpoint.model if name in ours}
  _check_pairs(checkpoint.model, ours, pairs)
  for name, value in checkpoint.model.items():
    ours[name].assign(value)
  optimizer.iterations.assign(checkpoint.step)
  slots = _carry_keras2_slots(checkpoint, optimizer)
  path = _save(model, optimizer, output, checkpoint.step)
  logging.info('Carried %s (step %d, %d variables, %d slots) over into %s',
               checkpoint.path, checkpoint.step, len(pairs), slots, path)
  return path


def _build(port: port_lib.Port, params: dict | None):
  """The port's model and its optimizer, slots created."""
  params = dict(params or {})
  model = port.build_model(params)
  optimizer = port.make_optimizer(params)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def _check_output(output: str) -> str:
  output = os.path.abspath(output)
  if os.path.exists(output) and not os.path.isdir(output):
    raise KitError(f'--output {output} is a file; name a new folder')
  if os.path.exists(output) and os.listdir(output):
    raise KitError(f'--output {output} exists and is not empty; choose a new '
                   'directory')
  return output


def _check_pairs(values: dict, ours: dict, pairs: dict[str, str]) -> None:
  """Raises KitError listing every missing, extra or wrong-shaped variable."""
  missing = sorted(set(pairs) - set(values))
  extra = sorted(set(values) - set(pairs))
  unmapped = sorted(set(ours) - set(pairs.values()))
  shapes = [f'{name} {list(values[name].shape)} -> '
            f'{pairs[name]} {ours[pairs[name]].shape.as_list()}'
            for name in sorted(set(pairs) & set(values))
            if values[name].shape != tuple(ours[pairs[name]].shape)]
  problems = [f'{label}: {", ".join(items)}' for label, items in (
      ('missing from the checkpoint', missing), ('extra in the checkpoint',
                                                 extra),
      ('model variables with no source', unmapped), ('wrong shape', shapes))
              if items]
  if problems:
    raise KitError('the checkpoint does not match the port\'s model; ' +
                   '; '.join(problems))


def _save(model, optimizer, output: str, step: int) -> str:
  """Writes under a temporary name, then renames it to output."""
  parent = os.path.dirname(output)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix='.tmp-convert-')
  try:
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    tf.train.CheckpointManager(checkpoint, tmp, max_to_keep=1).save(
        checkpoint_number=step)
    if os.path.exists(output):
      os.rmdir(output)
    os.replace(tmp, output)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return tf.train.latest_checkpoint(output)


@dataclasses.dataclass(frozen=True)
class Verification:
  """What --verify compared: examples, and each output's max difference."""
  examples: int
  max_diff_by_output: dict[str, float]


def verify(estimator_dir: str, output: str, port: port_lib.Port, model_fn,
           input_fn, params: dict, count: int) -> Verification:
  """Predicts the same batches with both checkpoints; raises on mismatch.

  Args:
    estimator_dir, output: the old and the converted checkpoint's folders.
    port: builds the model the converted checkpoint is restored into, and
      predicts with it (Port.predict, output_map).
    model_fn: the legacy model_fn, run in PREDICT mode on the old checkpoint.
    input_fn: the legacy input_fn whose features are fed to both sides (each
      applies its own preprocessing after it).
    params: the user's params for input_fn and model_fn.
    count: how many examples, at most.

  Raises:
    KitError: an output differs, or the port lacks one.
  """
  batch = min(count, 64)
  data = legacy.read_input_fn(input_fn, params, batch, -(-count // batch))
  features = tf.nest.map_structure(lambda *xs: np.concatenate(xs)[:count],
                                   *[f for f, _ in data.batches])
  theirs = legacy.predict(model_fn, tf.train.latest_checkpoint(estimator_dir),
                          features, legacy.model_params(params, batch))
  model = port.build_model(legacy.model_params(params, batch))
  tf.train.Checkpoint(model=model).restore(
      tf.train.latest_checkpoint(output)).expect_partial()
  outputs = (port.predict(model, features) if port.predict else
             model(features, training=False))
  ours = {k: np.asarray(v) for k, v in legacy.as_dict(outputs).items()}
  pairs, missing = checks.paired_outputs(theirs, ours, port.output_map)
  if missing:
    raise KitError(f'verification failed: the port has no output '
                   f'{", ".join(missing)} (port: {sorted(ours)}); map it '
                   '(Port.output_map)')
  diffs = {k: checks.output_diff(*pair) for k, pair in pairs.items()}
  floats = {k for k, pair in pairs.items() if pair[0].dtype.kind == 'f'}

  def allowed(name):
    return tolerances.CONVERSION_ATOL if name in floats else 0

  worst = checks.worst_output(pairs, diffs, allowed)
  examples = len(tf.nest.flatten(features)[0])
  if diffs[worst] > allowed(worst):
    raise KitError(f'verification failed: {worst} differs by up to '
                   f'{diffs[worst]:.3g} on {examples} examples (allowed '
                   f'{allowed(worst):.0e}); is a variable mis-paired or a '
                   'kernel transposed?')
  return Verification(examples, diffs)


def define_flags(tool_flags: flags.FlagValues) -> None:
  """The command's flags, on the tool's own FlagValues (see cli)."""
  define = dict(flag_values=tool_flags)
  flags.DEFINE_string('estimator_dir', None, 'Estimator model_dir to read.',
                      **define)
  flags.DEFINE_string('keras2_dir', None,
                      'Instead of --estimator_dir: a model_dir the port '
                      'wrote on TF 2.15 (Keras 2), to carry over to the same '
                      'port on Keras 3 (TF 2.16 and later).', **define)
  flags.DEFINE_string('output', None, 'New directory for the TF2 checkpoint.',
                      **define)
  flags.DEFINE_string('port', kit_pair.PORT,
                      'A function returning the migration_tools.port.Port '
                      'whose model the checkpoint is converted for.', **define)
  flags.DEFINE_string('params', kit_pair.PARAMS,
                      'The legacy params as a JSON object, handed to the '
                      'port\'s build_model and make_optimizer and, with '
                      '--verify, to the legacy input_fn and model_fn.',
                      **define)
  flags.DEFINE_string('variable_map', None,
                      'A JSON file {"legacy/name": "port/name"}; unset: the '
                      'port\'s variable_map, or inferred from names and '
                      'shapes.', **define)
  flags.DEFINE_bool('verify', False, 'Check that every output of both sides '
                    'agrees.', **define)
  flags.DEFINE_integer('verify_examples', 1000,
                       'How many examples --verify predicts, at most.',
                       lower_bound=1, **define)
  flags.DEFINE_string('legacy_model_fn', kit_pair.LEGACY_MODEL_FN,
                      'The legacy model_fn for --verify, as '
                      'package.module:name.', **define)
  flags.DEFINE_string('legacy_input_fn', kit_pair.LEGACY_INPUT_FN,
                      'The legacy input_fn whose features --verify feeds to '
                      'both sides (batched by params["batch_size"]).',
                      **define)
  cli.define_legacy_flags(tool_flags)
  flags.mark_flags_as_required(['output'], flag_values=tool_flags)


def main(tool_flags: flags.FlagValues, args: list[str]) -> None:
  """Converts, and with --verify checks the outputs of both sides."""
  if args:
    raise KitError(f'unexpected arguments {args}; flags take the form '
                   '--name=value (see --help)')
  logging.set_verbosity(logging.INFO)
  tf.get_logger().handlers.clear()
  if bool(tool_flags.estimator_dir) == bool(tool_flags.keras2_dir):
    raise KitError('give one of --estimator_dir (an Estimator checkpoint) or '
                   '--keras2_dir (the port\'s own, from TF 2.15)')
  if tool_flags.keras2_dir and tool_flags.verify:
    raise KitError('--verify runs the legacy model_fn: it goes with '
                   '--estimator_dir only')
  params = cli.parse_params(tool_flags.params)
  port = port_lib.load_port(tool_flags.port)
  if tool_flags.variable_map:
    port = dataclasses.replace(
        port, variable_map=variable_map_lib.read(tool_flags.variable_map))
  if tool_flags.verify:
    model_fn = cli.load_callable(tool_flags.legacy_model_fn,
                                 '--legacy_model_fn')
    input_fn = cli.load_callable(tool_flags.legacy_input_fn,
                                 '--legacy_input_fn')
    cli.set_legacy_flags(tool_flags.legacy_flags)
  if tool_flags.keras2_dir:
    path = convert_keras2(tool_flags.keras2_dir, tool_flags.output, port,
                          params)
  else:
    path = convert(tool_flags.estimator_dir, tool_flags.output, port, params)
  print(f'Checkpoint: {path}')
  if tool_flags.verify:
    try:
      result = verify(tool_flags.estimator_dir, tool_flags.output, port,
                      model_fn, input_fn, params, tool_flags.verify_examples)
    except Exception as e:  # pylint: disable=broad-except
      shutil.rmtree(tool_flags.output, ignore_errors=True)
      raise KitError(f'{one_line(e)}; {tool_flags.output} was removed') from e
    shown = ', '.join(f'{k} {v:.2e}' for k, v in
                      sorted(result.max_diff_by_output.items()))
    print(f'Verified on {result.examples} examples: every output agrees '
          f'(max differences: {shown})')


def run() -> None:
  """Console-script entry point (``migration-convert-checkpoint``)."""
  cli.run(main, define_flags, __doc__)


if __name__ == '__main__':
  run()
