"""Outputs of the two sides set side by side: what the comparison's checks
and the converter's verification both judge (floats by how far apart,
anything else by equality); and predictions made a batch at a time."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


def numeric(a: np.ndarray) -> bool:
  return a.dtype.kind in 'biuf'


def non_finite(theirs, ours) -> str:
  """'' when the two hold no NaN and no infinity that the other does not
  hold at the same place; else what does not agree, e.g. 'NaN on the port's
  side (3 of 512 values)'. A NaN never agrees, not even with a NaN: a
  comparison of NaN says nothing of either side."""
  theirs, ours = np.asarray(theirs), np.asarray(ours)
  if not (numeric(theirs) and numeric(ours)) or theirs.shape != ours.shape:
    return ''
  said = []
  for side, values, other in (('the legacy', theirs, ours),
                              ('the port\'s', ours, theirs)):
    if values.dtype.kind != 'f':
      continue
    nan = np.isnan(values)
    # An infinity the other side holds too, same sign, same place, agrees.
    inf = np.isinf(values) & (values != other)
    for kind, where in (('NaN', nan), ('Inf', inf)):
      if where.any():
        said.append(f'{kind} on {side} side ({int(where.sum())} of '
                    f'{values.size} values)')
  return ', '.join(said)


def elementwise_diff(theirs, ours) -> np.ndarray:
  """|theirs - ours| elementwise (same shapes, numbers): 0 where equal (an
  infinity on both sides too), inf where either is NaN or an infinity the
  other lacks there (non_finite)."""
  theirs = np.asarray(theirs, np.float64)
  ours = np.asarray(ours, np.float64)
  with np.errstate(invalid='ignore'):  # inf - inf: NaN, made inf below.
    diffs = np.where(theirs == ours, 0.0, np.abs(theirs - ours))
  return np.where(np.isnan(diffs), np.inf, diffs)


def output_diff(a: np.ndarray, b: np.ndarray) -> float:
  """Max |a - b| (elementwise_diff); inf if the shapes differ, or for
  non-numbers that differ (0 if equal)."""
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape:
    return float('inf')
  if not numeric(a) or not numeric(b):
    return 0.0 if np.array_equal(a, b) else float('inf')
  return float(elementwise_diff(a, b).max(initial=0.0))


def difference_text(name: str, theirs, ours, diff: float) -> str:
  """'name differs by up to 0.0013', or what is not finite in it:
  'name holds NaN on the port's side (3 of 512 values)', or the two shapes
  where they differ."""
  theirs_shape, ours_shape = np.shape(theirs), np.shape(ours)
  if theirs_shape != ours_shape:
    return (f'{name} is of shape {list(ours_shape)} on the port\'s side and '
            f'{list(theirs_shape)} on the legacy side')
  said = non_finite(theirs, ours)
  if said:
    return f'{name} holds {said}'
  return f'{name} differs by up to {diff:.3g}'


def paired_outputs(theirs: dict, ours: dict, output_map: dict[str, str]
                   ) -> tuple[dict, list[str]]:
  """{legacy name: (legacy array, port array)} and the legacy names the port
  lacks (through output_map)."""
  pairs, missing = {}, []
  for name, value in theirs.items():
    mapped = output_map.get(name, name)
    if mapped in ours:
      pairs[name] = (np.asarray(value), np.asarray(ours[mapped]))
    else:
      missing.append(name)
  return pairs, missing


def worst_output(pairs: dict, diffs: dict, allowed) -> str:
  """The output to report: one over its bar (allowed(name)) first, and
  among those a float one, which says by how much (an integer one, a class
  id, says only that it differs)."""
  return max(diffs, key=lambda k: (diffs[k] > allowed(k),
                                   pairs[k][0].dtype.kind == 'f', diffs[k]))


def as_dict(predictions) -> dict:
  """Predictions as {name: tensor}; a single tensor is named 'output'."""
  return dict(predictions) if isinstance(predictions, dict) else {
      'output': predictions}


def rows(features, start: int, end: int):
  """Examples start to end of features (an array, or a dict of them)."""
  if isinstance(features, dict):
    return {k: v[start:end] for k, v in features.items()}
  return features[start:end]


def first_batch(features, batch: int):
  """The first batch examples of features, padded as in_batches pads
  (where the layers of both sides of --verify are read)."""
  chunk = rows(features, 0, batch)
  count = len(next(iter(chunk.values())) if isinstance(chunk, dict) else
              chunk)
  return chunk if count == batch else _padded(chunk, batch)


def _padded(features, batch: int):
  """features grown to batch examples with copies of its last one."""
  def pad(v):
    return np.concatenate([v, np.repeat(v[-1:], batch - len(v), axis=0)])
  if isinstance(features, dict):
    return {k: pad(v) for k, v in features.items()}
  return pad(features)


def in_batches(predict: Callable[[Any], Any], features, batch: int,
               done: Callable[[int, int], None] | None = None
               ) -> dict[str, np.ndarray]:
  """predict's outputs on every example of features, batch at a time, so
  that one batch's activations are held, whatever the count (BERT-base at
  64 examples: 0.6 GB). The last batch is padded with copies of its last
  example, so that every call has the one shape a model_fn may take from
  params['batch_size']; the padding's outputs are dropped.

  Args:
    predict: features of batch examples -> {name: array} or one array.
    features: an array, or a dict of arrays, of the same examples.
    batch: examples per call.
    done: called with (examples predicted, all) after each call.
  """
  count = len(next(iter(features.values())) if isinstance(features, dict)
              else features)
  parts = []
  for start in range(0, count, batch):
    chunk = rows(features, start, start + batch)
    real = min(batch, count - start)
    predicted = as_dict(predict(chunk if real == batch else
                                _padded(chunk, batch)))
    parts.append({k: np.asarray(v)[:real] for k, v in predicted.items()})
    if done:
      done(start + real, count)
  return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
