"""Every variable a legacy training step moves, and what each one is.

A model_fn's TRAIN graph keeps more than the model: the optimizer's slots,
the global step, Adam's beta powers, the shadows of an
``ExponentialMovingAverage`` (EfficientNet, MnasNet, ResNet-RS and many TF 1
TPU models evaluate and export those), counters of its own. A port that
drops one of them still matches the weights, so the harness lists each
variable the train_op writes (``written``), gives it a role (``roles``) and
says which check compares it, or why none does; ``inventory`` fails on one
moved and compared by nothing that the port has not declared
(``Port.not_compared``).
"""
# migration-scan: skip-file (it reads legacy graphs on purpose)
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch

import numpy as np

from kit_core.lazy import tensorflow as tf
from migration_tools.pair import legacy_optimizer
from migration_tools.pair import optimizers

# Roles, and what compares a variable of each.
WEIGHTS, MODEL_STATE, STEP, SLOT, DERIVED, AVERAGE, OTHER = (
    'weights', 'model state', 'global step', 'optimizer slot',
    'derived from the step', 'moving average', 'other')
COMPARED_BY = {
    WEIGHTS: 'inventory, one_step, updates, stepwise, trajectory',
    MODEL_STATE: 'inventory, one_step, stepwise, trajectory',
    STEP: 'trajectory (the global step)',
    SLOT: 'optimizer, one_step, updates, stepwise',
}
# A moving average the port keeps too (Port.averages, or Keras's use_ema).
AVERAGES_COMPARED_BY = ('inventory (its start), one_step, updates, '
                        'stepwise; evaluation and served_predictions on the '
                        'weights each side evaluates and exports')
# Why a role needs no counterpart in the port.
NOT_NEEDED = {
    DERIVED: 'a Keras optimizer derives it from its step (Adam\'s beta '
             'powers)',
}

# tf.train.ExponentialMovingAverage names a shadow '<variable>/' + its name,
# by default this (a checkpoint's averages are read so).
AVERAGE_SUFFIX = '/ExponentialMovingAverage'

# What a legacy evaluation restores (LegacyRunner.evaluates_with).
EVALUATES_AVERAGES, EVALUATES_WEIGHTS = 'the moving averages', 'the weights'

# Op types that write their first input, a variable (ref or resource).
_WRITES = ('Assign', 'AssignAdd', 'AssignSub', 'AssignVariableOp',
           'AssignAddVariableOp', 'AssignSubVariableOp')
_WRITE_PREFIXES = ('Apply', 'ResourceApply', 'SparseApply',
                   'ResourceSparseApply', 'Scatter', 'ResourceScatter')


@dataclasses.dataclass
class Averages:
  """What watch_averages() saw: {shadow variable name: (its variable's
  name, the decay tensor or number, whether num_updates was given)}, and
  {shadow variable name: the num_updates tensor, or None}."""
  shadows: dict = dataclasses.field(default_factory=dict)
  num_updates: dict = dataclasses.field(default_factory=dict)


def decay_at(decay: float, num_updates) -> np.float32:
  """The decay TF 1's ExponentialMovingAverage applies: min(decay, (1 + n)
  / (10 + n)) with num_updates n, in float32 as its graph computes it."""
  decay = np.float32(decay)
  if num_updates is None:
    return decay
  n = np.float32(num_updates)
  return np.minimum(decay, (np.float32(1) + n) / (np.float32(10) + n))


def moved_average(average: np.ndarray, value: np.ndarray,
                  decay: np.float32) -> np.ndarray:
  """TF 1's assign_moving_average: average - (average - value) * (1 -
  decay), in float32."""
  average = np.asarray(average, np.float32)
  return average - (average - np.asarray(value, np.float32)) * (
      np.float32(1) - decay)


@contextlib.contextmanager
def watch_averages():
  """While a model_fn builds its graph: records the shadow variable of each
  variable every tf.compat.v1.train.ExponentialMovingAverage averages."""
  seen = Averages()
  cls = tf.compat.v1.train.ExponentialMovingAverage
  original = cls.apply

  def apply(ema, var_list=None):
    result = original(ema, var_list)
    for variable in var_list or ():
      shadow = ema.average(variable)
      if shadow is not None:
        num_updates = getattr(ema, '_num_updates', None)
        seen.shadows[shadow.op.name] = (
            variable.op.name, getattr(ema, '_decay', None),
            num_updates is not None)
        seen.num_updates[shadow.op.name] = num_updates
    return result

  cls.apply = apply
  try:
    yield seen
  finally:
    cls.apply = original


