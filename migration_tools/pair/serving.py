"""The served-predictions check's two halves: inputs for a legacy serving
receiver's tensors, and a SavedModel's serving_default called on them."""
import numpy as np
import tensorflow as tf

from kit_core.errors import KitError
from migration_tools.pair import side

# Served inputs: at most this many examples.
SERVED_EXAMPLES = 512


def inputs(receiver: dict[str, tf.TensorSpec], data: side.Data,
           seed: int = 0) -> dict[str, np.ndarray]:
  """Inputs for the serving signatures: a receiver tensor named like a
  feature (or the one tensor of single-tensor features) takes the data's
  values when its shape and dtype allow; others are drawn from its spec
  (uint8 over [0, 255], other integers 0 or 1, floats over [0, 1))."""
  features = [f for f, _ in data.batches]
  examples = min(SERVED_EXAMPLES, len(features) * data.global_batch)
  rng = np.random.default_rng(seed)
  values = {}
  for name, spec in receiver.items():
    inner = spec.shape[1:]
    source = None
    if isinstance(features[0], dict) and name in features[0]:
      source = np.concatenate([f[name] for f in features])
    elif not isinstance(features[0], dict) and len(receiver) == 1:
      source = np.concatenate(features)
    if (source is not None and inner.is_compatible_with(source.shape[1:]) and
        np.dtype(spec.dtype.as_numpy_dtype) == source.dtype):
      values[name] = source[:examples].astype(spec.dtype.as_numpy_dtype)
      continue
    if not inner.is_fully_defined():
      raise KitError(f'the serving receiver\'s {name} has the shape '
                     f'{spec.shape} and no feature of that name to take values'
                     ' from; name it as the feature it becomes')
    shape = [examples, *inner.as_list()]
    dtype = spec.dtype
    if dtype == tf.uint8:
      value = rng.integers(0, 256, shape)
    elif dtype.is_integer:
      value = rng.integers(0, 2, shape)
    elif dtype.is_floating:
      value = rng.random(shape)
    elif dtype == tf.bool:
      value = rng.random(shape) < 0.5
    else:
      raise KitError(f'cannot make values for the serving receiver\'s {name} '
                     f'({dtype.name}) from its spec; name it as the feature '
                     'it becomes, so that the data gives them')
    values[name] = value.astype(dtype.as_numpy_dtype)
  return values


def serve(path: str, values: dict) -> dict:
  """serving_default of the SavedModel at path, called on values by name.

  Raises:
    KitError: its inputs are not named as the legacy receiver's.
  """
  signature = tf.saved_model.load(path).signatures['serving_default']
  expected = set(signature.structured_input_signature[1])
  if expected != set(values):
    raise KitError(f'the SavedModel at {path} takes {sorted(expected)} where '
                   f'the legacy receiver gives {sorted(values)}: name the '
                   'serving inputs as the legacy receiver tensors')
  outputs = signature(**{k: tf.constant(v) for k, v in values.items()})
  return {k: v.numpy() for k, v in outputs.items()}
