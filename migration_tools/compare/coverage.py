"""What a comparison exercised of the legacy step's behaviours, and what it
did not: read from the checks' results, for the summary lines and the
report's 'coverage'.

A green that never compared a behaviour is no proof of it: a clip that
never engaged, dropout switched off on both sides, a host_call nothing
read, a moving average the port does not keep. Each reader below finds one
kind of behaviour in the results (what the legacy step has: inventory's
reading of its graph, the clips the clipping check found) and says whether
a compared state exercised it, by which check, or why not and what to do. A
new behaviour is a new reader in READERS.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import PASSED

# What the kit does not read yet, said with the coverage (limitations as
# data: the report carries them).
NOT_READ = (
    'each loss term apart (the loss is compared whole)',
    'weight decay and its exclusions apart (updates judges the whole '
    'update)',
    'cross-replica ops inside the model_fn',
)


@dataclasses.dataclass(frozen=True)
class Behaviour:
  """One behaviour of the legacy step.

  name: what it is and where ('gradient clipping by global norm
    (bert_legacy.py:244)').
  exercised: whether a compared state exercised it.
  how: by which check and at which state; or why not, and what to do.
  """
  name: str
  exercised: bool
  how: str

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def _compared(result: CheckResult | None) -> bool:
  """Whether the check judged (passed or failed) rather than skipped."""
  return result is not None and result.status in (PASSED, FAILED)


def _named(results: list[CheckResult], name: str) -> list[CheckResult]:
  """The results of the check name, each replica count's."""
  return [r for r in results if r.name == name or
          r.name.startswith(f'{name} (')]


def _clipping(results: list[CheckResult]) -> list[Behaviour]:
  """Each clip the model_fn made: engaged at a compared step, or not."""
  found = {}
  for result in _named(results, 'clipping'):
    for clip in result.figures.get('clips', []):
      key = f'gradient clipping by {clip["kind"]} ({clip["where"]})'
      label = result.name.partition(' (')[2].rstrip(')')
      step = result.figures.get('engaged_step')
      if step is not None:
        state = ('the pass at identical state' if result.figures.get(
            'state') == 'recorded' else 'a state made for it (gain '
                 f'{result.figures.get("gain"):g})')
        found.setdefault(key, []).append(
            (True, f'engaged at step {step} of {state} ({label}), compared '
             'by clipping'))
      else:
        found.setdefault(key, []).append((False, f'({label}) '
                                          f'{result.message}'))
  return [Behaviour(key, any(e for e, _ in said),
                    '; '.join(h for e, h in said if e) or
                    '; '.join(h for _, h in said))
          for key, said in found.items()]


def _draws(results: list[CheckResult]) -> list[Behaviour]:
  """The random numbers the legacy step draws (dropout, drop connect):
  compared drawn, with the random numbers aligned (dropout), or only put at
  their expectation on both sides."""
  inventory = next(iter(_named(results, 'inventory')), None)
  dropout = next(iter(_named(results, 'dropout')), None)
  switched = (inventory.figures.get('random_ops_switched_off', {})
              if inventory else {})
  drawn = dropout.figures.get('legacy_draws', []) if dropout else []
  if not switched and not drawn:
    return []
  count = max(len(switched), len(drawn))
  kinds = sorted(set(switched.values()))
  if len(drawn) > len(switched):  # Dropout the kit switched off by itself.
    kinds.append('dropout')
  name = (f'random draws of the step ({count} op{"s" if count > 1 else ""}: '
          f'{", ".join(kinds)})')
  if _compared(dropout) and 'masks' in dropout.figures:
    return [Behaviour(name, True, 'drawn by the legacy step, its masks '
                      'handed to the port\'s dropout calls in order, '
                      'compared by dropout')]
  if _compared(dropout):
    return [Behaviour(name, True, 'drawn on both sides with the random '
                      'numbers aligned, compared by dropout')]
  why = dropout.message if dropout else 'the dropout check did not run'
  return [Behaviour(name, False, 'put at their expectation on both sides in '
                    f'every check; not compared drawn: {why}')]


def _host_call(results: list[CheckResult]) -> list[Behaviour]:
  """The model_fn's host_call: its values compared at each step, or not."""
  host_call = next(iter(_named(results, 'host_call')), None)
  names = host_call.figures.get('names') if host_call else None
  if not names:
    return []
  if _compared(host_call):
    return [Behaviour(f'host_call ({len(names)} values)', True,
                      'compared at each step by host_call')]
  return [Behaviour(f'host_call ({len(names)} values)', False,
                    host_call.message)]


def _schedule(results: list[CheckResult]) -> list[Behaviour]:
  """A learning rate that moves with the global step: compared over its
  whole range, or not."""
  schedule = next(iter(_named(results, 'schedule')), None)
  if schedule is None or 'legacy_shape' not in schedule.figures or (
      schedule.figures.get('constant')):
    return []
  name = f'learning-rate schedule ({schedule.figures["legacy_shape"]})'
  if _compared(schedule):
    return [Behaviour(name, True, f'compared at '
                      f'{schedule.figures["steps_compared"]} global steps '
                      f'from 0 to {schedule.figures["last_step"]:,} by '
                      'schedule')]
  return [Behaviour(name, False, schedule.message)]


def _averages(results: list[CheckResult]) -> list[Behaviour]:
  """The moving averages the step keeps (tf.train.ExponentialMovingAverage:
  inventory's train_state): compared at each step where the port keeps them
  too, or not, and why (Port.not_compared)."""
  inventory = next(iter(_named(results, 'inventory')), None)
  table = inventory.figures.get('train_state') or {} if inventory else {}
  averages = {n: e for n, e in table.items()
              if e.get('role') == 'moving average' and e.get('moved')}
  if not averages:
    return []
  decays = sorted({e['decay'] for e in averages.values() if 'decay' in e})
  name = (f'moving averages of {len(averages)} variable'
          f'{"s" if len(averages) > 1 else ""}'
          f'{" (decay " + ", ".join(f"{d:g}" for d in decays) + ")" if decays else ""}')
  left = {n: e['not_compared'] for n, e in averages.items()
          if 'not_compared' in e}
  if left:
    first = next(iter(left))
    return [Behaviour(name, False, f'{len(left)} not compared ({first}: '
                      f'{left[first]}): keep them in the port and give them '
                      'to the kit (Port.averages)')]
  stepped = [r for n in ('updates', 'stepwise') for r in _named(results, n)
             if _compared(r)]
  if not stepped:
    return [Behaviour(name, False, 'no step was compared (updates and '
                      'stepwise did not run)')]
  return [Behaviour(name, True, 'kept by the port too, compared at each step '
                    f'by {", ".join(sorted({r.name.partition(" (")[0] for r in stepped}))}')]


READERS: tuple[Callable[[list[CheckResult]], list[Behaviour]], ...] = (
    _clipping, _draws, _averages, _host_call, _schedule)


def read(results: list[CheckResult]) -> list[Behaviour]:
  """Every behaviour the readers find in results, in READERS' order."""
  return [b for reader in READERS for b in reader(results)]


def lines(behaviours: list[Behaviour]) -> list[str]:
  """The summary's lines: what was exercised, and what was not."""
  said = []
  for exercised, title in ((True, 'Exercised'), (False, 'Not exercised')):
    chosen = [b for b in behaviours if b.exercised == exercised]
    if chosen:
      said.append(f'{title}: ' + '; '.join(f'{b.name}: {b.how}'
                                           for b in chosen))
  return said


# The verdicts, and the exit code of each (docs/EQUIVALENCE.md, "The
# verdict and the exit code").
PASS, FAIL, NOT_EXERCISED = 'pass', 'fail', 'not exercised'
EXIT_CODES = {PASS: 0, FAIL: 1, NOT_EXERCISED: 3}


def verdict(results: list[CheckResult], behaviours: list[Behaviour]) -> str:
  """FAIL where a check failed (or raised); else NOT_EXERCISED where a
  behaviour of the legacy step was compared at no state (no proof of it);
  else PASS."""
  if any(r.failed for r in results):
    return FAIL
  if any(not b.exercised for b in behaviours):
    return NOT_EXERCISED
  return PASS


def verdict_line(said: str, behaviours: list[Behaviour]) -> str:
  """The summary's last word: the verdict and its exit code, and for
  NOT_EXERCISED what was left and where the line before says why."""
  code = EXIT_CODES[said]
  if said != NOT_EXERCISED:
    return f'Verdict: {said} (exit code {code})'
  left = [b.name for b in behaviours if not b.exercised]
  return (f'Verdict: not a pass, no check failed but {len(left)} '
          f'behaviour{"s" if len(left) != 1 else ""} of the legacy step '
          f'{"were" if len(left) != 1 else "was"} compared at no state '
          f'({"; ".join(left)}): "Not exercised" above says why and what to '
          f'do (exit code {code})')


def to_json(behaviours: list[Behaviour]) -> dict:
  """The report's 'coverage'."""
  return {'behaviours': [b.to_json() for b in behaviours],
          'not_exercised': [b.name for b in behaviours if not b.exercised],
          'not_read': list(NOT_READ)}
