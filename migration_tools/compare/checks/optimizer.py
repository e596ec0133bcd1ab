"""optimizer: the optimizers' kind and hyper-parameters where both are in
the tables, else the slot map their updates and slots are compared through;
the values the slots start at.
"""
from __future__ import annotations

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import PASSED
from migration_tools.pair import optimizers

# The bar: kind and hyper-parameters equal, each number within a relative
# bar.
BAR = Bar(rtol=tolerances.OPTIMIZER_RTOL, words='kind and hyper-parameters '
          'equal')


def judge(theirs, ours, starts: list[str] | None = None) -> CheckResult:
  """The same optimizer kind and hyper-parameters, and slots that start at
  the same values.

  Args:
    theirs: optimizers.Description of the legacy optimizer, or None if the
      legacy graph's is not one the kit reads.
    ours: optimizers.Description of the port's.
    starts: the slots that start at other values
      (optimizers.initial_slot_differences), as phrases.
  """
  if theirs is None:
    return CheckResult('optimizer', NOT_RUN, 'the legacy optimizer is not one '
                       'the kit reads by its ops (docs/MIGRATION.md, "TF 1 '
                       'optimizers"); its slots are not compared')
  said = optimizers.differences(theirs, ours)
  figures = {'legacy': str(theirs), 'port': str(ours),
             'slot_starts': list(starts or [])}
  if said:
    return CheckResult('optimizer', FAILED, '; '.join(said) + ': set the '
                       'port\'s to the legacy values (Keras defaults differ '
                       'from TF 1\'s, e.g. Adam\'s epsilon 1e-7 vs 1e-8; '
                       'docs/MIGRATION.md, "TF 1 optimizers")',
                       figures=figures)
  if starts:
    return CheckResult('optimizer', FAILED, '; '.join(starts) + ': start '
                       'the port\'s slots where the legacy optimizer starts '
                       'them (TF 1\'s RMSPropOptimizer starts its rms at 1, '
                       'Keras\'s RMSprop at 0: migration_tools.tf1_keras.'
                       'optimizers.RMSpropFromOnes; docs/MIGRATION.md, "TF 1 '
                       'optimizers")',
                       figures=figures)
  return CheckResult('optimizer', PASSED, figures=figures)


def by_behaviour(legacy_run: dict, ours, slot_map,
                 theirs=None, starts: list[str] | None = None
                           ) -> CheckResult:
  """For an optimizer the tables do not read on one side (a legacy
  tf.compat.v1.train.Optimizer subclass, a port's hand-written or
  another framework's): its state must pair one to one with the other
  side's (its slots through the slot map) and start at the same values;
  its updates, and so its hyper-parameters, are judged in `updates`.

  Args:
    legacy_run: the legacy runner's describe_run().
    ours: optimizers.Description of the port's.
    slot_map: optimizers.SlotMap between the two.
    theirs: optimizers.Description of the legacy one where its ops read it.
    starts: the slots that start at other values, as phrases.
  """
  name = str(theirs) if theirs is not None else legacy_run['optimizer']
  figures = {'legacy': name, 'port': str(ours), 'slot_map': str(slot_map),
             'read_by': 'what it does (updates)',
             'slot_starts': list(starts or [])}
  if slot_map.legacy_only or slot_map.port_only:
    return CheckResult(
        'optimizer', FAILED, f'the optimizers keep other state: the legacy '
        f'{name}\'s slots {", ".join(slot_map.legacy_only) or "(none)"} and '
        f'the port\'s {", ".join(slot_map.port_only) or "(none)"} pair with '
        'nothing on the other side: give the port the legacy optimizer\'s '
        'slots, or pair them (Port.slot_map)', figures=figures)
  if starts:
    return CheckResult('optimizer', FAILED, '; '.join(starts) + ': start '
                       'the port\'s slots where the legacy optimizer starts '
                       'them', figures=figures)
  shown = f' ({ours})' if ours is not None else ''
  read = (f'the port\'s optimizer{shown} is not one the kit reads by its '
          'config' if theirs is not None else
          f'{name} is not read by its ops')
  return CheckResult(
      'optimizer', PASSED, f'{read}: its slots pair one to one ({slot_map}) '
      'and start alike, and what it does (its hyper-parameters, its '
      'schedule) is judged at every step in the updates checks',
      figures=figures)


def _slot_readings(legacy, theirs, ours, by_tables: bool) -> int:
  """How often the legacy slots are read before any step. The same
  whatever the port (a bundle answers in the order its recording asked):
  once where the legacy optimizer is in the tables, twice (the slot map's
  reading, then the starts') where it is read by what it does. A bundle of
  format 3 or 4 (golden.FORMAT) was asked as its port made the check ask."""
  if getattr(legacy, 'recorded_format', None) in (3, 4):
    if not by_tables:
      return 2
    return 1 if theirs.kind == ours.kind else 0
  return 2 if theirs is None else 1


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """Kind and hyper-parameters where both sides' optimizers are in the
  tables; else the slot map its updates and slots are compared through. On
  either reading, the value each slot starts at."""
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = legacy.describe_optimizer(), runner.describe_optimizer()
  by_tables = theirs is not None and ours is not None and (
      ours.kind in optimizers.KERAS_KINDS)
  # Before any step; a slot a rate scales (momentum's) starts at 0 on both
  # sides, whatever the rate it is read at.
  legacy_slots = None
  for _ in range(_slot_readings(legacy, theirs, ours, by_tables)):
    legacy_slots = legacy.slots(0.0)
  if not by_tables:
    slot_map = optimizers.resolve_slot_map(
        optimizers.slot_tokens(legacy_slots), runner.slot_tokens(),
        run.port.slot_map)
    run.slot_map = slot_map.pairs
    runner.use_slot_map(slot_map.pairs)
  starts = optimizers.initial_slot_differences(
      legacy_slots, runner.slots(1.0)) if (
          not by_tables or theirs.kind == ours.kind) else []
  if by_tables:
    return judge(theirs, ours, starts)
  return by_behaviour(replicas.describe(), ours, slot_map,
                      theirs, starts)


CHECK = Check(
    'optimizer', 'kind and hyper-parameters, read from the legacy graph\'s '
    'apply ops, against the Keras optimizer\'s config; where either side\'s '
    'is not in the tables (a TF 1 subclass, a hand-written Keras optimizer, '
    'another framework\'s), its slots pair one to one and `updates` judges '
    'what it does; the value each slot starts at', ONCE, drive,
    needs=('legacy.describe_optimizer', 'legacy.slots', 'legacy.describe_run',
           'port.describe_optimizer', 'port.slots', 'port.slot_tokens',
           'port.use_slot_map'),
    leaves=('slot_map',), bar=BAR)
