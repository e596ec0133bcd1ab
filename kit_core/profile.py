"""Where a step's time goes: TensorFlow's profiler, read as kernel times.

``profiled(logdir)`` runs a block under ``tf.profiler.experimental``;
``kernel_times(logdir, steps)`` reads the trace it wrote: each kernel (op
name and the kernel that ran it, after oneDNN's rewrites) with its calls and
milliseconds per step (the median call's duration times the calls, so the
slower first calls of a warm-up do not count). Graph-mode
``session.run`` and ``tf.function`` steps are both traced. Used by the
benchmarks (``benchmarks/kernels.py``) and by ``migration-compare --speed``.
"""
from __future__ import annotations

import collections
import contextlib
import glob
import os
import re
import statistics
from typing import Iterator


from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf

# A kernel's trace event is "op name:op type"; runtime events ("Iterator::...",
# "EagerLocalExecute: ...") have other shapes.
_KERNEL_EVENT = re.compile(r'^([^:\s]+):([A-Za-z_]\w*)$')


@contextlib.contextmanager
def profiled(logdir: str) -> Iterator[None]:
  """The block runs under TensorFlow's profiler, which writes to logdir."""
  tf.profiler.experimental.start(logdir)
  try:
    yield
  finally:
    tf.profiler.experimental.stop()


def _events(logdir: str) -> Iterator[tuple[str, float]]:
  """(name, duration in ms) of every host event in the profile under logdir."""
  # Imported here: a TF-internal module (the profiler's trace format).
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  files = glob.glob(os.path.join(logdir, '**', '*.xplane.pb'), recursive=True)
  if not files:
    raise KitError(f'the profiler wrote no trace under {logdir}')
  space = xplane_pb2.XSpace()
  with open(files[0], 'rb') as f:
    space.ParseFromString(f.read())
  for plane in space.planes:
    for line in plane.lines:
      for event in line.events:
        yield (plane.event_metadata[event.metadata_id].name,
               event.duration_ps / 1e9)


def kernel_times(logdir: str, steps: int) -> list[dict]:
  """Each kernel's op, kernel, calls per step and ms per step, slowest
  first."""
  durations = collections.defaultdict(list)
  for name, ms in _events(logdir):
    match = _KERNEL_EVENT.match(name)
    if match:
      durations[match.groups()].append(ms)
  rows = []
  for (op, kernel), times in durations.items():
    calls = len(times) / steps
    rows.append({'op': op, 'kernel': kernel, 'calls_per_step': calls,
                 'ms_per_step': statistics.median(times) * calls})
  return sorted(rows, key=lambda row: -row['ms_per_step'])
