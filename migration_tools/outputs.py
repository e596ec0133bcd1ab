"""Outputs of the two sides set side by side: what the comparison's checks
and the converter's verification both judge (floats by how far apart,
anything else by equality)."""
import numpy as np


def numeric(a: np.ndarray) -> bool:
  return a.dtype.kind in 'biuf'


def output_diff(a: np.ndarray, b: np.ndarray) -> float:
  """Max |a - b|; inf if the shapes differ; 0/inf for non-numbers."""
  if a.shape != b.shape:
    return float('inf')
  if not numeric(a) or not numeric(b):
    return 0.0 if np.array_equal(a, b) else float('inf')
  return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(
      initial=0.0))


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
