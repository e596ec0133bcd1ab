"""The port's own checkpoint from Keras 2 (TF 2.15) carried over to the
same port on Keras 3: Keras 2's layout (a functional model's
``model/layer_with_weights-N/...``, a subclassed model's attributes, which
Keras 3 tracks otherwise: ``_kernel`` for ``kernel``) is not Keras 3's, so
the weights, slots and step are read by the names the object graph kept."""
import dataclasses

from absl import logging
import numpy as np
from tensorflow.core.protobuf import trackable_object_graph_pb2

from kit_core import checkpoint_files
from kit_core import keras_compat
from kit_core.errors import KitError
from migration_tools.checkpoint import files
from migration_tools.pair import optimizers
from migration_tools.pair import port as port_lib

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
  path = checkpoint_files.latest(model_dir)
  if path is None:
    raise KitError(f'no checkpoint in --keras2_dir {model_dir}')
  reader = files.CheckedReader(path)
  keys = reader.get_variable_to_shape_map()
  if files.OBJECT_GRAPH_KEY not in keys:
    raise KitError(f'{path} is a name-based (Estimator or TF 1) checkpoint: '
                   'convert it with --estimator_dir')
  if not keras_compat.written_by_keras2(keys):
    raise KitError(f'{path} was written by Keras 3 (its optimizer tracks '
                   'optimizer/_trainable_variables): it restores as it is '
                   'into the same port on Keras 3')
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(files.OBJECT_GRAPH_KEY))
  # Dropout's random state (migrate saves it as 'random') is Keras 2's own
  # generator's; Keras 3 draws from another kind, which starts afresh.
  values = {attribute.full_name: reader.get_tensor(attribute.checkpoint_key)
            for node in graph.nodes for attribute in node.attributes
            if attribute.name == 'VARIABLE_VALUE' and
            not attribute.checkpoint_key.startswith('random/')}
  model, slots, step = {}, {}, 0
  for name, value in values.items():
    parts = name.split('/')
    # A slot is '<token>/<variable>' of the variable's shape, behind the
    # optimizer's name when Keras 2 built it inside fit ('Adam/m/dense/kernel').
    for start in (0, 1):
      owner = '/'.join(parts[start + 1:])
      if (len(parts) > start + 1 and owner in values and
          np.shape(values[owner]) == np.shape(value)):
        slots[(owner, parts[start])] = value
        break
    else:
      if parts[-1] == _KERAS2_STEP:
        step = int(value)
      elif parts[-1] not in _KERAS2_DERIVED:
        model[name] = value
  return Keras2Checkpoint(path, model, slots, step)


def _carry_keras2_slots(checkpoint: Keras2Checkpoint, optimizer,
                        slot_map: dict[str, str]) -> int:
  """Assigns the Keras 2 slots to the optimizer's; returns how many.

  A table optimizer's slots are renamed by its tables (Keras 2's 'm' is
  Keras 3's 'momentum'); any other optimizer's keep their token (the same
  code names them the same on both), or pair through slot_map.
  """
  kind = optimizers.describe_port(optimizer).kind
  table = optimizers.PORT_SLOTS[2]
  names = {n: n for n in checkpoint.model}
  if kind in optimizers.HYPER:  # SGD, momentum, Adam: by the tables.
    theirs, unused = {}, []
    for (name, token), value in checkpoint.slots.items():
      if (kind, token) in table:
        theirs[(name, table[(kind, token)])] = value
      elif (kind, token) not in optimizers.PORT_UNUSED_SLOTS[2]:
        unused.append(f'{token}/{name}')
    if unused:
      raise KitError(f'the checkpoint holds optimizer slots the port\'s '
                     f'{kind} has no use for ({", ".join(sorted(unused)[:4])}'
                     '): give the port the optimizer it was trained with')
    ours = optimizers.port_slots(optimizer, names)
  else:
    found = optimizers.port_slot_variables(optimizer, names)
    ours = optimizers.map_slots(
        found, optimizers.pair_slots(checkpoint.slots, found, slot_map).pairs)
    theirs = checkpoint.slots
  missing = sorted('/'.join(k) for k in set(ours) - set(theirs))
  extra = sorted('/'.join(k) for k in set(theirs) - set(ours))
  if missing or extra:
    raise KitError('the optimizer slots do not pair (' + '; '.join(
        f'{label}: {", ".join(items[:4])}' for label, items in (
            ('not in the checkpoint', missing), ('not in the port', extra))
        if items) + '): give the port the optimizer it was trained with')
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
  output = files.check_output(output, '--keras2_dir', model_dir)
  checkpoint = read_keras2_checkpoint(model_dir)
  model, optimizer, ours = files.build(port, params)
  pairs = {name: name for name in checkpoint.model if name in ours}
  files.check_pairs({k: v.shape for k, v in checkpoint.model.items()}, ours,
                    pairs)
  for name, value in checkpoint.model.items():
    ours[name].assign(value)
  optimizer.iterations.assign(checkpoint.step)
  slots = _carry_keras2_slots(checkpoint, optimizer, port.slot_map)
  path = files.save(model, optimizer, output, checkpoint.step)
  logging.info('Carried %s (step %d, %d variables, %d slots) over into %s',
               checkpoint.path, checkpoint.step, len(pairs), slots, path)
  return path
