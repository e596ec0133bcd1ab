"""The served-predictions check's two halves: inputs for a legacy serving
receiver's tensors, and a SavedModel's serving_default called on them."""
from __future__ import annotations

import numpy as np

from kit_core import timing
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import side

# Served inputs: at most this many examples.
SERVED_EXAMPLES = 512


def examples(features, count: int) -> np.ndarray:
  """The first count examples of a dict of feature arrays as serialized
  tf.Example protos (floats as float_list, integers and bools as int64_list,
  strings as bytes_list, each flattened): what a parsing receiver
  (build_parsing_serving_input_receiver_fn) takes.

  Raises:
    KitError: the features are one tensor, with no name to give it.
  """
  if not isinstance(features, dict):
    raise KitError('the serving receiver takes strings, and the input_fn\'s '
                   'features are one unnamed tensor, so no tf.Example can be '
                   'made of them: give the receiver\'s inputs '
                   '(--legacy_serving_inputs=module:function)')
  protos = []
  for i in range(count):
    feature = {}
    for name, values in features.items():
      value = np.asarray(values[i]).ravel()
      if value.dtype.kind == 'f':
        feature[name] = tf.train.Feature(float_list=tf.train.FloatList(
            value=value.tolist()))
      elif value.dtype.kind in 'iub':
        feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(
            value=value.astype(np.int64).tolist()))
      else:
        feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v if isinstance(v, bytes) else str(v).encode()
                   for v in value]))
    protos.append(tf.train.Example(features=tf.train.Features(
        feature=feature)).SerializeToString())
  return np.array(protos, dtype=object)


def given(values: dict, receiver: dict[str, tf.TensorSpec],
          where: str) -> dict[str, np.ndarray]:
  """The receiver's inputs a user's function returned, checked against its
  tensors.

  Raises:
    KitError: other names, or values of another rank or kind.
  """
  if not isinstance(values, dict) or set(values) != set(receiver):
    raise KitError(f'{where} returned '
                   f'{sorted(values) if isinstance(values, dict) else type(values).__name__}'
                   f' where the serving receiver takes {sorted(receiver)}: '
                   'return {receiver tensor name: array of examples}')
  checked = {}
  for name, spec in receiver.items():
    dtype = object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype
    value = np.asarray(values[name], dtype=dtype)
    if (spec.shape.rank is not None and value.ndim != spec.shape.rank) or (
        not value.shape[:1] or not value.shape[0]):
      raise KitError(f'{where} gave {name} of shape {list(value.shape)} where '
                     f'the serving receiver takes {spec.shape}: give a batch '
                     'of at least one example')
    checked[name] = value[:SERVED_EXAMPLES]
  return checked


def inputs(receiver: dict[str, tf.TensorSpec], data: side.Data,
           seed: int = 0) -> dict[str, np.ndarray]:
  """Inputs for the serving signatures: a receiver tensor named like a
  feature (or the one tensor of single-tensor features) takes the data's
  values when its shape and dtype allow; a string tensor of one dimension
  with no such feature, the features as serialized tf.Example protos (a
  parsing receiver's); others are drawn from its spec (uint8 over [0, 255],
  other integers 0 or 1, floats over [0, 1))."""
  features = [f for f, _ in data.batches]
  examples_ = min(SERVED_EXAMPLES, len(features) * data.global_batch)
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
      values[name] = source[:examples_].astype(spec.dtype.as_numpy_dtype)
      continue
    if spec.dtype == tf.string and spec.shape.rank == 1:
      values[name] = examples(_concatenated(features), examples_)
      continue
    if not inner.is_fully_defined():
      raise KitError(f'the serving receiver\'s {name} has the shape '
                     f'{spec.shape} and no feature of that name to take values'
                     ' from; name it as the feature it becomes')
    shape = [examples_, *inner.as_list()]
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
                     'it becomes, so that the data gives them, or give the '
                     'receiver\'s inputs (--legacy_serving_inputs)')
    values[name] = value.astype(dtype.as_numpy_dtype)
  return values


def _concatenated(batches: list):
  if isinstance(batches[0], dict):
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  return np.concatenate(batches)


def serve(path: str, values: dict) -> dict:
  """serving_default of the SavedModel at path, called on values by name.

  Raises:
    KitError: its inputs are not named as the legacy receiver's.
  """
  with timing.spent('loading exports back'):
    return _serve(path, values)


def _serve(path: str, values: dict) -> dict:
  signature = tf.saved_model.load(path).signatures['serving_default']
  expected = set(signature.structured_input_signature[1])
  if expected != set(values):
    raise KitError(f'the SavedModel at {path} takes {sorted(expected)} where '
                   f'the legacy receiver gives {sorted(values)}: name the '
                   'serving inputs as the legacy receiver tensors')
  outputs = signature(**{k: tf.constant(v) for k, v in values.items()})
  return {k: v.numpy() for k, v in outputs.items()}
