"""Where a port on arrays (JAX) runs: the devices its replicas are placed
on, and the platform, devices, versions and arithmetic precision the report
names (runs_on.line writes it as one line).

JAX multiplies float32 matrices in TF32 on recent GPUs and in one bfloat16
pass on TPUs unless the program asks for more, so the precision is read from
the program itself: the lowered HLO's ``operand_precision`` or ``algorithm``
on each dot and convolution, and their operand types.

Replica counts beyond the accelerator's devices run on host CPU devices in
the same process (``replica_devices``): a bundle recorded on 1, 2 and 4
replicas is still checked whole on a machine with one GPU.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Sequence

from kit_core.errors import KitError
from migration_tools.pair.runs_on import replicas_label
from migration_tools.pair.runs_on import versions


class NoDevices(KitError):
  """A replica count that neither the default backend nor the host CPU can
  hold: its checks are skipped, with this line saying how to run them."""


@dataclasses.dataclass(frozen=True)
class Placement:
  """The devices of one replica count, and why, when not the default's."""
  devices: tuple
  note: str = ''

  @property
  def platform(self) -> str:
    return self.devices[0].platform


def choose_devices(count: int, default: Sequence, host: Sequence
                   ) -> Placement:
  """count replicas on the default backend's devices, else on the host's.

  Args:
    count: the replica count.
    default: the default backend's devices (jax.devices()).
    host: the host CPU devices (jax.devices('cpu')).

  Raises:
    NoDevices: neither has count devices.
  """
  if len(default) >= count:
    return Placement(tuple(default[:count]))
  platform = default[0].platform if default else 'default backend'
  if len(host) >= count:
    return Placement(tuple(host[:count]), (
        f'{replicas_label(count)}: JAX\'s {platform} has {len(default)} '
        f'device{"s" if len(default) != 1 else ""}: run on {count} host CPU '
        'devices'))
  raise NoDevices(
      f'{replicas_label(count)}: skipped: JAX\'s {platform} has {len(default)} '
      f'device{"s" if len(default) != 1 else ""} and the host '
      f'{len(host)} CPU device{"s" if len(host) != 1 else ""}; run with '
      f'XLA_FLAGS=--xla_force_host_platform_device_count={count} set before '
      'JAX starts (migration-compare sets it unless JAX started earlier), or '
      f'on a machine with {count} accelerators')


def replica_devices(count: int) -> list:
  """The JAX devices a port on count replicas places its batch over: the
  default backend's first count, else count host CPU devices (a machine
  with fewer accelerators than replicas). What an ArrayPort's ``make``
  should use in place of ``jax.devices()[:count]``.

  Raises:
    NoDevices: neither has count devices.
  """
  import jax  # pylint: disable=g-import-not-at-top
  return list(choose_devices(count, jax.devices(), _host_devices()).devices)


def _host_devices() -> list:
  import jax  # pylint: disable=g-import-not-at-top
  try:
    return jax.devices('cpu')
  except RuntimeError:  # JAX_PLATFORMS left the CPU out.
    return []


def jax_placements(counts: Sequence[int]) -> dict[int, Placement | NoDevices]:
  """Each replica count's placement on this machine, or why it has none."""
  import jax  # pylint: disable=g-import-not-at-top
  default, host = jax.devices(), _host_devices()
  placed = {}
  for count in counts:
    try:
      placed[count] = choose_devices(count, default, host)
    except NoDevices as e:
      placed[count] = e
  return placed


# What a float32 dot or convolution computes in, by platform and by the
# precision the program asks for (jax.lax.Precision; XLA's operand
# precision). XLA:CPU computes float32 whatever is asked; on GPUs DEFAULT
# and HIGH allow TF32 (Ampere and later); on TPUs DEFAULT is one bfloat16
# pass, HIGH three, HIGHEST six (float32's precision).
_FLOAT32_AS = {
    'cpu': {'default': 'float32', 'high': 'float32', 'highest': 'float32'},
    'gpu': {'default': 'tf32', 'high': 'tf32', 'highest': 'float32'},
    'tpu': {'default': 'bfloat16 (1 pass)', 'high': 'bfloat16 (3 passes)',
            'highest': 'float32 (6 bfloat16 passes)'},
}
_OPS = {'dot': 'matmul', 'convolution': 'convolution'}
# An HLO instruction, 'name = f32[2,10]{1,0} dot(a, b), ...', with or without
# '%' before names: its name, result type, opcode and operands.
_INSTRUCTION = re.compile(
    r'^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<dtype>[a-z]+\d*)\['
    r'[^\]]*\](?:\{[^}]*\})?\s+(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)'
    r'(?P<rest>.*)$')
