"""Refusing up front what this machine cannot hold.

A global batch far beyond memory does not fail cleanly: the process grows
until the kernel's out-of-memory killer ends it, or something else on the
machine. So each trainer estimates its peak from the model's shapes, before
training, and refuses with one line; ``--skip_resource_checks`` overrides.
"""
import os

from kit_core.errors import KitError
from kit_core.room import available_memory

# Peak bytes per example over the bytes of its forward pass's tensors
# (forward_bytes): what the backward pass keeps and makes, and oneDNN's
# buffers, less what is freed on the way. Below 1 for the kit's CNN in both
# halves (README, "Resource checks"); 1.5 stays on the safe side.
PEAK_PER_ACTIVATION = 1.5
# The part of the available memory a job may plan to use.
USABLE_FRACTION = 0.8
# Logical CPU devices: each replica's step is traced into the function, so
# tracing time and memory grow with them; beyond this it stops being a
# simulation of TPU cores and starts being a hang.
MAX_CPU_DEVICES = 64
_SKIP = 'or pass --skip_resource_checks to try anyway'


def _gib(count: float) -> str:
  return f'{count / 2**30:.1f} GiB'


def check_memory(bytes_per_example: int, global_batch: int,
                 available: int | None = None) -> None:
  """Raises KitError when a training step at global_batch would need more
  than USABLE_FRACTION of the available memory.

  Args:
    bytes_per_example: forward_bytes of the model.
    global_batch: examples per step, over all replicas of this machine.
    available: bytes free; None: read from the system (no check if unknown).
  """
  available = available_memory() if available is None else available
  if available is None:
    return
  need = int(bytes_per_example * PEAK_PER_ACTIVATION * global_batch)
  if need > USABLE_FRACTION * available:
    fits = int(USABLE_FRACTION * available //
               (bytes_per_example * PEAK_PER_ACTIVATION))
    raise KitError(
        f'--batch_size={global_batch} needs about {_gib(need)} of memory by '
        f'the model\'s shapes, and {_gib(available)} is available; use '
        f'--batch_size={max(fits, 1)} or less, {_SKIP}')


def check_cpu_devices(count: int) -> None:
  """Raises KitError for more logical CPU devices than MAX_CPU_DEVICES."""
  if count > MAX_CPU_DEVICES:
    raise KitError(
        f'--num_cpu_devices={count}: more than {MAX_CPU_DEVICES} logical CPU '
        f'devices only slow tracing down (this machine has '
        f'{os.cpu_count()} cores); use {MAX_CPU_DEVICES} or fewer, {_SKIP}')


def forward_bytes(graph) -> int:
  """The bytes of one example's forward pass: the floating-point tensors of
  `graph` (a tf.Graph built for a batch of 1) that lead with that batch; weights do
  not."""
  total = 0
  for op in graph.get_operations():
    for output in op.outputs:
      shape = output.shape
      if (output.dtype.is_floating and shape.rank and shape.rank >= 2 and
          shape.is_fully_defined() and shape[0] == 1):
        total += shape.num_elements() * output.dtype.size
  return total
