"""An Estimator checkpoint carried over to a port on JAX (an
``array_port.ArrayPort``), and --verify on it, with no TensorFlow in the
process: the checkpoint read by kit_core/tensor_bundle.py, the legacy
predictions from a recording made on TF 2.15 (predictions.py).

What is carried is what the TensorFlow converter carries (estimator.py):
every model variable through the variable map (given or inferred), the
optimizer's slots (a TF 1 optimizer's by the tables, in Keras 3's
convention; any other's '<variable>/<slot>' through Port.slot_map, equal
names or creation order), the global step as the optimizer's. They are set
through the ArrayModel and written by the port's own save_weights (the
kit's Keras port: a Keras 3 ``.weights.h5``, optimizer included), or as
named arrays (array_port.write_state).
"""
from __future__ import annotations

from collections.abc import Callable
import os
from typing import Any

from absl import logging
import numpy as np

from kit_core import atomic
from kit_core import progress as progress_lib
from kit_core.errors import KitError
from migration_tools import outputs as outputs_lib
from migration_tools.checkpoint import estimator
from migration_tools.checkpoint import files
from migration_tools.checkpoint import predictions
from migration_tools.checkpoint import verify as verify_lib
from migration_tools.pair import array_port
from migration_tools.pair import frameworks
from migration_tools.pair import legacy
from migration_tools.pair import optimizers


def _carry_slots(checkpoint: estimator.LegacyCheckpoint,
                 runner: Any,
                 given: dict[str, str]) -> int:
  """Sets the port's slots from the checkpoint's; returns how many.

  Raises:
    KitError: the slots do not pair one to one.
  """
  if checkpoint.kind is not None:
    description = runner.describe_optimizer()
    files.check_slot_kind(checkpoint.kind,
                          description.kind if description else
                          'not described')
  else:
    slot_map = optimizers.pair_slots(checkpoint.slots, runner.model.slots(),
                                     given)
    files.check_slot_map(slot_map, 'ArrayPort')
    logging.info('Slots paired: %s', slot_map)
    runner.use_slot_map(slot_map.pairs)
  ours = runner.slots(1.0)  # The (variable, slot) the port keeps.
  files.check_slots(ours, checkpoint.slots)
  if any(optimizers.scale(checkpoint.kind, slot, 0.0) !=
         optimizers.scale(checkpoint.kind, slot, 1.0)
         for _, slot in checkpoint.slots):
    raise KitError(f'{checkpoint.kind} slots are carried to Keras\'s by the '
                   'learning rate at the checkpoint\'s step, which an '
                   'ArrayModel gives only after a step: convert the model '
                   'alone (--no_slots)')
  runner.set_slots(checkpoint.slots, 1.0)  # No slot left scales by the rate.
  return len(ours)


def convert(estimator_dir: str, output: str, port: array_port.ArrayPort,
            params: dict | None = None, slots: bool = True,
            order: list[str] | None = None,
            averages_as_weights: bool = False,
            say: Callable[[str], None] = logging.info) -> str:
  """Writes the checkpoint for the port into the new directory output;
  returns the path of the file the port restores from. The arguments are
  estimator.convert's.

  Raises:
    KitError: as estimator.convert; nothing is left at output.
  """
  output = files.check_output(output, '--estimator_dir', estimator_dir)
  checkpoint = estimator.read_checkpoint(estimator_dir)
  # The port's framework's runner (an ArrayRunner): on one replica, no
  # batches.
  runner = frameworks.framework_of(port).runner(
      port, 1, legacy.model_params(params or {}, 1), [])
  pairs = files.pairs(checkpoint.model.shapes, runner.model.variables(),
                      port.variable_map, order)
  runner.use_map(pairs)
  runner.set_state(estimator.weights(checkpoint, averages_as_weights))
  runner.set_global_step(checkpoint.step)
  slots_carried = 0
  if slots and checkpoint.slots:
    slots_carried = _carry_slots(checkpoint, runner, port.slot_map)
  os.makedirs(os.path.dirname(output), exist_ok=True)
  framework = frameworks.framework_of(port)
  with atomic.temporary_path(output, directory=True) as tmp:
    written = os.path.relpath(framework.save_state(port, runner.model, tmp),
                              tmp)
  path = os.path.join(output, written)
  say(estimator.carried(checkpoint, len(pairs), slots_carried, slots,
                        averages_as_weights))
  return path


def verify(path: str, port: array_port.ArrayPort,
           theirs: predictions.Recorded, params: dict | None,
           progress: progress_lib.Progress | None = None,
           pair_variables: verify_lib.PairVariables | None = None
           ) -> verify_lib.Verification:
  """The port, restored from path (convert's), predicts the recorded
  features; every output, and every layer the port gives
  (ArrayPort.layer_outputs) that pair_variables pairs, must agree with the
  recorded ones (verify.judge).

  Raises:
    KitError: an output or a layer differs, or the port lacks an output.
  """
  progress = progress or progress_lib.Progress(None)
  progress.now(f'verify: the port predicting on {path}')
  model = array_port.check_model(
      port.make(legacy.model_params(params or {}, theirs.batch), 1, False), '--port')
  frameworks.framework_of(port).load_state(port, model, path)
  def predict_all(side: str):
    return outputs_lib.in_batches(model.predict, theirs.features,
                                  theirs.batch,
                                  verify_lib.counted(progress, side))
  ours = predict_all('the port')
  first = outputs_lib.first_batch(theirs.features, theirs.batch)

  def port_layers() -> dict:
    if port.layer_outputs is None:  # Optional in the contract.
      return {}
    return {k: np.asarray(v).ravel()
            for k, v in port.layer_outputs(model, first).items()}
  layers = verify_lib.Layers(
      theirs, port_layers,
      pair_variables and pair_variables(model.variables()))
  noise = verify_lib.measured_noise(
      ours, lambda: {k: np.array(v) for k, v in model.variables().items()},
      model.set_variables, lambda: predict_all('the port, its own noise'),
      progress, layers)
  return verify_lib.judge(theirs, ours, port.output_map, noise, layers)
