"""The kit's own golden bundle, kit_pair/golden_bundle.npz: the kit's pair
recorded on TF 2.15, what `migration-compare` checks the kit's port against
on every profile without tf.estimator (newest, jax, torch), out of the box.

  .venv/bin/python tests/kit_bundle.py      # estimator profile: refresh it,
                                            # then commit it

It is recorded at 2 steps on 1 and 2 replicas (RECORD_ARGS): every check
runs, a step carries its state to the next, and the file stays near 5 MB
(docs/TESTING.md, "The kit's bundle"). tests/tools/test_golden.py records it
again and fails, naming this command, when the committed one no longer
matches what the code records.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLE = os.path.join(REPO, 'kit_pair', 'golden_bundle.npz')
RECORD_ARGS = ('--steps=2', '--replicas=1,2', '--eval_batches=2')
REFRESH = '.venv/bin/python tests/kit_bundle.py'
# Recorded on two CPUs, the same code rounds differently (the kernels'
# summation orders): 2 steps of float32 move apart by about 1e-6 of each
# array's scale. A change of the code moves them by far more.
RTOL = 1e-4


def record(path: str, report: str, env: dict | None = None
           ) -> subprocess.CompletedProcess:
  """Records the kit's pair into path, as the refresh does (a live
  comparison on the estimator profile; its report at report)."""
  return subprocess.run(
      [sys.executable, '-m', 'migration_tools.compare', *RECORD_ARGS,
       f'--record_bundle={path}', f'--report={report}', '--quiet'],
      cwd=REPO, env={**os.environ, 'PYTHONPATH': REPO, **(env or {})},
      capture_output=True, text=True, timeout=900, check=False)


def _leaves(value, path: str = ''):
  """(path, leaf) of a decoded answer, in order."""
  if isinstance(value, dict):
    for key in sorted(value, key=repr):
      yield from _leaves(value[key], f'{path}/{key}')
  elif isinstance(value, (list, tuple)):
    yield (f'{path}#{type(value).__name__}{len(value)}', None)
    for i, item in enumerate(value):
      yield from _leaves(item, f'{path}[{i}]')
  else:
    yield path, value


def _apart(a, b) -> str | None:
  """Why two leaves differ beyond rounding, or None."""
  if isinstance(a, (np.ndarray, np.generic)) != isinstance(
      b, (np.ndarray, np.generic)):
    return f'{type(a).__name__} against {type(b).__name__}'
  if not isinstance(a, (np.ndarray, np.generic)):
    return None if a == b else f'{a!r} against {b!r}'
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape or a.dtype != b.dtype:
    return f'{a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}'
  if a.dtype.kind != 'f':
    return None if np.array_equal(a, b) else 'other values'
  if not np.array_equal(np.isfinite(a), np.isfinite(b)):
    return 'other non-finite values'
  finite = np.isfinite(a)
  scale = float(np.max(np.abs(b[finite]), initial=0.0))
  diff = float(np.max(np.abs(a[finite].astype(np.float64) -
                             b[finite].astype(np.float64)), initial=0.0))
  if diff > RTOL * scale + 1e-30:
    return f'apart by {diff:.3g} (scale {scale:.3g})'
  return None


def differences(committed: str, fresh: str) -> list[str]:
  """What the committed bundle holds that the fresh recording does not,
  beyond rounding: ['where: how', ...]; [] when it is current."""
  from migration_tools.compare import golden  # pylint: disable=g-import-not-at-top
  old, new = golden.load(committed), golden.load(fresh)
  found = []
  for name in ('options', 'replica_counts', 'serving'):
    if getattr(old, name) != getattr(new, name):
      found.append(f'{name}: {getattr(old, name)!r} recorded, '
                   f'{getattr(new, name)!r} now')
  if old.versions.get('format') != new.versions.get('format'):
    found.append(f'format {old.versions.get("format")} recorded, '
                 f'{new.versions.get("format")} now')
  if dict(old.tape.shards) != dict(new.tape.shards):
    found.append(f'runs {dict(old.tape.shards)} recorded, '
                 f'{dict(new.tape.shards)} now')
  keys_old, keys_new = set(old.tape.keys()), set(new.tape.keys())
  for key in sorted(keys_old ^ keys_new):
    found.append(f'answer {key!r} only {"recorded" if key in keys_old else "now"}')
  pairs = [('batches', old.batches, new.batches)] + [
      (key, old.tape.answer(key), new.tape.answer(key))
      for key in sorted(keys_old & keys_new)]
  for where, a, b in pairs:
    leaves_a, leaves_b = list(_leaves(a)), list(_leaves(b))
    if [p for p, _ in leaves_a] != [p for p, _ in leaves_b]:
      found.append(f'{where}: other entries')
      continue
    for (path, x), (_, y) in zip(leaves_a, leaves_b):
      why = _apart(x, y)
      if why:
        found.append(f'{where}{path}: {why}')
  return found


def main() -> None:
  print(f'Recording {os.path.relpath(BUNDLE, REPO)} ({" ".join(RECORD_ARGS)})',
        flush=True)
  with tempfile.TemporaryDirectory() as folder:
    result = record(BUNDLE, os.path.join(folder, 'report.json'))
  if result.returncode:
    sys.exit(f'error: the recording failed:\n{result.stdout[-3000:]}'
             f'{result.stderr[-3000:]}')
  size = os.path.getsize(BUNDLE)
  print(f'{os.path.relpath(BUNDLE, REPO)}: {size / 1e6:.2f} MB; commit it')


if __name__ == '__main__':
  sys.path.insert(0, REPO)
  main()
