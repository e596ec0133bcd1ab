"""Logical CPU devices: N replicas on one CPU, as N TPU cores would be."""
import tensorflow as tf

from kit_core.errors import KitError


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
