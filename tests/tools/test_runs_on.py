"""Where a port runs (migration_tools/pair/runs_on.py, and a JAX port's
migration_tools/pair/frameworks/arrays/ran_on.py): the devices of each
replica count, and the precision read from HLO text, on every profile (no
framework needed: devices are stand-ins, HLO is text); and, where JAX is
installed, the precision read from a real program's HLO."""
import dataclasses
import importlib.util

import pytest

from migration_tools.pair import runs_on
from migration_tools.pair.frameworks.arrays import ran_on

needs_jax = pytest.mark.skipif(importlib.util.find_spec('jax') is None,
                               reason='reads a JAX program (jax profile)')


@dataclasses.dataclass(frozen=True)
class Device:
  platform: str
  id: int
  device_kind: str = 'stand-in'


def _devices(platform, count):
  return [Device(platform, i) for i in range(count)]


def test_replicas_go_to_the_accelerator_while_it_has_enough():
  placed = ran_on.choose_devices(1, _devices('gpu', 1), _devices('cpu', 4))
  assert placed.devices == (Device('gpu', 0),) and placed.note == ''


def test_more_replicas_than_accelerators_run_on_host_cpus_in_one_line():
  placed = ran_on.choose_devices(2, _devices('gpu', 1), _devices('cpu', 4))
  assert placed.devices == tuple(_devices('cpu', 2))
  assert placed.note == ("2 replicas: JAX's gpu has 1 device: run on 2 host "
                         'CPU devices')


def test_a_count_no_device_holds_is_skipped_saying_how_to_run_it():
  with pytest.raises(ran_on.NoDevices) as e:
    ran_on.choose_devices(4, _devices('gpu', 1), [])
  assert str(e.value).startswith("4 replicas: skipped: JAX's gpu has 1 "
                                 'device and the host 0 CPU devices; run '
                                 'with XLA_FLAGS=--xla_force_host_platform_'
                                 'device_count=4')
  assert '\n' not in str(e.value)


# Lowered HLO as jax's as_text(dialect='hlo') prints it, and compiled HLO
# (names with '%'), each a conv and a dot.
_LOWERED = """
  x.1 = f32[2,8,8,1]{3,2,1,0} parameter(0)
  w.1 = f32[3,3,1,4]{3,2,1,0} parameter(1)
  conv.1 = f32[2,8,8,4]{3,2,1,0} convolution(x.1, w.1), window={size=3x3}, dim_labels=b01f_01io->b01f{PRECISION}
  r.1 = f32[2,256]{1,0} reshape(conv.1)
  k.1 = f32[256,10]{1,0} parameter(2)
  ROOT dot.1 = f32[2,10]{1,0} dot(r.1, k.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}{PRECISION}
"""


@pytest.mark.parametrize('asked, platform, expected', [
    ('', 'cpu', 'float32'),
    (', operand_precision={highest,highest}', 'cpu', 'float32'),
    ('', 'gpu', 'tf32'),
    ('', 'cuda', 'tf32'),
    (', operand_precision={high,high}', 'gpu', 'tf32'),
    (', operand_precision={highest,highest}', 'gpu', 'float32'),
    ('', 'tpu', 'bfloat16 (1 pass)'),
    (', operand_precision={default,high}', 'tpu', 'bfloat16 (3 passes)'),
    (', operand_precision={highest,highest}', 'tpu',
     'float32 (6 bfloat16 passes)'),
])
def test_the_precision_follows_the_platform_and_what_the_program_asks(
    asked, platform, expected):
  hlo = _LOWERED.replace('{PRECISION}', asked)
  assert ran_on.hlo_precision(hlo, platform) == {'matmul': expected,
                                                  'convolution': expected}


def test_narrow_operands_and_algorithms_are_read_as_such():
  hlo = """
  %a = bf16[2,4]{1,0} parameter(0)
  %b = bf16[4,3]{1,0} parameter(1)
  %d = f32[2,3]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %c = f32[2,3]{1,0} parameter(2)
  %e = f32[3,3]{1,0} parameter(3)
  ROOT %f = f32[2,3]{1,0} dot(%c, %e), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_tf32_tf32_f32
"""
  assert ran_on.hlo_precision(hlo, 'gpu') == {
      'matmul': 'bfloat16 (1 op), dot_tf32_tf32_f32 algorithm (1 op)'}


def test_the_line_names_platform_devices_versions_and_precision():
  line = runs_on.line({
      'platform': 'gpu', 'device_kind': 'NVIDIA H100', 'devices': 1,
      'replicas': {'1 replica': 'gpu (NVIDIA H100) x1',
                   '2 replicas': 'cpu (cpu) x2'},
      'versions': {'jax': '0.12.0.1', 'jaxlib': '0.12.0.1', 'numpy': '2'},
      'precision': {'matmul': 'tf32', 'convolution': 'tf32'},
      'precision_from': 'the lowered HLO of the port\'s programs'})
  assert line == ('Ran on: gpu (NVIDIA H100), 1 device (cpu (cpu) x2); jax '
                  '0.12.0.1, jaxlib 0.12.0.1; matmul tf32, convolution '
                  "tf32 (the lowered HLO of the port's programs)")


@needs_jax
def test_a_jax_programs_precision_is_read_from_its_hlo():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def step(x, w):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), 'SAME',
                                     dimension_numbers=('NHWC', 'HWIO',
                                                        'NHWC'))
    return y.reshape(2, -1) @ jnp.ones((256, 10))

  args = (jnp.ones((2, 8, 8, 1)), jnp.ones((3, 3, 1, 4)))
  programs = {'step': (jax.jit(step), args)}
  assert ran_on.program_precision(programs, 'gpu') == {
      'matmul': 'tf32', 'convolution': 'tf32'}
  with jax.default_matmul_precision('highest'):
    programs = {'step': (jax.jit(step), args)}
    assert ran_on.program_precision(programs, 'tpu') == {
        'matmul': 'float32 (6 bfloat16 passes)',
        'convolution': 'float32 (6 bfloat16 passes)'}
