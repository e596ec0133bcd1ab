"""Where a Keras port on TensorFlow runs: the report's 'port_ran_on'
(runs_on.line writes it as one line). A TensorFlow graph records no
precision of its own: it is taken from TensorFlow's settings (TF32 on GPUs
unless disabled) and the model's compute dtype."""
from __future__ import annotations

from typing import Any, Sequence

from migration_tools.pair.runs_on import versions


def describe_tensorflow(devices: Sequence[str], compute_dtype: str
                        ) -> dict[str, Any]:
  """The report's 'port_ran_on' for a Keras port on TensorFlow: its first
  strategy's devices (their kind, and how many of that kind TensorFlow
  has), and the precision from TensorFlow's settings (TF32 on GPUs unless
  disabled) and the model's compute dtype: a TensorFlow graph records no
  precision of its own."""
  from kit_core.lazy import tensorflow as tf  # pylint: disable=g-import-not-at-top
  kind = 'GPU' if any('GPU' in d.upper() for d in devices) else 'CPU'
  tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
  if compute_dtype != 'float32':
    precision = compute_dtype
  else:
    precision = 'tf32' if kind == 'GPU' and tf32 else 'float32'
  return {
      'framework': 'tensorflow',
      'platform': kind.lower(),
      'device_kind': kind,
      'devices': len(tf.config.list_logical_devices(kind)),
      'replicas': {},
      'versions': versions('tensorflow', 'keras', 'numpy'),
      'precision': {'matmul': precision, 'convolution': precision},
      'precision_from': ('TensorFlow\'s TF32 setting '
                         f'({"on" if tf32 else "off"}) and the model\'s '
                         f'compute dtype ({compute_dtype})'),
  }
