"""What both converters share: a checkpoint's tensors read one at a time
(Tensors: a truncated or corrupt one fails in one line, and nothing is
written), the port built with its slots, the pairs checked, the room
reckoned before any work, and the new checkpoint written whole into a new
folder."""
from __future__ import annotations

import collections
import collections.abc
import glob
import os

import numpy as np

from kit_core import atomic
from kit_core import checkpoint_files
from kit_core import keras_compat
from kit_core import paths
from kit_core import room
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers
from migration_tools.pair import port as port_lib
from migration_tools.pair import variable_map as variable_map_lib

OBJECT_GRAPH_KEY = '_CHECKPOINTABLE_OBJECT_GRAPH'


class Tensors(collections.abc.Mapping):
  """{key: tensor} of a checkpoint, each read from the files when asked
  (checkpoint_files.Reader), never held: the converters carry one tensor at
  a time. shapes: {key: shape}, known without reading."""

  def __init__(self, reader: checkpoint_files.Reader, names: dict):
    """names: {key: the tensor's name in the checkpoint}."""
    self._reader, self._names = reader, dict(names)
    self.shapes = {key: reader.shapes[name] for key, name in names.items()}

  def __getitem__(self, key):
    return self._reader.read(self._names[key])

  def __contains__(self, key) -> bool:  # Without reading it.
    return key in self._names

  def __iter__(self):
    return iter(self._names)

  def __len__(self) -> int:
    return len(self._names)

  def replaced(self, others: 'Tensors') -> 'Tensors':
    """These, the keys others holds read from others' tensors instead."""
    return Tensors(self._reader, {**self._names, **others._names})  # pylint: disable=protected-access


class CheckedReader:
  """A checkpoint reader over checkpoint_files.read_all: a truncated or
  corrupt checkpoint fails here, in one line, not halfway through."""

  def __init__(self, path: str):
    self._values = checkpoint_files.read_all(path)

  def get_variable_to_shape_map(self) -> dict:
    return {name: np.shape(value) for name, value in self._values.items()}

  def get_tensor(self, name: str):
    return self._values[name]


def latest(estimator_dir: str) -> str:
  """The newest checkpoint of --estimator_dir, by its files.

  Raises:
    KitError: there is none.
  """
  path = checkpoint_files.latest(estimator_dir)
  if path is None:
    raise KitError(f'no checkpoint in --estimator_dir {estimator_dir}')
  return path


def estimate(checkpoint_path: str) -> room.Estimate:
  """What converting the checkpoint at checkpoint_path writes and holds:
  about its own size each (the port's variables and slots; the
  checkpoint's tensors are read one at a time)."""
  size = room.files_size(glob.glob(glob.escape(checkpoint_path) + '.data-*') +
                         [checkpoint_path + '.index'])
  return room.Estimate(
      'the converted checkpoint', size, size,
      f'{os.path.basename(checkpoint_path)} is {room.size_text(size)}, held '
      'by the port\'s variables and slots')


def check_room(source_dir: str, output: str) -> None:
  """Refuses before any work a conversion the disk under output, or the
  memory, clearly cannot hold (room.check)."""
  path = checkpoint_files.latest(source_dir)
  if path is not None:
    room.check(estimate(path), '--output', output, '')


def build(port: port_lib.Port, params: dict | None):
  """(model, optimizer, state): the port's model and its optimizer, slots
  created, and the model's variables by path in the order they were
  created (what an inferred map pairs in, as a comparison does)."""
  params = dict(params or {})
  with port_lib.creations() as made, \
      keras_compat.names_as_first_built('port'):
    model = port.build_model(params)
  optimizer = port_lib.check_optimizer(port.make_optimizer(params))
  optimizer.build(model.trainable_variables)
  return model, optimizer, port_lib.in_creation_order(
      port_lib.state_variables(model), made)


