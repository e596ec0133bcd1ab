"""Where a port ran, in the report's words: the shared pieces of its
'port_ran_on' (a replica count's label, the versions of its packages) and the
one line it is printed as. What each framework reads (its devices, its
precision) is its adapter's: frameworks/<name>/ran_on.py.

A verdict depends on where the port ran: JAX multiplies float32 matrices in
TF32 on recent GPUs and in one bfloat16 pass on TPUs unless the program asks
for more, and TensorFlow enables TF32 on GPUs.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any


def replicas_label(count: int) -> str:
  """'1 replica', '2 replicas': a replica count's label in every check."""
  return f'{count} replica' + ('s' if count != 1 else '')


def versions(*packages: str) -> dict[str, str]:
  found = {}
  for package in packages:
    try:
      found[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      pass
  return found


def line(ran_on: dict[str, Any]) -> str:
  """One line of it: 'Ran on: cpu (cpu) x4 devices; jax 0.12.0.1, ...;
  matmul float32, convolution float32 (from the lowered HLO ...)'."""
  versions = ', '.join(f'{k} {v}' for k, v in ran_on['versions'].items()
                       if k != 'numpy')
  precision = ', '.join(f'{k} {v}' for k, v in ran_on['precision'].items())
  others = [v for v in ran_on['replicas'].values()
            if not v.startswith(ran_on['platform'])]
  return (f'Ran on: {ran_on["platform"]} ({ran_on["device_kind"]}), '
          f'{ran_on["devices"]} device{"s" if ran_on["devices"] != 1 else ""}'
          + (f' ({"; ".join(others)})' if others else '') +
          f'; {versions}; {precision or "precision unknown"} '
          f'({ran_on["precision_from"]})' + (
              f'; {ran_on["gradients"]}' if 'gradients' in ran_on else '') + (
              f'; as deployed, its dots\' operands rounded to '
              f'{ran_on["emulated"]} (emulated)' if 'emulated' in ran_on
              else ''))
