"""Logical CPU devices: N replicas on one CPU, as N TPU cores would be, for
TensorFlow (logical devices) or for JAX (XLA's host devices)."""
import os
import re
import sys

from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf

_XLA_FLAG = '--xla_force_host_platform_device_count'


def split_cpu(num_devices: int) -> None:
  """Splits the CPU into num_devices logical devices (replicas, like TPU cores).

  Must run before TensorFlow initialises its devices: before any op runs.
  """
  if num_devices < 1:
    raise KitError(f'--num_cpu_devices={num_devices}: need at least 1')
  cpu = tf.config.list_physical_devices('CPU')[0]
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
  except RuntimeError as e:
    current = len(tf.config.list_logical_devices('CPU'))
    if current != num_devices:
      raise KitError(f'cannot split the CPU into {num_devices} devices: '
                     f'TensorFlow has already started with {current}') from e


def split_xla_cpu(num_devices: int, flag: str = '--num_cpu_devices') -> None:
  """Asks XLA for num_devices CPU devices, before JAX starts: it makes them
  once, when it first asks for devices, from XLA_FLAGS.

  Raises:
    KitError: fewer than 1, or JAX already started with fewer.
  """
  if num_devices < 1:
    raise KitError(f'{flag}={num_devices}: need at least 1')
  if 'jax' in sys.modules:
    import jax  # pylint: disable=g-import-not-at-top
    current = len(jax.devices('cpu'))
    if current < num_devices:
      raise KitError(f'cannot make {num_devices} CPU devices: JAX has '
                     f'already started with {current}')
    return
  others = re.sub(rf'{_XLA_FLAG}=\S+', '', os.environ.get('XLA_FLAGS', ''))
  os.environ['XLA_FLAGS'] = f'{others} {_XLA_FLAG}={num_devices}'.strip()
