"""The precision a PyTorch port's dots compute in, set from outside the
port: float32 for the checks of its math, or an accelerator's rounding
emulated on the CPU (--emulate_precision).

PyTorch on a CPU computes a float32 matmul or convolution in float32. A
TF32 or bfloat16 device is emulated below autograd, in a TorchDispatchMode:
each aten op that multiplies (mm, addmm, bmm, convolution, their backward
ops, the fused attentions) has its float32 operands rounded as the device's
units round them (to nearest, ties to even: precision.rounded, here in
torch's bitwise ops) before it runs; what an op adds (addmm's input, a
convolution's bias) stays float32, as on the device. The backward pass
runs through the same mode, so the gradients' dots are rounded too.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from migration_tools.pair import precision as precision_lib

# {aten op: the positions of the operands it multiplies}.
_OPERANDS = {
    'mm': (0, 1), 'bmm': (0, 1), 'dot': (0, 1), 'vdot': (0, 1),
    'mv': (0, 1), 'addmm': (1, 2), 'baddbmm': (1, 2), 'addbmm': (1, 2),
    'addmv': (1, 2), '_addmm_activation': (1, 2), 'convolution': (0, 1),
    'convolution_backward': (0, 1, 2),
    '_scaled_dot_product_attention_math': (0, 1, 2),
    '_scaled_dot_product_flash_attention': (0, 1, 2),
    '_scaled_dot_product_flash_attention_for_cpu': (0, 1, 2),
    '_scaled_dot_product_efficient_attention': (0, 1, 2),
    '_scaled_dot_product_cudnn_attention': (0, 1, 2),
}


def round_to(value, rounding: precision_lib.Rounding):
  """A float32 tensor rounded to rounding's mantissa (precision.rounded's
  rule); any other value as it is."""
  import torch  # pylint: disable=g-import-not-at-top
  if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
    return value
  shift = 23 - rounding.mantissa_bits
  bits = value.view(torch.int32)
  # A finite value's magnitude bits cannot carry into the sign bit.
  bits = bits + ((1 << (shift - 1)) - 1) + ((bits >> shift) & 1)
  bits = bits & ~((1 << shift) - 1)
  return torch.where(torch.isfinite(value), bits.view(torch.float32), value)


def _mode(rounding: precision_lib.Rounding, dots: precision_lib.Dots):
  from torch.utils import _python_dispatch  # pylint: disable=g-import-not-at-top

  class RoundingDots(_python_dispatch.TorchDispatchMode):
    """Rounds the operands of every dot that runs in it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
      positions = _OPERANDS.get(func.overloadpacket.__name__)
      if positions is not None:
        dots.rounded += 1
        args = tuple(round_to(a, rounding) if i in positions else a
                     for i, a in enumerate(args))
      return func(*args, **(kwargs or {}))

  return RoundingDots()


@contextlib.contextmanager
def highest() -> Iterator[None]:
  """float32 in matmuls and cuDNN's convolutions (no TF32), as torch's
  settings were on the way out."""
  import torch  # pylint: disable=g-import-not-at-top
  matmul, convolution = (torch.get_float32_matmul_precision(),
                         torch.backends.cudnn.allow_tf32)
  torch.set_float32_matmul_precision('highest')
  torch.backends.cudnn.allow_tf32 = False
  try:
    yield
  finally:
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = convolution


class TorchDots(precision_lib.Dots):
  """A PyTorch port's dots: float32 for its math; as deployed, torch's
  settings as they were, or the rounding emulated."""

  def highest(self) -> contextlib.AbstractContextManager:
    return highest()

  def emulation(self, rounding: precision_lib.Rounding
                ) -> contextlib.AbstractContextManager:
    return _mode(rounding, self)
