"""JAX's devices, fixed before JAX starts: N replicas on one CPU, as N TPU
cores would be.

XLA makes its CPU devices once, when JAX first asks for them; the number
comes from XLA_FLAGS (``--xla_force_host_platform_device_count``), so it is
set here, before ``import jax``. On a TPU or GPU the flag touches nothing:
the accelerator's own devices are used.
"""
import os
import sys

from kit_core import devices
from kit_core.errors import KitError


def use_jax_backend() -> None:
  """Keras 3 on JAX: set before keras is imported (it reads it once)."""
  backend = os.environ.get('KERAS_BACKEND')
  if 'keras' in sys.modules and backend not in (None, 'jax'):
    raise KitError(f'Keras was loaded with KERAS_BACKEND={backend}; '
                   'migrate_jax runs on jax: unset KERAS_BACKEND')
  os.environ['KERAS_BACKEND'] = 'jax'


def split_cpu(num_devices: int) -> None:
  """num_devices CPU devices for JAX (kit_core.devices.split_xla_cpu).

  Raises:
    KitError: fewer than 1, or JAX already started with another number.
  """
  devices.split_xla_cpu(num_devices)
  if 'jax' in sys.modules:
    import jax  # pylint: disable=g-import-not-at-top
    if len(jax.devices('cpu')) != num_devices:
      raise KitError(f'cannot make {num_devices} CPU devices: JAX has '
                     f'already started with {len(jax.devices("cpu"))}')
