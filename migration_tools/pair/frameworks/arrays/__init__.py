"""A port as arrays (``array_port.ArrayPort``): built by its own ``make`` on
a replica count, seeded by its own code, its dropout off (``make(...,
dropout=False)``) and never aligned with TF 1's. The ports on arrays today
are JAX's (Keras 3 on JAX, plain JAX with optax): their replica counts are
placed over JAX's devices, host CPU devices where the accelerator has fewer
(ran_on.py), and the precision is read from their programs' HLO."""
from __future__ import annotations

from typing import Any

from kit_core import progress as progress_lib
from kit_core.errors import KitError
from migration_tools.pair.frameworks.arrays import port as array_port
from migration_tools.pair import port_draws
from migration_tools.pair import precision as precision_lib
from migration_tools.pair.frameworks.arrays import ran_on
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks import tpu as tpu_lib


class Arrays(base.Framework):
  """A port on JAX, or any framework, handing the harness numpy arrays."""

  name = 'arrays'
  contract = 'migration_tools.pair.array_port.ArrayPort (a port on JAX)'
  title = 'JAX'
  seeds_with = 'its own make (the kit gives it no seed)'

  def accepts(self, port: Any) -> bool:
    return isinstance(port, array_port.ArrayPort)

  def check(self, port: Any, where: str) -> array_port.ArrayPort:
    return array_port.check_array_port(port, where)

  def describe(self, port: Any) -> str:
    return port.framework

  def placements(self, counts: list[int], progress: progress_lib.Progress,
                 skipped: dict[str, str]) -> dict[str, Any]:
    placed = {}
    for count, placement in ran_on.jax_placements(counts).items():
      if isinstance(placement, ran_on.NoDevices):
        progress.line(str(placement))
        skipped[base.label(count)] = str(placement)
        continue
      if placement.note:
        progress.line(placement.note)
      placed[base.label(count)] = count  # The port places itself.
    if not placed:
      raise KitError('no replica count can run here: the first needs one JAX '
                     'device, and JAX has none')
    return placed

  def runner(self, port: Any, placement: Any, params: dict, batches: list,
             dots: precision_lib.Dots | None = None, dropout: bool = False):
    from migration_tools.pair.frameworks.arrays import runner as array_runner  # pylint: disable=g-import-not-at-top
    return array_runner.ArrayRunner(port, placement, params, batches,
                                    dots=dots, dropout=dropout)

  def dots(self, emulate: precision_lib.Rounding | None = None) -> precision_lib.Dots:
    from migration_tools.pair.frameworks.arrays import precision as arrays_precision  # pylint: disable=g-import-not-at-top
    return arrays_precision.JaxDots(emulate)

  def seeded(self, seed: int):
    del seed  # The port's make seeds its own initialisation.
    # Its steps' own draws are named (pair/port_draws.py).
    from migration_tools.pair.frameworks.arrays import dropout  # pylint: disable=g-import-not-at-top
    return port_draws.recording(dropout.watching, dropout.REMEDY)

  # The dropout check hands the legacy masks to the port's bernoulli draws.
  takes_masks = True

  def masks_given(self, masks: list, names: list[str]):
    from migration_tools.pair.frameworks.arrays import dropout  # pylint: disable=g-import-not-at-top
    return dropout.given(masks, names)

  def dropout_at_inference(self):
    from migration_tools.pair.frameworks.arrays import dropout  # pylint: disable=g-import-not-at-top
    return dropout.watched()

  def dropout_unaligned(self) -> str:
    return ('the port draws its dropout masks from its own framework\'s '
            'random numbers, which cannot be aligned with TF 1\'s random '
            'ops; the steps are compared without dropout')

  # What its port's programs are, and how they are compiled for a TPU (the
  # tpu_ready lines): an adapter built on this one names its own.
  programs_are = 'ArrayPort.programs: its jit-compiled step and predict'
  compiling = ('compiling the step and predict with jax.jit, lowering them '
               'for a TPU')

  def tpu_ready(self, port: Any, params: dict, batches: list,
                progress: progress_lib.Progress) -> tpu_lib.Readiness:
    if port.programs is None:
      return tpu_lib.Readiness(
          tpu_lib.NOT_CHECKED, f'the port gives no programs ({self.programs_are}) '
          'to compile for a TPU')
    progress.now(f'tpu_ready: {self.compiling}')
    model = port.make(dict(params), 1, False)
    features, labels = batches[0]
    return self.readiness(port.programs(model, features, labels))

  def readiness(self, programs: dict) -> tpu_lib.Readiness:
    """What a TPU would refuse in the port's programs, {part: (function,
    arguments)}: jax.jit and jax.export's reading (tpu.py)."""
    from migration_tools.pair.frameworks.arrays import tpu as arrays_tpu  # pylint: disable=g-import-not-at-top
    return arrays_tpu.check(programs)

  def save_state(self, port: Any, model: Any, directory: str) -> str:
    # The port's own format (the kit's: Keras 3's .weights.h5), else named
    # arrays.
    return (port.save_weights or array_port.write_state)(model, directory)

  def load_state(self, port: Any, model: Any, path: str) -> None:
    (port.load_weights or array_port.read_state)(model, path)

  def ran_on(self, port: Any, runner: Any, placement: Any,
             counts: list[int], batches: list) -> dict[str, Any]:
    del placement  # The replica counts' placements are read afresh.
    programs = None
    if port.programs is not None:
      features, labels = batches[0]
      programs = port.programs(runner.model, features, labels)
    return ran_on.describe_jax(ran_on.jax_placements(counts), programs)


base.register(Arrays())
