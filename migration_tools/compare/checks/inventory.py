"""inventory: every legacy variable pairs with a port variable of its
shape, and every other variable the legacy step moves is compared by a check
or declared left out; on a pass both sides start from the legacy state.
"""
from __future__ import annotations

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import PASSED
from migration_tools.pair import legacy_state
from migration_tools.pair import variable_map


def judge(theirs: dict, ours: dict, paired_by_order: list | None = None,
          warm_start: dict | None = None, train_variables=None,
          not_compared: dict | None = None,
          port_averages: dict | None = None,
          random_ops: dict | None = None) -> CheckResult:
  """Every legacy variable maps onto one port variable of the same shape,
  every other variable the legacy step moves is compared by a check or
  declared left out, and the legacy step draws no random number.

  Args:
    theirs, ours: {legacy name: array}, the port's through its variable map.
    paired_by_order: the pairs inferred by order (variable_map), reported.
    warm_start: {checkpoint: variables} the legacy run started from.
    train_variables: LegacySide.train_variables(); None: not accounted.
    not_compared: Port.not_compared.
    port_averages: the port's moving averages before any step, {legacy
      name of the variable: value}: each must start at its variable (ours),
      as TF 1 starts a shadow at its variable's initial value.
    random_ops: the legacy run's random ops (describe_run()['random_ops']:
      switched off, and left drawing); None: not read (an older bundle).
  """
  port_averages = port_averages or {}
  random_ops = random_ops or {'switched_off': {}, 'left': {}}
  # Before any step: an average must start at its variable's value.
  elsewhere = sorted(k for k, v in port_averages.items() if k in ours and not
                     np.allclose(v, ours[k], rtol=tolerances.OPTIMIZER_RTOL,
                                 atol=0))
  theirs = {k: list(v.shape) for k, v in theirs.items()}
  ours = {k: list(v.shape) for k, v in ours.items()}
  missing = sorted(set(theirs) - set(ours))
  extra = sorted(set(ours) - set(theirs))
  shapes = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
  passed = not (missing or extra or shapes)
  account = legacy_state.account(train_variables or {}, not_compared or {},
                                 set(port_averages))
  figures = {'variables': theirs, 'missing_in_port': missing,
             'extra_in_port': extra, 'wrong_shape': shapes,
             'paired_by_order': paired_by_order or [],
             'warm_start': warm_start or {}, 'train_state': account.table,
             'unaccounted': account.unaccounted,
             'random_ops_switched_off': random_ops['switched_off'],
             'random_ops_left': random_ops['left']}
  if passed and random_ops['left']:
    return CheckResult('inventory', FAILED, _drawing_text(random_ops['left']),
                       figures=figures)
  if passed and account.unaccounted:
    return CheckResult('inventory', FAILED, legacy_state.unaccounted_text(
        account, train_variables), figures=figures)
  if passed and elsewhere:
    return CheckResult(
        'inventory', FAILED,
        _averages_text(elsewhere, not np.any(port_averages[elsewhere[0]])),
        figures={**figures, 'averages_start_elsewhere': elsewhere})
  if passed:
    return CheckResult('inventory', PASSED, _passed_text(
        random_ops['switched_off'], warm_start, account), figures=figures)
  return CheckResult('inventory', FAILED,
                     _mapping_text(theirs, ours, missing, extra, shapes),
                     figures=figures)


def _first(names: list[str]) -> str:
  """The first three names, and ' ...' if there are more."""
  return f'{", ".join(names[:3])}{" ..." if len(names) > 3 else ""}'


def _averages_text(elsewhere: list[str], at_zero: bool) -> str:
  """The port's moving averages that start elsewhere than their variables
  (at_zero: the first of them starts at 0)."""
  start = 'at 0' if at_zero else 'elsewhere than its variable'
  return (f'the port\'s moving averages of {len(elsewhere)} variables '
          f'({_first(elsewhere)}) start {start}: TF 1 starts a shadow at its '
          'variable\'s initial value, and the first steps\' averages depend '
          'on it (Keras 3\'s use_ema starts at 0 and takes the variable at '
          'its first step); start each average at its variable')


