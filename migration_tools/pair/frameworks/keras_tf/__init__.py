"""Keras on TensorFlow: a ``port.Port`` run under tf.distribute strategies
over logical CPU devices, its dropout switched off while its graphs are
built, and aligned with TF 1's masks on Keras 2 (TF 2.15)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from kit_core import keras_compat
from kit_core import progress as progress_lib
from kit_core.lazy import tensorflow as tf
from migration_tools.pair.frameworks.keras_tf import port as port_lib
from migration_tools.pair import precision as precision_lib
from migration_tools.pair.frameworks.keras_tf import ran_on
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks.keras_tf import precision as keras_tf_precision


class KerasOnTensorFlow(base.Framework):
  """A Keras port on TensorFlow (TF 2.15's Keras 2 or the newest's Keras 3)."""

  name = 'keras_tf'
  on_tensorflow = True
  contract = 'migration_tools.pair.port.Port'
  title = 'Keras on TensorFlow'
  seeds_with = 'tf.keras.utils.set_random_seed(--seed)'

  def accepts(self, port: Any) -> bool:
    return isinstance(port, port_lib.Port)

  def check(self, port: Any, where: str) -> port_lib.Port:
    return port_lib.check_port(port, where)

  def describe(self, port: Any) -> str:
    del port  # Every Keras port runs on the TensorFlow of this process.
    return f'TensorFlow {tf.__version__}, Keras {keras_compat.keras_major()}'

  def placements(self, counts: list[int], progress: progress_lib.Progress,
                 skipped: dict[str, str]) -> dict[str, Any]:
    del progress, skipped  # Logical CPU devices hold any count.
    return cpu_strategies(counts)

  def runner(self, port: Any, placement: Any, params: dict, batches: list,
             dots=None, dropout: bool = False):
    # Its dropout is on unless built inside seeded(): nothing to switch.
    del dropout
    # Imported here: its tf.function steps need TensorFlow at import.
    from migration_tools.pair.frameworks.keras_tf import runner as port_runner  # pylint: disable=g-import-not-at-top
    return port_runner.PortRunner(port, placement, params, batches, dots)

  def dots(self, emulate: precision_lib.Rounding | None = None) -> precision_lib.Dots:
    # Its strategies run on CPU devices, in float32, unless emulating.
    return keras_tf_precision.TensorFlowDots(emulate)

  @contextlib.contextmanager
  def seeded(self, seed: int) -> Iterator[None]:
    from migration_tools.pair.frameworks.keras_tf import runner as port_runner  # pylint: disable=g-import-not-at-top
    from migration_tools.pair.frameworks.keras_tf import own_draws  # pylint: disable=g-import-not-at-top
    tf.keras.utils.set_random_seed(seed)
    with port_runner.dropout_disabled(), own_draws.off():
      yield

  rates_unread = ('its optimizer\'s learning rate is neither a number nor a '
                  'LearningRateSchedule (keras_compat.rate_at)')

  def dropout_unaligned(self) -> str:
    if keras_compat.is_keras3():
      return ('Keras 3 draws dropout masks from its own seed generator, '
              'which cannot be aligned with TF 1\'s random ops; the legacy '
              'step\'s masks are handed to its dropout calls instead')
    return ''

  @property
  def takes_masks(self) -> bool:
    # Keras 2 draws as TF 1 does (aligned_draws); Keras 3 takes the legacy
    # masks (keras_tf/dropout.py).
    return keras_compat.is_keras3()

  def masks_given(self, masks: list, names: list[str]):
    from migration_tools.pair.frameworks.keras_tf import dropout  # pylint: disable=g-import-not-at-top
    return dropout.given(masks, names)

  def dropout_at_inference(self):
    from migration_tools.pair.frameworks.keras_tf import dropout  # pylint: disable=g-import-not-at-top
    return dropout.watched()

  def aligned_draws(self) -> contextlib.AbstractContextManager:
    # Every stateful random op built inside draws from constant seeds: the
    # legacy graph's dropout op and the port's, in its tf.function, then
    # draw the same mask at the same step.
    return tf.compat.v1.keras.utils.DeterministicRandomTestTool().scope()

  def tpu_ready(self, port: Any, params: dict, batches: list,
                progress: progress_lib.Progress):
    from migration_tools.pair.frameworks.keras_tf import tpu as keras_tf_tpu  # pylint: disable=g-import-not-at-top
    progress.now('tpu_ready: compiling the step and predict with XLA')
    return keras_tf_tpu.check(port, params, batches)

  def ran_on(self, port: Any, runner: Any, placement: Any,
             counts: list[int], batches: list) -> dict[str, Any]:
    del port, counts, batches  # Read from the strategy and the model.
    return ran_on.describe_tensorflow(
        placement.extended.worker_devices,
        keras_compat.compute_dtype(runner.model))


def cpu_strategies(replica_counts: list[int]
                   ) -> dict[str, tf.distribute.Strategy]:
  """{'1 replica': ..., '2 replicas': ...} over the logical CPU devices.

  ReductionToOneDevice, not collectives: strategies of several sizes over the
  same devices in one process would clash on collective group keys.
  """
  strategies = {}
  for count in replica_counts:
    devices = [f'/cpu:{i}' for i in range(count)]
    strategies[base.label(count)] = (
        tf.distribute.OneDeviceStrategy(devices[0]) if count == 1 else
        tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice()))
  return strategies


base.register(KerasOnTensorFlow())
