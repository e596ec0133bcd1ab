"""The kit's checks, one file each, registered in ORDER: the run order.

A check's file holds everything of it: its driver (``drive(run,
replicas)``: both sides' answers for it), its judge (``judge``: the verdict
and the hint), its bar (``BAR``, a ``bars.Bar`` the judge takes), its
helpers and ``CHECK``, its ``registry.Check`` (what it compares, its bar,
its scope, what it asks of the sides, the Run fields it leaves for the
checks after it). What several
checks share lives in ``compare/verdict.py`` (``CheckResult``, ``judged``,
``max_diff``) and ``compare/passes.py`` (the passes over a run that several
checks judge). A new check is a new file here and its name in ORDER.

Checks run in this order, scope by scope (``registry.plan``). Order matters
beyond the report: a legacy graph built in this process makes the Keras
models made before it unusable, so the checks of a run come before the next
run's legacy graph (evaluation and serving before updates); one_step takes
the pass that learning_rate and trajectory judge; updates is reported
before stepwise, which judges the same steps.

The verdict's names (``CheckResult``, ``PASSED`` ...) are also here, where
a team's own check has always imported them.
"""
import importlib

from migration_tools.compare import registry
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import ERROR
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import max_diff
from migration_tools.compare.verdict import near_tie_text
from migration_tools.compare.verdict import near_ties
from migration_tools.compare.verdict import non_finite_in
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import PASSED
from migration_tools.compare.verdict import REVIEW
from migration_tools.compare.verdict import SKIPPED


__all__ = ['ORDER', 'CheckResult', 'ERROR', 'FAILED', 'judged', 'max_diff',
           'near_tie_text', 'near_ties', 'non_finite_in', 'NOT_RUN', 'PASSED',
           'REVIEW', 'SKIPPED']

ORDER = (
    'inventory',
    'optimizer',
    'inputs',
    'inference',
    'beyond_init',
    'device_drift',
    'one_step',
    'learning_rate',
    'schedule',
    'trajectory',
    'evaluation',
    'served_predictions',
    'updates',
    'stepwise',
    'clipping',
    'host_call',
    'dropout',
    'tpu_ready',
    'speed',
)


def load(order: tuple[str, ...] = ORDER) -> list[registry.Check]:
  """The CHECK of each module in order: a name of this package's, or a
  module's full dotted path (a team's own check, kept in its code)."""
  return [importlib.import_module(name if '.' in name else
                                  f'{__name__}.{name}').CHECK
          for name in order]


for _check in load():
  registry.register(_check)
