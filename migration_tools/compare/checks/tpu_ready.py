"""tpu_ready: the port's step and predict compile for a TPU as its framework
compiles them, asked of its adapter (Framework.tpu_ready).
"""
from __future__ import annotations

from kit_core import timing
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import AFTER
from migration_tools.compare.registry import Check
from migration_tools.compare.verdict import CheckResult


def drive(run: Run, replicas: Replicas | None) -> CheckResult:
  """What "compiles for a TPU" means in the port's framework, asked of its
  adapter (Framework.tpu_ready), on one replica built afresh."""
  del replicas
  with timing.spent('XLA compiles (tpu_ready)'):
    readiness = run.framework.tpu_ready(run.port, run.params(), run.batches,
                                        run.progress)
  return CheckResult('tpu_ready', readiness.status, readiness.summary,
                     figures=readiness.figures)


CHECK = Check(
    'tpu_ready', 'the port\'s inputs have fully defined shapes; its step '
    'and its predict compile for a TPU as its framework compiles them (XLA '
    'through its own `strategy.run`, `jax.export`, `torch.export`); no host '
    'Python, strings, or data-dependent shapes in them (below)', AFTER,
    drive, bar='none found', planned=lambda plan: plan.tpu_ready)