def restore(model, optimizer, path: str) -> None:
  """Restores what save wrote at path into model and optimizer, matched as
  tf.train.Checkpoint(model=..., optimizer=...).restore matches them (the
  object graph the checkpoint holds, walked beside the live objects), but
  a variable at a time: TensorFlow's restore reads every tensor first, so
  its peak holds the model and its slots twice (BERT-base: 1.3 GB more).

  Raises:
    KitError: a variable of the model that the checkpoint does not reach.
  """
  # Imported here: a protocol buffer of TensorFlow's, read on TF alone.
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(path)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor('_CHECKPOINTABLE_OBJECT_GRAPH'))
  root = tf.train.Checkpoint(model=model, optimizer=optimizer)
  view = tf.train.TrackableView(root)
  matched, pending = {0: root}, [0]
  while pending:
    node_id = pending.pop()
    live = view.children(matched[node_id])
    for child in graph.nodes[node_id].children:
      if child.node_id not in matched and child.local_name in live:
        matched[child.node_id] = live[child.local_name]
        pending.append(child.node_id)
  # A TF 1-style optimizer's slots hang off their variables, not its own
  # children (Keras 2's legacy optimizers).
  for node in graph.nodes:
    for slot in node.slot_variables:
      variable = matched.get(slot.original_variable_node_id)
      if variable is not None and hasattr(optimizer, 'get_slot'):
        matched.setdefault(slot.slot_variable_node_id,
                           optimizer.get_slot(variable, slot.slot_name))
  restored = set()
  for node_id, live in matched.items():
    for attribute in graph.nodes[node_id].attributes:
      if attribute.name == 'VARIABLE_VALUE' and hasattr(live, 'assign'):
        live.assign(reader.get_tensor(attribute.checkpoint_key))
        restored.add(id(live))
  missing = [v.name for v in model.weights if id(v) not in restored]
  if missing:
    raise KitError(f'the checkpoint at {path} does not hold the model\'s '
                   f'{", ".join(missing[:5])}'
                   f'{f" and {len(missing) - 5} more" if len(missing) > 5 else ""}')


def check_output(output: str, source_flag: str, source: str) -> str:
  """--output's absolute path: a new or empty folder that is not the
  checkpoint read (source, given as source_flag), nor a link, nor empty.

  Raises:
    KitError: an output that would overwrite something, or destroy its input.
  """
  output = paths.check_output(output, '--output',
                              [(f'the input {source_flag}', source)],
                              folder=True)
  if os.path.exists(output) and UNVERIFIED in os.listdir(output):
    raise KitError(f'--output {output} holds a checkpoint a --verify run '
                   'converted and never verified (that run was killed before '
                   f'it ended): remove {output}, then run the same command '
                   'again')
  if os.path.exists(output) and os.listdir(output):
    raise KitError(f'--output {output} exists and is not empty; choose a new '
                   'directory')
  return output


# In --output from the conversion until --verify has passed: a run killed
# in between (SIGKILL: nothing of it runs) leaves it, and the next run says
# what the folder holds.
UNVERIFIED = '.kit_unverified'


def mark_unverified(output: str) -> None:
  atomic.write_text(os.path.join(output, UNVERIFIED),
                    'converted by migration-convert-checkpoint --verify, not '
                    'verified yet\n')


def mark_verified(output: str) -> None:
  os.remove(os.path.join(output, UNVERIFIED))


def pairs(shapes: dict, ours: dict, given: dict[str, str] | None,
          order: list[str] | None) -> dict[str, str]:
  """{legacy name: port name} of the checkpoint's variables ({name:
  shape}) and the port's (ours, anything with a shape): given, else
  inferred from names and shapes, in the legacy creation order if known
  (order; else the checkpoint's sorted order); checked whole
  (check_pairs).

  Raises:
    KitError: the map cannot be inferred, or does not fit.
  """
  found = given
  if found is None:
    ranks = {name: i for i, name in enumerate(order or ())}
    ordered = {k: tuple(shapes[k]) for k in sorted(
        shapes, key=lambda k: (ranks.get(k, len(ranks)), k))}
    try:
      resolved = variable_map_lib.infer(
          ordered, {k: tuple(v.shape) for k, v in ours.items()})
    except KitError as e:
      raise KitError(f'the checkpoint does not match the port\'s model: {e}'
                     ) from e
    if not order:
      _refuse_guessed_order(resolved, ordered)
    found = resolved.pairs
  check_pairs(shapes, ours, found)
  return found


