"""An accelerator's rounding of a Keras-on-TensorFlow port's dots, emulated
on the kit's CPU devices (--emulate_precision).

TensorFlow on a CPU computes a float32 matmul or convolution in float32, and
has no op that rounds to a narrower mantissa. So each op wrapper a matmul,
batched matmul, einsum or convolution goes through (gen_math_ops.mat_mul,
gen_nn_ops.conv2d, ... looked up by module attribute at each call, by
tf.matmul, tf.nn.convolution, tf.einsum and their gradients alike) is
replaced, while emulating, by one that first rounds each float32 operand as
a TF32 or bfloat16 unit does (to nearest, ties to even: precision.rounded,
here in TensorFlow's bitwise ops), the products then summed in float32.

Eager calls are rounded as they run; a tf.function traced inside is traced
rounded. A program traced before runs as traced: the tally (Dots.rounded)
tells device_drift whether the emulation reached the port's code.
"""
# migration-scan: skip-file (it replaces TensorFlow's op wrappers on purpose)
from __future__ import annotations

import contextlib
from typing import Iterator

from kit_core.lazy import tensorflow as tf
from migration_tools.pair import precision as precision_lib

# {module: op wrappers} whose float32 operands a device's dot units round:
# the forward ops and the convolutions' gradients (a matmul's gradient is
# a matmul).
_DOT_OPS = {
    'gen_math_ops': ('mat_mul', 'batch_mat_mul', 'batch_mat_mul_v2',
                     'batch_mat_mul_v3'),
    'gen_nn_ops': ('conv2d', 'conv3d', 'conv', 'depthwise_conv2d_native',
                   'conv2d_backprop_input', 'conv2d_backprop_filter',
                   'conv3d_backprop_input_v2', 'conv3d_backprop_filter_v2',
                   'depthwise_conv2d_native_backprop_input',
                   'depthwise_conv2d_native_backprop_filter'),
    'gen_linalg_ops': ('einsum',),
}


def round_to(value, rounding: precision_lib.Rounding):
  """A float32 tensor rounded to rounding's mantissa (precision.rounded's
  rule); any other value as it is."""
  if isinstance(value, (list, tuple)):
    return type(value)(round_to(v, rounding) for v in value)
  if not tf.is_tensor(value) or value.dtype != tf.float32:
    return value
  value = tf.convert_to_tensor(value)
  shift = 23 - rounding.mantissa_bits
  bits = tf.bitcast(value, tf.int32)
  # Two's complement addition is the unsigned one on the bit pattern; a
  # finite value's magnitude bits cannot carry into the sign bit.
  bits += (1 << (shift - 1)) - 1 + tf.bitwise.bitwise_and(
      tf.bitwise.right_shift(bits, shift), 1)
  bits = tf.bitwise.bitwise_and(bits, ~((1 << shift) - 1))
  return tf.where(tf.math.is_finite(value), tf.bitcast(bits, tf.float32),
                  value)


def _modules() -> dict:
  # pylint: disable=g-import-not-at-top
  from tensorflow.python.ops import gen_linalg_ops
  from tensorflow.python.ops import gen_math_ops
  from tensorflow.python.ops import gen_nn_ops
  # pylint: enable=g-import-not-at-top
  return {'gen_math_ops': gen_math_ops, 'gen_nn_ops': gen_nn_ops,
          'gen_linalg_ops': gen_linalg_ops}


@contextlib.contextmanager
def emulated(rounding: precision_lib.Rounding,
             dots: precision_lib.Dots) -> Iterator[None]:
  """Every float32 dot run or traced in it has its operands rounded to
  rounding's format first; dots.rounded counts them."""
  replaced = []
  for module_name, module in _modules().items():
    for name in _DOT_OPS[module_name]:
      original = getattr(module, name, None)
      if original is None:  # Not in this TensorFlow.
        continue

      def rounding_op(*args, _op=original, **kwargs):
        dots.rounded += 1
        return _op(*round_to(args, rounding),
                   **{k: round_to(v, rounding) for k, v in kwargs.items()})

      setattr(module, name, rounding_op)
      replaced.append((module, name, original))
  try:
    yield
  finally:
    for module, name, original in replaced:
      setattr(module, name, original)


class TensorFlowDots(precision_lib.Dots):
  """A Keras port's dots on the kit's CPU devices: float32 for its math;
  as deployed, float32 too, or the rounding emulated."""

  def emulation(self, rounding: precision_lib.Rounding
                ) -> contextlib.AbstractContextManager:
    return emulated(rounding, self)
