"""What a device rounds a float32 matmul's or convolution's operands to, and
the state that measures how much a model's outputs move with such rounding.

An accelerator computes float32 dots at a narrower precision by default:
TF32 on NVIDIA GPUs since Ampere (JAX's default precision; TensorFlow's
default too), one bfloat16 pass on TPUs (JAX's default). Each operand is
rounded to its mantissa, products are summed in float32. The device-drift
verdict (compare/checks/device_drift.py) compares the port at that
precision with itself at the highest, and scales the precision's unit
roundoff by what the model does with it: its outputs' movement when every
kernel is perturbed by that much (``perturbed``).
"""
from __future__ import annotations

import dataclasses

import contextlib
import re

import numpy as np


@dataclasses.dataclass(frozen=True)
class Rounding:
  """A float format the operands of a dot are rounded to.

  name: as the report and --emulate_precision say it ('tf32', 'bf16').
  mantissa_bits: its explicit mantissa bits (float32's are 23).
  exponent_bits: its exponent bits (8 for each here: float32's range).
  """
  name: str
  mantissa_bits: int
  exponent_bits: int = 8

  @property
  def unit(self) -> float:
    """Its unit roundoff: the largest relative error of rounding to it
    (2^-11 for TF32, 2^-8 for bfloat16)."""
    return 2.0 ** -(self.mantissa_bits + 1)


TF32 = Rounding('tf32', 10)
BF16 = Rounding('bf16', 7)
# Three bfloat16 passes (a TPU at HIGH): about 16 bits of mantissa.
BF16_3 = Rounding('bf16 (3 passes)', 16)
# What --emulate_precision takes.
EMULATED = {r.name: r for r in (TF32, BF16)}

# runs_on's answers ('tf32', 'bfloat16 (1 pass)', ...) for what a port's
# dots compute in, by the rounding they mean; float32 is none.
_ANSWERS = {'tf32': TF32, 'bfloat16 (1 pass)': BF16, 'bfloat16': BF16,
            'bfloat16 (3 passes)': BF16_3,
            'float16': Rounding('float16', 10, 5)}
# An answer's count of ops, where a kind's ops differ: ' (3 ops)'.
_COUNT = re.compile(r' \(\d+ ops?\)$')


def of_answers(precision: dict[str, str]) -> Rounding | None:
  """The coarsest rounding among runs_on's answers ({'matmul': 'tf32',
  'convolution': 'tf32 (3 ops), float32 (1 op)'}); None where every dot
  computes in float32."""
  found = [_ANSWERS.get(_COUNT.sub('', answer))
           for text in precision.values() for answer in text.split(', ')]
  return min((r for r in found if r is not None),
             key=lambda r: r.mantissa_bits, default=None)


def rounded(values, rounding: Rounding) -> np.ndarray:
  """float32 values rounded to rounding's mantissa, to nearest, ties to
  even, as a device's dot units round their operands: the reference that
  each framework's emulation (frameworks/*_precision.py) is tested against.
  Infinities and NaNs are kept; a value beyond the format's largest
  becomes an infinity."""
  values = np.asarray(values, np.float32)
  shift = np.uint64(23 - rounding.mantissa_bits)
  one = np.uint64(1)
  bits = np.atleast_1d(values).view(np.uint32).astype(np.uint64)
  bits += (one << (shift - one)) - one + ((bits >> shift) & one)
  bits &= ~((one << shift) - one)
  out = bits.astype(np.uint32).view(np.float32).reshape(values.shape)
  return np.where(np.isfinite(values), out, values)


def perturbed(state: dict[str, np.ndarray], names, rounding: Rounding,
              seed: int = 0) -> dict[str, np.ndarray]:
  """state with each variable of names (the kernels and embeddings: a dot's
  operands) multiplied by 1 + e, e drawn uniformly within the rounding's
  unit roundoff per element: an error of the size the device's rounding of
  them makes, in no direction a rounding would prefer."""
  generator = np.random.default_rng(seed)
  moved = dict(state)
  for name in sorted(names):
    value = np.asarray(state[name])
    noise = generator.uniform(-rounding.unit, rounding.unit, value.shape)
    moved[name] = (value * (1.0 + noise)).astype(value.dtype)
  return moved


def one_ulp_apart(state: dict[str, np.ndarray], names,
                  seed: int = 0) -> dict[str, np.ndarray]:
  """state with every element of each float variable of names moved one
  unit in the last place of its own format, up or down at random: the
  smallest change its storage allows, the size of one rounding of it
  (compare/noise.py measures a forward pass's own rounding noise by it)."""
  generator = np.random.default_rng(seed)
  moved = dict(state)
  for name in sorted(names):
    value = np.asarray(state[name])
    if value.dtype.kind != 'f':
      continue
    up = generator.integers(0, 2, value.shape).astype(bool)
    moved[name] = np.where(up, np.nextafter(value, value.dtype.type(np.inf)),
                           np.nextafter(value, value.dtype.type(-np.inf)))
  return moved


class Dots:
  """How a framework sets the precision its port's dots compute in: at the
  highest for the checks of the port's math, as deployed for the device's
  drift (emulated: the rounding --emulate_precision declared, else None).
  rounded: how many dots an emulation has rounded the operands of so far
  (as traced, on JAX): device_drift tells by it that the emulation reached
  the port's code, not a program compiled before it. This one is the
  framework's whose ports compute float32 wherever the kit runs them, and
  that cannot emulate a rounding."""

  emulated: Rounding | None
  rounded: int

  def __init__(self, emulate: Rounding | None = None):
    self.emulated = emulate
    self.rounded = 0

  def highest(self) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()

  def deployed(self) -> contextlib.AbstractContextManager:
    """The emulation of the rounding declared, or the device's own."""
    return (self.emulation(self.emulated) if self.emulated
            else contextlib.nullcontext())

  def emulation(self, rounding: Rounding) -> contextlib.AbstractContextManager:
    """A scope in which every dot's operands are rounded to rounding, each
    counted in ``rounded``: a framework's that can emulate one."""
    raise NotImplementedError(f'{type(self).__name__} emulates no rounding')
