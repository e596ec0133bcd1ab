"""The precision a JAX port's dots compute in, set from outside the port:
the highest (float32) for the checks of its math, or an accelerator's
rounding emulated on the CPU.

XLA:CPU computes a float32 dot in float32 whatever precision a program asks
for, so a TF32 or bfloat16 device is emulated by rounding the operands of
every ``dot_general`` and ``conv_general_dilated`` the port's programs bind,
as the device's units do (jax.lax.reduce_precision), the products summed in
float32. The rounding is put in while the programs are traced: jit's caches
are cleared on the way in and out, so that no program traced one way runs
the other."""
from __future__ import annotations

import contextlib
from typing import Iterator

from migration_tools.pair import precision as precision_lib


def _dot_primitives() -> list:
  from jax._src.lax import convolution  # pylint: disable=g-import-not-at-top
  from jax._src.lax import lax  # pylint: disable=g-import-not-at-top
  return [lax.dot_general_p, convolution.conv_general_dilated_p]


def highest() -> contextlib.AbstractContextManager:
  """Every dot the port traces in it asks for float32's precision (on a
  GPU no TF32, on a TPU six bfloat16 passes), unless the port's code names
  a precision of its own."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.default_matmul_precision('highest')


@contextlib.contextmanager
def emulated(rounding: precision_lib.Rounding,
             dots: precision_lib.Dots | None = None) -> Iterator[None]:
  """Every float32 dot and convolution traced in it has its operands
  rounded to rounding's format first; dots.rounded counts them."""
  dots = dots or precision_lib.Dots()
  import jax  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def rounded(value):
    if getattr(value, 'dtype', None) != jnp.float32:
      return value
    return lax.reduce_precision(value, rounding.exponent_bits,
                                rounding.mantissa_bits)

  primitives = _dot_primitives()
  for primitive in primitives:
    bind = primitive.bind

    def rounding_bind(*args, _bind=bind, **params):
      dots.rounded += 1
      return _bind(*[rounded(a) for a in args], **params)

    primitive.bind = rounding_bind
  jax.clear_caches()
  try:
    yield
  finally:
    for primitive in primitives:
      del primitive.bind  # The class's bind again.
    jax.clear_caches()


class JaxDots(precision_lib.Dots):
  """A JAX port's dots: JAX's highest precision for its math; as deployed,
  its device's default, or the rounding emulated."""

  def highest(self) -> contextlib.AbstractContextManager:
    return highest()

  def emulation(self, rounding: precision_lib.Rounding
                ) -> contextlib.AbstractContextManager:
    return emulated(rounding, self)