def written(train_op) -> set[str]:
  """The names of the variables train_op writes: the assign and apply ops
  it runs, through its inputs and control dependencies."""
  found, seen = set(), set()
  todo = [train_op if isinstance(train_op, tf.Operation) else train_op.op]
  while todo:
    op = todo.pop()
    if op.name in seen:
      continue
    seen.add(op.name)
    if op.inputs and op.type in _WRITES:
      found.add(legacy_optimizer.variable_name(op.inputs[0]))
    elif op.type.startswith(_WRITE_PREFIXES):
      # An apply op writes its slots too: every variable among its inputs.
      found.update(legacy_optimizer.variable_name(t) for t in op.inputs
                   if t.dtype == tf.resource or t.dtype._is_ref_dtype)  # pylint: disable=protected-access
    todo.extend(t.op for t in op.inputs)
    todo.extend(op.control_inputs)
  return found


def roles(names: list[str], model: set[str], trainable: set[str], step: str,
          slots: set[str], averages: Averages) -> dict[str, str]:
  """{name: role} of every global variable of a TRAIN graph."""
  result = {}
  for name in names:
    if name == step:
      role = STEP
    elif name in trainable:
      role = WEIGHTS
    elif name in model:
      role = MODEL_STATE
    elif name in slots:
      role = SLOT
    elif name.rpartition('/')[2] in optimizers.LEGACY_DERIVED:
      role = DERIVED
    elif name in averages.shadows:
      role = AVERAGE
    else:
      role = OTHER
    result[name] = role
  return result


def declared(name: str, not_compared: dict[str, str]) -> str | None:
  """The reason the port gave for leaving name out (a name or a
  shell-style pattern of Port.not_compared), else None."""
  for pattern, reason in not_compared.items():
    if fnmatch.fnmatchcase(name, pattern):
      return reason
  return None


@dataclasses.dataclass(frozen=True)
class Account:
  """What becomes of each variable of a legacy TRAIN graph.

  table: {name: {'role', 'moved', and 'compared_by' (the checks) or
    'not_compared' (why)}}, for the report.
  unaccounted: the names the step moves that nothing compares and the
    port did not declare, in graph order.
  """
  table: dict
  unaccounted: list

  def not_compared(self) -> dict[str, list[str]]:
    """{reason: names} of the variables the step moves that are not
    compared."""
    found = {}
    for name, entry in self.table.items():
      if entry['moved'] and 'not_compared' in entry:
        found.setdefault(entry['not_compared'], []).append(name)
    return found


def account(train_variables: dict[str, dict], not_compared: dict[str, str],
            averaged: set[str] = frozenset()) -> Account:
  """Each TRAIN-graph variable (LegacySide.train_variables) with the checks
  that compare it, or why none does; not_compared: Port.not_compared;
  averaged: the legacy names of the variables the port averages."""
  table, unaccounted = {}, []
  for name, entry in train_variables.items():
    role, moved = entry['role'], entry['moved']
    row = {'role': role, 'moved': moved}
    reason = declared(name, not_compared)
    if role == AVERAGE and entry.get('of') in averaged:
      row['compared_by'] = AVERAGES_COMPARED_BY
    elif role in COMPARED_BY:
      row['compared_by'] = COMPARED_BY[role]
    elif role in NOT_NEEDED:
      row['not_compared'] = NOT_NEEDED[role]
    elif reason is not None:
      row['not_compared'] = f'declared by the port: {reason}'
    elif not moved:
      row['not_compared'] = 'the training step does not move it'
    else:
      unaccounted.append(name)
      row['not_compared'] = 'no counterpart in the port'
    for key in ('of', 'decay', 'num_updates'):
      if key in entry:
        row[key] = entry[key]
    table[name] = row
  return Account(table, unaccounted)


def unaccounted_text(account_: Account, train_variables: dict) -> str:
  """The failure: what the step moves that the port lacks, grouped by
  role, and what to do."""
  said = []
  averages = [n for n in account_.unaccounted
              if train_variables[n]['role'] == AVERAGE]
  if averages:
    entry = train_variables[averages[0]]
    decays = {train_variables[n].get('decay') for n in averages}
    decay = (f'decay {decays.pop():g}' if len(decays) == 1 and
             None not in decays else 'their decays')
    early = (', lowered early on by num_updates: min(decay, (1 + step) / '
             '(10 + step))' if entry.get('num_updates') else '')
    said.append(
        f'{len(averages)} moving average{"s" if len(averages) > 1 else ""} '
        f'(tf.train.ExponentialMovingAverage of {entry["of"]}'
        f'{" and others" if len(averages) > 1 else ""}: {averages[0]}, '
        f'{decay}{early}); the model_fn may evaluate and export them instead '
        'of the weights')
  others = [n for n in account_.unaccounted if n not in averages]
  if others:
    said.append(f'{len(others)} other variable{"s" if len(others) > 1 else ""}'
                f' ({", ".join(others[:3])}{" ..." if len(others) > 3 else ""})')
  return ('the legacy training step moves state the port has no counterpart '
          'for: ' + '; '.join(said) + ': keep that state in the port, or '
          'declare what the port leaves out on purpose (Port.not_compared = '
          '{name or pattern: why}); a moving average pairs with the port\'s '
          'averages (Port.averages, or its Keras optimizer\'s use_ema) '
          '(docs/EQUIVALENCE.md, "State beyond the weights")')
