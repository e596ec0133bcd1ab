"""host_call: the tensors the legacy host_call receives at each step, against
the port's logged values (Port.host_call).
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import SKIPPED

# The bar: each value the host_call logs, relative to the larger of 1 and
# the legacy value.
BAR = Bar(rtol=tolerances.HOST_CALL_RTOL)


def judge(names: list[str], steps: list, bar: Bar = BAR) -> CheckResult:
  """The tensors the legacy host_call received at each step against the
  values the port logs (Port.host_call), by name.

  Args:
    names: the host_call's tensors, by name.
    steps: each step's (legacy {name: array}, port {name: array} or None).
  """
  name = 'host_call'
  if any(ours is None for _, ours in steps):
    return CheckResult(name, SKIPPED, f'the legacy host_call receives '
                       f'{", ".join(names)} at each step, and the port gives '
                       'no Port.host_call (the values its summaries log), so '
                       'the summaries were not compared',
                       figures={'names': list(names)})
  missing = sorted(set(names) - set(steps[0][1]))
  if missing:
    return CheckResult(name, FAILED, f'the port logs no {", ".join(missing)}'
                       f' (it logs {sorted(steps[0][1])}): give each value '
                       'the legacy host_call receives, by its name '
                       '(Port.host_call)', figures={'names': list(names)})
  worst = (0.0, '', 0, 0.0, 0.0)
  for number, (theirs, ours) in enumerate(steps, 1):
    for key in names:
      a = np.asarray(theirs[key], np.float64).ravel()
      b = np.asarray(ours[key], np.float64).ravel()
      if b.size == 1 and a.size > 1:
        a = a[:1]  # Core 0's, as a host_call that reads x[0] logs it.
      if a.size != b.size:
        return CheckResult(name, FAILED, f'the port logs {b.size} values of '
                           f'{key} where the legacy host_call receives '
                           f'{a.size}', figures={'names': list(names)})
      diff = outputs.output_diff(a, b) / max(1.0, float(np.max(np.abs(a))))
      if diff > worst[0] or not worst[1]:
        worst = (diff, key, number, float(a[0]), float(b[0]))
  value, key, number, a, b = worst
  return judged(name, value, bar.rtol,
                {'names': list(names), 'worst': key, 'worst_step': number},
                f'{key} differs at step {number} ({a:.6g} vs {b:.6g}) at '
                'identical state: the port logs another value than the '
                'legacy host_call received (e.g. the loss without its L2 '
                'term, the rate of the step before or after, a mean over '
                'other examples): compare how its summary computes it')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """The host_call's tensors at every step of the pass at identical state,
  against the port's logged values (Port.host_call)."""
  return judge(replicas.describe()['host_call'],
               passes.resynced(run, replicas).host_calls)


CHECK = Check(
    'host_call', 'the tensors the legacy `host_call` receives at each step '
    '(what its summaries log: the loss, the rate, ...), by name, against the '
    'port\'s `Port.host_call` values, at every step from identical state; '
    'or a line saying why they were not compared; for a model_fn with a '
    '`host_call`', ONCE, drive,
    needs=('legacy.describe_run', 'legacy.step', 'port.step'),
    bar=BAR,
    applies=lambda run, replicas: bool(
        replicas.describe()['host_call']))
