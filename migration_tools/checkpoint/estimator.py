"""An Estimator's name-based checkpoint carried over to the port: every
model variable by the variable map, the optimizer's slots in the port's
convention (``optimizers``: TF 1 Momentum and Adam by their tables, any other
optimizer's '<variable>/<slot>' through a slot map), the global step as the
optimizer's step."""
from __future__ import annotations

import collections
from collections.abc import Callable
import dataclasses

from absl import logging

from kit_core import checkpoint_files
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.checkpoint import files
from migration_tools.pair import legacy_state
from migration_tools.pair import optimizers
from migration_tools.pair import port as port_lib

STEP_NAME = 'global_step'  # -> optimizer.iterations


@dataclasses.dataclass(frozen=True)
class LegacyCheckpoint:
  """A name-based checkpoint, split as the converter reads it. Each value
  is read from the files when asked (files.Tensors): a conversion holds no
  more of the checkpoint than the tensor it carries.

  model: {variable name: value}, in the checkpoint's (sorted) order.
  slots: {(variable name, slot): value}; kind: their optimizer's, by the
    tables (the slot its canonical name), or None (the slot the suffix the
    legacy optimizer named it with, e.g. 'adam_m').
  step: the global step (0 if absent).
  averages: {variable name: its tf.train.ExponentialMovingAverage shadow,
    '<variable>/ExponentialMovingAverage'}, what the Estimator evaluated and
    exported in place of the weights when its scaffold restored them.
  """
  path: str
  model: files.Tensors
  slots: files.Tensors
  kind: str | None
  step: int
  averages: files.Tensors


def read_checkpoint(estimator_dir: str) -> LegacyCheckpoint:
  """The latest checkpoint in estimator_dir, split into model, slots, step,
  by its names and shapes (no tensor is read but the step).

  Raises:
    KitError: no checkpoint, or one already object-based (TF 2).
  """
  path = files.latest(estimator_dir)
  reader = checkpoint_files.Reader(path)
  shapes = reader.shapes
  if files.OBJECT_GRAPH_KEY in shapes:
    raise KitError(f'{path} is already a TF 2 (object-based) checkpoint: '
                   'restore it with tf.train.Checkpoint; if the port wrote '
                   'it on TF 2.15 (Keras 2) and now runs on Keras 3, carry it '
                   'over with --keras2_dir')
  model, slots, kinds = {}, {}, set()  # {name or key: name in the files}
  for name in sorted(shapes):
    if (name == STEP_NAME or
        name.rpartition('/')[2] in optimizers.LEGACY_DERIVED):
      continue
    found = optimizers.legacy_slot(name, shapes, shapes)
    if found:
      kinds.add(found[1])
      slots[(found[0], found[2])] = name
    else:
      model[name] = name
  if len(kinds) > 1:
    raise KitError(f'{path} holds slots of several optimizers '
                   f'({", ".join(sorted(kinds))}); the converter carries one')
  averages = {}
  for name in [n for n in model if n.endswith(legacy_state.AVERAGE_SUFFIX)]:
    owner = name[:-len(legacy_state.AVERAGE_SUFFIX)]
    if owner in model and shapes[owner] == shapes[name]:
      averages[owner] = model.pop(name)
  if not slots:  # Another optimizer's: '<variable>/<slot>' of its shape.
    for key, name in optimizers.generic_slots(
        {k: shapes[k] for k in model}).items():
      slots[key] = model.pop(name)
  step = int(reader.read(STEP_NAME)) if STEP_NAME in shapes else 0
  return LegacyCheckpoint(path, files.Tensors(reader, model),
                          files.Tensors(reader, slots),
                          kinds.pop() if kinds else None, step,
                          files.Tensors(reader, averages))


def weights(checkpoint: LegacyCheckpoint,
            averages_as_weights: bool) -> files.Tensors:
  """{legacy name: value} the port's variables get, each read when asked:
  the raw weights, or with averages_as_weights the moving averages in their
  place.

  Raises:
    KitError: averages_as_weights, and the checkpoint holds none.
  """
  if averages_as_weights:
    if not checkpoint.averages:
      raise KitError(f'--averages_as_weights: {checkpoint.path} holds no '
                     'moving average (<variable>/ExponentialMovingAverage); '
                     'convert its weights without it')
    return checkpoint.model.replaced(checkpoint.averages)
  return checkpoint.model


def _current_rate(optimizer) -> float:
  """The optimizer's learning rate at its step."""
  current = getattr(optimizer, '_get_current_learning_rate', None)
  rate = current() if current else optimizer.learning_rate
  return float(tf.convert_to_tensor(rate).numpy())