def _refuse_guessed_order(resolved: variable_map_lib.Resolved,
                          shapes: dict[str, tuple]) -> None:
  """Variables of one shape and last name, told apart only by the order
  the model_fn created them in, which a checkpoint (sorted by name) does
  not keep: pairing them in the checkpoint's order would swap some (the
  biases of query, key and value). Refused in one line."""
  ordered = [k for k, how in resolved.how.items() if how == 'order']
  groups = collections.Counter((shapes[k], k.rsplit('/', 1)[-1])
                               for k in ordered)
  guessed = [k for k in ordered if groups[(shapes[k], k.rsplit('/', 1)[-1])]
             > 1]
  if guessed:
    raise KitError(
        f'{len(guessed)} variables ({", ".join(guessed[:3])}'
        f'{" ..." if len(guessed) > 3 else ""}) pair with the port\'s only by '
        'the order the model_fn creates them, which the checkpoint does not '
        'keep: give --legacy_model_fn and --legacy_input_fn (TF 2.15) for '
        'that order, or the map (Port.variable_map, --variable_map=map.json)')


def check_pairs(shapes: dict, ours: dict, pairs: dict[str, str]) -> None:
  """Raises KitError listing every missing, extra or wrong-shaped variable:
  shapes {legacy name: shape} against ours {port name: anything with a
  shape}."""
  missing = sorted(set(pairs) - set(shapes))
  extra = sorted(set(shapes) - set(pairs))
  unmapped = sorted(set(ours) - set(pairs.values()))
  wrong = [f'{name} {list(shapes[name])} -> '
           f'{pairs[name]} {list(ours[pairs[name]].shape)}'
           for name in sorted(set(pairs) & set(shapes))
           if tuple(shapes[name]) != tuple(ours[pairs[name]].shape)]
  problems = [f'{label}: {", ".join(items)}' for label, items in (
      ('missing from the checkpoint', missing), ('extra in the checkpoint',
                                                 extra),
      ('model variables with no source', unmapped), ('wrong shape', wrong))
              if items]
  if problems:
    raise KitError('the checkpoint does not match the port\'s model; ' +
                   '; '.join(problems))


def save(model, optimizer, output: str, step: int) -> str:
  """Writes under a temporary name, then renames it to output."""
  os.makedirs(os.path.dirname(output), exist_ok=True)
  with atomic.temporary_path(output, directory=True) as tmp:
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    tf.train.CheckpointManager(checkpoint, tmp, max_to_keep=1).save(
        checkpoint_number=step)
  return tf.train.latest_checkpoint(output)


def check_slot_kind(legacy_kind: str, port_kind: str) -> None:
  """Raises KitError unless the checkpoint's slots (a TF 1 optimizer's, by
  the tables) are the port optimizer's kind."""
  if legacy_kind != port_kind:
    raise KitError(f'the checkpoint holds {legacy_kind} slots and the '
                   f'port\'s optimizer is {port_kind}: give the port the '
                   'legacy optimizer, or convert the model alone (--no_slots)')


def check_slot_map(slot_map: optimizers.SlotMap, owner: str) -> None:
  """Raises KitError if a slot of the checkpoint pairs with none of the
  port's; owner names where a map is given ('Port', 'ArrayPort')."""
  if slot_map.legacy_only:
    raise KitError(f'the checkpoint\'s slots {", ".join(slot_map.legacy_only)}'
                   ' pair with none of the port optimizer\'s ('
                   f'{", ".join(slot_map.port_only) or "it has none"}): pair '
                   f'them ({owner}.slot_map), or convert the model alone '
                   '(--no_slots)')


def check_slots(ours, theirs) -> None:
  """Raises KitError listing the (variable, slot) keys that one side has
  and the other lacks: the port's (ours) and the checkpoint's (theirs)."""
  missing = sorted('/'.join(k) for k in set(ours) - set(theirs))
  extra = sorted('/'.join(k) for k in set(theirs) - set(ours))
  if missing or extra:
    raise KitError('the optimizer slots do not pair (' + '; '.join(
        f'{label}: {", ".join(items[:4])}' + (' ...' if len(items) > 4 else '')
        for label, items in (('not in the checkpoint', missing),
                             ('not in the port', extra)) if items) +
                   '): give the port the legacy optimizer, or convert the '
                   'model alone (--no_slots)')
