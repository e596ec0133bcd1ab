"""The checks, each one unit in an ordered registry.

A ``Check`` says everything about one check in one place: its name, the
replica counts it runs on (its scope), what it asks of each side, what it
compares and its bar (for --help and docs/EQUIVALENCE.md), when it is
planned, and ``run``, which drives both sides and returns the judge's
``CheckResult``. The kit's own checks are one file each in ``checks/``
(driver, judge, hint and ``CHECK``), registered in the order of
``checks.ORDER``; tpu_ready asks the port's framework adapter
(pair/frameworks/). The plan, the order, the command's --help and the docs
table are all read from here, so a new check of the kit's is one file and
its name in ``checks.ORDER``; a team's own is one ``register`` call in its
own file, after the kit's:

  register(Check('toy', 'what it compares', AFTER, run=lambda run, _: ...))

Checks run in the order registered, scope by scope (``plan``): the
single-replica run first (ONCE and EACH checks), then each other replica
count (EACH), then AFTER and AFTER_EACH checks, with dropout on.
"""
import contextlib
import dataclasses
import textwrap
from typing import Callable
from typing import Iterator

from migration_tools.compare.bars import Bar
from migration_tools.compare.bars import bar_text  # noqa: F401 (the checks' spelling)

# On the single-replica run only, named bare ('inference').
ONCE = 'once'
# On every replica count, named by it ('one_step (2 replicas)').
EACH = 'each'
# Once, after the replica runs, with dropout on.
AFTER = 'after'
# After the replica runs, with dropout on, for each replica count.
AFTER_EACH = 'after each'
SCOPES = (ONCE, EACH, AFTER, AFTER_EACH)

# What the runs of a comparison are read with: the scope's words in --help.
_SCOPE_TEXT = {ONCE: '1 replica', EACH: 'each replica count',
               AFTER: 'once, dropout on', AFTER_EACH: 'each replica count, '
               'after the others'}


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a comparison is asked to run: replica labels ('1 replica' first)
  and the optional parts."""
  labels: tuple[str, ...]
  serving: bool = True
  tpu_ready: bool = True
  speed: bool = False


@dataclasses.dataclass(frozen=True)
class Check:
  """One check.

  name: its name ('one_step'); a check of several replica counts is
    reported as 'one_step (2 replicas)'.
  compares: what it compares, one sentence (docs table, --help).
  scope: ONCE, EACH, AFTER or AFTER_EACH.
  run: run(run, replicas) -> CheckResult, where run is the comparison's
    context.Run and replicas its context.Replicas for this replica count
    (None for AFTER). It raises to be an ERROR with the cause.
  needs: the questions it asks, as 'legacy.step' / 'port.step' (the side
    interface's methods), for the docs and the interface's tests.
  leaves: the fields of the comparison's context.Run it sets for the checks
    after it (inventory's 'pairs' and 'start'); a Run has no field that
    neither the harness gives (context.GIVEN) nor a check leaves.
  bar: its bars.Bar, built from the values in tolerances.py that its judge
    holds the port to, and handed to the judge; the docs table, --help and
    the report print its text() (one declaration). A string, as a team's
    check may give, is its words.
  planned: whether a plan runs it (e.g. only with --speed).
  bare_on_first: an EACH check named bare on the single-replica run
    ('inputs', 'inputs (2 replicas)').
  gate: a check whose failure stops the comparison; the reason the checks
    after it are NOT RUN.
  applies: applies(run, replicas) -> bool, asked when its turn comes, for
    what only the legacy graph tells (e.g. host_call, for a model_fn that
    has one): False leaves it out of the report, as a check not planned.
  """
  name: str
  compares: str
  scope: str
  run: Callable
  needs: tuple[str, ...] = ()
  leaves: tuple[str, ...] = ()
  bar: Bar | str = Bar()
  planned: Callable[[Plan], bool] = lambda plan: True
  bare_on_first: bool = False
  gate: str = ''
  applies: Callable | None = None

  def __post_init__(self):
    if self.scope not in SCOPES:
      raise ValueError(f'check {self.name}: scope {self.scope!r} is none of '
                       f'{SCOPES}')
    if isinstance(self.bar, str):  # Frozen: set as the dataclass sets it.
      object.__setattr__(self, 'bar', Bar(words=self.bar))

  def label(self, replicas: str | None, first: bool) -> str:
    """Its name in the report for this run ('1 replica')."""
    if self.scope in (ONCE, AFTER) or (first and self.bare_on_first):
      return self.name
    return f'{self.name} ({replicas})'


_REGISTRY: list[Check] = []


def register(check: Check) -> Check:
  """Adds a check after those registered before it; returns it."""
  if any(c.name == check.name for c in _REGISTRY):
    raise ValueError(f'a check named {check.name} is registered already')
  _REGISTRY.append(check)
  return check


def unregister(name: str) -> None:
  """Removes a check (tests that add a toy one)."""
  _REGISTRY[:] = [c for c in _REGISTRY if c.name != name]


@contextlib.contextmanager
def only(these: list[Check]) -> Iterator[None]:
  """The registry holds these checks alone, in this order, for the scope
  (a run order tried out: checks.load of another order)."""
  kept = list(_REGISTRY)
  _REGISTRY[:] = list(these)
  try:
    yield
  finally:
    _REGISTRY[:] = kept


def checks() -> list[Check]:
  """Every registered check, in order."""
  return list(_REGISTRY)


def of_scope(*scopes: str) -> list[Check]:
  return [c for c in _REGISTRY if c.scope in scopes]


def plan(p: Plan) -> list[tuple[Check, str | None, str]]:
  """[(check, replica label or None, report name)] in the order they run."""
  steps = []
  for index, label in enumerate(p.labels):
    for check in of_scope(ONCE, EACH) if index == 0 else of_scope(EACH):
      if check.planned(p):
        steps.append((check, label, check.label(label, index == 0)))
  for check in of_scope(AFTER):
    if check.planned(p):
      steps.append((check, None, check.label(None, False)))
  for check in of_scope(AFTER_EACH):
    if check.planned(p):
      steps += [(check, label, check.label(label, False))
                for label in p.labels]
  return steps


def names(p: Plan) -> list[str]:
  """The report's names, in order."""
  return [name for _, _, name in plan(p)]


def help_text() -> str:
  """The checks for --help: a paragraph each."""
  return '\n'.join(textwrap.fill(
      f'{c.name} [{_SCOPE_TEXT[c.scope]}]: {c.compares}; bar: '
      f'{c.bar.text() or "none"}'.replace('`', '').replace('**', ''), 79,
      initial_indent='  ', subsequent_indent='      ') for c in _REGISTRY)


def markdown_table() -> str:
  """docs/EQUIVALENCE.md's table of the checks."""
  rows = ['| check | compares | bar |', '| --- | --- | --- |']
  for c in _REGISTRY:
    scope = {ONCE: '', AFTER: '', EACH: ' (each replica count)',
             AFTER_EACH: ' (each replica count)'}[c.scope]
    rows.append(f'| `{c.name}`{scope} | {c.compares} | {c.bar.text()} |')
  return '\n'.join(rows)