def _port_slots(checkpoint: LegacyCheckpoint, optimizer,
                names: dict[str, str], given: dict[str, str]) -> dict:
  """{(legacy name, legacy slot): port slot variable} for the checkpoint's
  slots: by the tables for their kind, else through a slot map."""
  if checkpoint.kind is not None or not checkpoint.slots:
    if checkpoint.slots:
      files.check_slot_kind(checkpoint.kind,
                            optimizers.describe_port(optimizer).kind)
    return optimizers.port_slots(optimizer, names)
  found = optimizers.port_slot_variables(optimizer, names)
  slot_map = optimizers.pair_slots(checkpoint.slots, found, given)
  files.check_slot_map(slot_map, 'Port')
  logging.info('Slots paired: %s', slot_map)
  return optimizers.map_slots(found, slot_map.pairs)


def _carry_slots(checkpoint: LegacyCheckpoint, optimizer,
                 names: dict[str, str], given: dict[str, str]) -> int:
  """Assigns the checkpoint's slots to the port optimizer's; returns how
  many. names: {port variable name: legacy name}."""
  ours = _port_slots(checkpoint, optimizer, names, given)
  files.check_slots(ours, checkpoint.slots)
  kind = checkpoint.kind
  rate = _current_rate(optimizer) if ours and kind else 0.0
  for key, variable in ours.items():
    try:
      value = optimizers.to_port(kind, key[1], checkpoint.slots[key], rate)
    except ValueError as e:
      raise KitError(f'{e}; give the port its learning rate (--params)') from e
    variable.assign(value)
  return len(ours)


def carried(checkpoint: LegacyCheckpoint, variables: int, slots: int,
            slots_asked: bool, averages_as_weights: bool) -> str:
  """What a conversion carried and left, in one line: the variables (raw or
  as their averages), the step, the slots by name and their optimizer, the
  averages."""
  said = [f'{variables} variables' + (' as their moving averages'
                                      if averages_as_weights else ''),
          f'the step ({checkpoint.step}, as optimizer.iterations)']
  by_name = collections.Counter(slot for _, slot in checkpoint.slots)
  names = ', '.join(f'{name} x{count}' for name, count in sorted(
      by_name.items()))
  kind = checkpoint.kind or ("the legacy optimizer's own, paired with the "
                             "port's by name and shape")
  left = []
  if slots and slots_asked:
    said.append(f'{slots} optimizer slots ({names}; {kind})')
  elif checkpoint.slots:
    left.append(f'{len(checkpoint.slots)} optimizer slots ({names}): '
                '--no_slots, the optimizer starts afresh')
  if checkpoint.averages and not averages_as_weights:
    left.append(f'{len(checkpoint.averages)} moving averages: the raw '
                'weights were written (--averages_as_weights writes the '
                'averages, as the Estimator evaluated and exported them)')
  return ('Carried: ' + ', '.join(said) + '.' +
          (' Left: ' + '; '.join(left) + '.' if left else ''))


def convert(estimator_dir: str, output: str, port: port_lib.Port,
            params: dict | None = None, slots: bool = True,
            order: list[str] | None = None,
            averages_as_weights: bool = False,
            say: Callable[[str], None] = logging.info) -> str:
  """Writes the converted checkpoint into the new directory output.

  Args:
    estimator_dir: an Estimator model_dir (its latest checkpoint is read).
    output: a new (or empty) directory.
    port: builds the model and optimizer; its variable_map (or an inferred
      one) pairs the variables.
    params: the legacy params, handed to port.build_model and
      port.make_optimizer (batch_size and use_tpu are not added: there is no
      batch here).
    slots: carry the optimizer's slots; False drops them (said in the log),
      the optimizer starting afresh at the checkpoint's step.
    order: the legacy variables in creation order (legacy.creation_order),
      for a map inferred by shape and order; None: the checkpoint's sorted
      order.
    averages_as_weights: write the checkpoint's moving averages as the
      port's weights, as the Estimator evaluated and exported them; False:
      the raw weights (the averages are said to be left).
    say: takes the line of what was carried and left (carried).

  Returns:
    The checkpoint path. Nothing is left at output on failure.

  Raises:
    KitError: no checkpoint, an output in the way, or a checkpoint that does
      not match the port's model (every mismatch listed).
  """
  output = files.check_output(output, '--estimator_dir', estimator_dir)
  checkpoint = read_checkpoint(estimator_dir)
  model, optimizer, ours = files.build(port, params)
  pairs = files.pairs(checkpoint.model.shapes, ours, port.variable_map, order)
  values = weights(checkpoint, averages_as_weights)
  for name, target in pairs.items():
    ours[target].assign(values[name])
  optimizer.iterations.assign(checkpoint.step)
  slots_carried = 0
  if slots:
    slots_carried = _carry_slots(checkpoint, optimizer,
                                 {v: k for k, v in pairs.items()},
                                 port.slot_map)
  path = files.save(model, optimizer, output, checkpoint.step)
  say(carried(checkpoint, len(pairs), slots_carried, slots,
              averages_as_weights))
  return path