_PRECISION = re.compile(r'operand_precision=\{(\w+),(\w+)\}')
_ALGORITHM = re.compile(r'algorithm=(\w+)')
_DTYPES = {'bf16': 'bfloat16', 'f16': 'float16', 'f64': 'float64',
           'f8e4m3fn': 'float8_e4m3fn', 'f8e5m2': 'float8_e5m2'}


def _platform_family(platform: str) -> str:
  return 'gpu' if platform in ('gpu', 'cuda', 'rocm') else platform


def hlo_precision(hlo: str, platform: str) -> dict[str, str]:
  """{'matmul': ..., 'convolution': ...}: what each kind of op computes in
  on platform, read from HLO text: its operands' types and the precision
  or algorithm it asks for (where the ops of a kind differ, each answer
  with its count of ops)."""
  return _as_text(_hlo_counts(hlo, platform))


def _hlo_counts(hlo: str, platform: str) -> dict[str, collections.Counter]:
  dtypes, ops = {}, []
  for line in hlo.splitlines():
    match = _INSTRUCTION.match(line)
    if match:
      dtypes[match['name']] = match['dtype']
      if match['op'] in _OPS:
        ops.append(match)
  found: dict[str, collections.Counter] = {}
  family = _platform_family(platform)
  for match in ops:
    operands = [dtypes.get(name.strip().lstrip('%'), match['dtype'])
                for name in match['operands'].split(',')]
    found.setdefault(_OPS[match['op']], collections.Counter())[
        _computes_in(operands, match['rest'], family)] += 1
  return found


def _as_text(found: dict[str, collections.Counter]) -> dict[str, str]:
  """Each kind's answers as text, matmul first."""
  found = {kind: found[kind] for kind in _OPS.values() if kind in found}
  return {kind: ', '.join(
      answer if len(counts) == 1 else
      f'{answer} ({n} op{"s" if n != 1 else ""})'
      for answer, n in counts.most_common()) for kind, counts in found.items()}


def _computes_in(operands: list[str], rest: str, family: str) -> str:
  algorithm = _ALGORITHM.search(rest)
  if algorithm:
    return f'{algorithm[1]} algorithm'
  narrow = [d for d in operands if d != 'f32']
  if narrow:
    return _DTYPES.get(narrow[0], narrow[0])
  precision = _PRECISION.search(rest)
  asked = max((precision[1], precision[2]) if precision else ('default',),
              key=('default', 'high', 'highest').index)
  table = _FLOAT32_AS.get(family)
  if table is None:
    return f'float32 at {asked.upper()} precision on {family}'
  return table[asked]


def program_precision(programs: dict, platform: str) -> dict[str, str]:
  """What the port's jit-compiled programs ({part: (function, arguments)},
  ArrayPort.programs) compute their matmuls and convolutions in, read from
  their lowered HLO (what the program asks for; the compiled HLO of a GPU
  holds library calls in their place)."""
  merged: dict[str, collections.Counter] = {}
  for function, arguments in programs.values():
    hlo = function.lower(*arguments).as_text(dialect='hlo')
    for kind, counts in _hlo_counts(hlo, platform).items():
      merged.setdefault(kind, collections.Counter()).update(counts)
  return _as_text(merged)


def describe_jax(placements: dict[int, Placement | NoDevices],
                 programs: dict | None) -> dict[str, Any]:
  """The report's 'port_ran_on' for a JAX port: per replica count its
  platform, device kind and count; JAX's matmul setting; the precision read
  from the programs (None: not readable, the port gave no programs)."""
  import jax  # pylint: disable=g-import-not-at-top
  first = next(p for p in placements.values() if isinstance(p, Placement))
  device = first.devices[0]
  where = {replicas_label(count): (str(p) if isinstance(p, NoDevices) else
                              f'{p.platform} ({p.devices[0].device_kind}) '
                              f'x{len(p.devices)}')
           for count, p in placements.items()}
  return {
      'framework': 'jax',
      'platform': device.platform,
      'device_kind': device.device_kind,
      'devices': len(jax.devices()),
      'replicas': where,
      'versions': versions('jax', 'jaxlib', 'keras', 'optax', 'flax',
                            'numpy'),
      'default_matmul_precision': str(
          jax.config.jax_default_matmul_precision or 'default'),
      'precision': (program_precision(programs, device.platform)
                    if programs else {}),
      'precision_from': ('the lowered HLO of the port\'s programs' if programs
                         else 'not read: the port gives no programs'),
  }