def _passed_text(switched_off: dict, warm_start: dict | None,
                 account: legacy_state.Account) -> str:
  """What a pass says: the random masks put at their expectation, the warm
  start, what is not compared and why."""
  said = []
  if switched_off:
    masks = sorted(switched_off)
    said.append(f'{len(masks)} random mask{"s" if len(masks) > 1 else ""} '
                'of the legacy step put at its expectation, as inference '
                f'computes it ({_first(masks)}); the port\'s dropout must be '
                'off for these checks')
  if warm_start:
    said.append('both sides start from the legacy warm start: ' + ', '.join(
        f'{path} ({count} variables)' for path, count in warm_start.items()))
  said += [f'not compared: {_first(names)} ({reason})'
           for reason, names in account.not_compared().items()]
  return '; '.join(said)


def _mapping_text(theirs: dict, ours: dict, missing: list[str],
                  extra: list[str], shapes: list[str]) -> str:
  """Why the variables do not map one to one. A shape mismatch says both
  shapes, and whether the port's is the legacy one transposed (a Dense
  kernel copied from a torch-style [out, in] weight)."""
  shaped = [f'{k} (legacy {theirs[k]}, port {ours[k]}'
            f'{", transposed" if ours[k] == theirs[k][::-1] else ""})'
            for k in shapes]
  shown = [f'{label} {_first(items)}'
           for label, items in (('not mapped from the legacy model:', missing),
                                ('not mapped in the port:', extra),
                                ('of another shape:', shaped)) if items]
  return ('the variables do not map one to one (' + '; '.join(shown) + '): '
          'fix the port\'s variable map, or the layer names and sizes')


def _drawing_text(left: dict[str, str]) -> str:
  """The failure for a legacy step that draws random numbers the kit
  cannot switch off: which, why, and what to do."""
  first = sorted(left)[0]
  more = f' and {len(left) - 1} more' if len(left) > 1 else ''
  return (f'the legacy training step draws random numbers the kit cannot '
          f'switch off: {first} ({left[first]}){more}; each run of the step '
          'draws anew, so no step can be compared at identical state: give '
          'the model_fn a switch for it that --params can set (as a drop '
          'rate of 0) and the port the same, or write it as dropout '
          '(tf.nn.dropout, or x / keep * floor(keep + uniform)) '
          '(docs/EQUIVALENCE.md, "Random numbers")')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """Pairs the variables (given or inferred map); on a pass both sides
  start from the legacy state."""
  legacy, runner = replicas.legacy, replicas.port
  theirs = legacy.state()
  resolved = variable_map.resolve(
      {k: v.shape for k, v in theirs.items()}, runner.shapes(),
      run.port.variable_map)
  runner.use_map(resolved.pairs)
  ours = runner.state()
  train_variables = legacy.train_variables()
  result = judge(theirs, ours, resolved.by_order(),
                 replicas.describe()['warm_start'],
                 train_variables, run.port.not_compared,
                 runner.averages(),
                 replicas.describe().get('random_ops'))
  if result.passed:
    run.pairs, run.start = resolved.pairs, theirs
    run.weights = tuple(n for n, e in train_variables.items()
                        if e['role'] == legacy_state.WEIGHTS and n in theirs)
    run.start_averages = legacy.averages()
    runner.set_state(theirs)
    runner.set_averages(run.start_averages)
  return result


CHECK = Check(
    'inventory', 'every legacy variable (weights, batch-norm statistics) '
    'pairs with one port variable of the same shape; every other variable '
    'the legacy train_op writes (slots, step, moving averages, counters) is '
    'compared by a check, or declared left out (`Port.not_compared`); the '
    'legacy step draws no random number the kit cannot switch off (see '
    '"Random numbers")', ONCE,
    drive,
    needs=('legacy.state', 'legacy.describe_run', 'legacy.train_variables',
           'legacy.averages', 'port.averages', 'port.set_averages',
           'port.shapes',
           'port.use_map', 'port.state', 'port.set_state'),
    leaves=('pairs', 'start', 'start_averages', 'weights'),
    bar='exact', gate='inventory failed: the two sides cannot start a step '
    'from one state (its line says why)')
