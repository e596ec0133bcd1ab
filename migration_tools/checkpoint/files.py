"""What both converters share: a checkpoint read whole (a truncated or
corrupt one fails in one line), the port built with its slots, the pairs
checked, and the new checkpoint written whole into a new folder."""
from __future__ import annotations

import collections
import glob
import os

import numpy as np

from kit_core import atomic
from kit_core import checkpoint_files
from kit_core import paths
from kit_core import room
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers
from migration_tools.pair import port as port_lib
from migration_tools.pair import variable_map as variable_map_lib

OBJECT_GRAPH_KEY = '_CHECKPOINTABLE_OBJECT_GRAPH'


class CheckedReader:
  """A checkpoint reader over checkpoint_files.read_all: a truncated or
  corrupt checkpoint fails here, in one line, not halfway through."""

  def __init__(self, path: str):
    self._values = checkpoint_files.read_all(path)

  def get_variable_to_shape_map(self) -> dict:
    return {name: np.shape(value) for name, value in self._values.items()}

  def get_tensor(self, name: str):
    return self._values[name]


def estimate(checkpoint_path: str) -> room.Estimate:
  """What converting the checkpoint at checkpoint_path writes (about its
  own size) and holds (it is read whole, then held again by the port's
  variables and slots: twice its size)."""
  size = room.files_size(glob.glob(glob.escape(checkpoint_path) + '.data-*') +
                         [checkpoint_path + '.index'])
  return room.Estimate(
      'the converted checkpoint', size, 2 * size,
      f'{os.path.basename(checkpoint_path)} is {room.size_text(size)}, read '
      'whole and held again by the port\'s variables')


def check_room(source_dir: str, output: str) -> None:
  """Refuses before any work a conversion the disk under output, or the
  memory, clearly cannot hold (room.check)."""
  path = checkpoint_files.latest(source_dir)
  if path is not None:
    room.check(estimate(path), '--output', output, '')


def build(port: port_lib.Port, params: dict | None):
  """The port's model and its optimizer, slots created."""
  params = dict(params or {})
  model = port.build_model(params)
  optimizer = port.make_optimizer(params)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def check_output(output: str, source_flag: str, source: str) -> str:
  """--output's absolute path: a new or empty folder that is not the
  checkpoint read (source, given as source_flag), nor a link, nor empty.

  Raises:
    KitError: an output that would overwrite something, or destroy its input.
  """
  output = paths.check_output(output, '--output',
                              [(f'the input {source_flag}', source)],
                              folder=True)
  if os.path.exists(output) and os.listdir(output):
    raise KitError(f'--output {output} exists and is not empty; choose a new '
                   'directory')
  return output


def pairs(values: dict, ours: dict, given: dict[str, str] | None,
          order: list[str] | None) -> dict[str, str]:
  """{legacy name: port name} of the checkpoint's values and the port's
  variables (ours, anything with a shape): given, else inferred from names
  and shapes, in the legacy creation order if known (order; else the
  checkpoint's sorted order); checked whole (check_pairs).

  Raises:
    KitError: the map cannot be inferred, or does not fit.
  """
  found = given
  if found is None:
    ranks = {name: i for i, name in enumerate(order or ())}
    shapes = {k: tuple(values[k].shape) for k in sorted(
        values, key=lambda k: (ranks.get(k, len(ranks)), k))}
    try:
      resolved = variable_map_lib.infer(
          shapes, {k: tuple(v.shape) for k, v in ours.items()})
    except KitError as e:
      raise KitError(f'the checkpoint does not match the port\'s model: {e}'
                     ) from e
    if not order:
      _refuse_guessed_order(resolved, shapes)
    found = resolved.pairs
  check_pairs(values, ours, found)
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


def check_pairs(values: dict, ours: dict, pairs: dict[str, str]) -> None:
  """Raises KitError listing every missing, extra or wrong-shaped variable."""
  missing = sorted(set(pairs) - set(values))
  extra = sorted(set(values) - set(pairs))
  unmapped = sorted(set(ours) - set(pairs.values()))
  shapes = [f'{name} {list(values[name].shape)} -> '
            f'{pairs[name]} {list(ours[pairs[name]].shape)}'
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
