"""The checks' registry: a check added in one file is planned, run, reported
and listed in --help; the harness's control flow reads no message text; a
long check shows its progress."""
import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, TOOLS_PYTHONPATH
from kit_core import errors
from kit_core import progress as progress_lib
from migration_tools.compare import bars
from migration_tools.compare import checks
from migration_tools.compare import context
from migration_tools.compare import harness
from migration_tools.compare import registry

# The command with the toy check of tests/user_code/toy_check.py added,
# imported after the command so that its module sets up TensorFlow first.
_WITH_TOY = ('import sys; from migration_tools.compare import command; '
             'import toy_check; sys.argv[0] = "migration-compare"; '
             'command.run()')


@pytest.fixture
def toy(monkeypatch):
  monkeypatch.syspath_prepend(os.path.join(REPO, 'tests', 'user_code'))
  import toy_check  # pylint: disable=import-outside-toplevel
  if toy_check.CHECK not in registry.checks():
    registry.register(toy_check.CHECK)
  yield toy_check.CHECK
  registry.unregister(toy_check.CHECK.name)


def test_a_registered_check_joins_the_plan_help_and_docs_table(toy):
  plan = registry.Plan(('1 replica', '2 replicas'), speed=True)
  names = registry.names(plan)
  # AFTER: once, after the replica runs and the kit's own AFTER checks.
  assert names[-4:] == ['tpu_ready', 'toy_wait', 'speed (1 replica)',
                        'speed (2 replicas)']
  assert harness.planned_checks(['1 replica'], serving=False)[-1] == 'toy_wait'
  assert 'toy_wait [once, dropout on]: nothing: it waits' in (
      registry.help_text())
  assert '| `toy_wait` | nothing: it waits' in registry.markdown_table()


def test_without_it_the_plan_is_the_kits_own():
  names = registry.names(registry.Plan(('1 replica',), serving=False,
                                       tpu_ready=False))
  assert 'toy_wait' not in names and 'served_predictions' not in names
  assert names[0] == 'inventory' and names[-1] == 'dropout (1 replica)'


def test_the_docs_table_is_the_registrys():
  with open(os.path.join(REPO, 'docs', 'EQUIVALENCE.md'),
            encoding='utf-8') as f:
    assert registry.markdown_table() in f.read(), (
        'docs/EQUIVALENCE.md: paste registry.markdown_table() over its table')


def test_a_check_is_registered_once_and_in_a_known_scope():
  with pytest.raises(ValueError, match='registered already'):
    registry.register(registry.checks()[0])
  with pytest.raises(ValueError, match='scope'):
    registry.Check('bad', 'nothing', 'sometimes', run=lambda run, r: None)


def test_each_check_says_what_it_asks_of_the_sides():
  for check in registry.checks():
    assert all(need.split('.')[0] in ('legacy', 'port')
               for need in check.needs), check.name
    if check.scope in (registry.ONCE, registry.EACH):
      assert check.needs, check.name


# The harness's control flow: what decides which check runs, stops or is
# judged how. Messages are for the user only.
# Each check's driver (its file's drive) is control flow too; its judge
# writes the message.
_CONTROL_FLOW = ('harness.py', 'passes.py', 'registry.py', 'context.py')


def _reads_of_text(path: str, function: str = '') -> list[str]:
  """Where path (only its function of that name, if given) reads a
  message: .message, a string tested with `in`, or .startswith /
  .endswith."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  if function:
    tree = ast.Module([n for n in tree.body if isinstance(
        n, ast.FunctionDef) and n.name == function], [])
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and node.attr == 'message':
      found.append(f'{path}:{node.lineno} reads .message')
    elif isinstance(node, ast.Attribute) and node.attr in ('startswith',
                                                           'endswith'):
      found.append(f'{path}:{node.lineno} calls .{node.attr}')
    elif isinstance(node, ast.Compare) and any(
        isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
            isinstance(side, (ast.Constant, ast.JoinedStr))
            and isinstance(getattr(side, 'value', ''), str)
            for side in [node.left, *node.comparators]):
      found.append(f'{path}:{node.lineno} tests a string with in')
  return found


def test_no_message_text_steers_the_harness():
  folder = os.path.join(REPO, 'migration_tools', 'compare')
  drivers = [os.path.join(folder, 'checks', f'{name}.py')
             for name in checks.ORDER]
  assert sum((_reads_of_text(os.path.join(folder, name))
              for name in _CONTROL_FLOW), []) == []
  assert sum((_reads_of_text(path, 'drive') for path in drivers), []) == []
  # Each check's file has its driver, for the scan above to read.
  assert all('def drive(' in open(path, encoding='utf-8').read()
             for path in drivers)


def test_the_reader_sees_message_text_in_control_flow(tmp_path):
  # A failure here means the test above proves nothing.
  path = tmp_path / 'old.py'
  path.write_text("if 'not as on' in reference:\n  result.message += 'x'\n"
                  "names = [n for n in x if n.endswith('(2)')]\n")
  assert len(_reads_of_text(str(path))) == 3


def test_a_result_is_never_edited():
  result = checks.CheckResult('a', checks.PASSED)
  with pytest.raises(AttributeError):
    result.message = 'edited'  # pytype: disable=not-writable


def test_a_signal_is_no_checks_error():
  rec = harness.Recorder(['a', 'b'])

  def stopped():
    raise errors.Interrupted('SIGTERM', 'no report was written')
  with pytest.raises(errors.Interrupted):
    rec.run('a', stopped)


def test_each_check_prints_a_line_with_its_time_as_it_ends():
  lines = []
  rec = harness.Recorder(['a', 'b', 'c'], progress_lib.Progress(lines.append))
  rec.run('a', lambda: checks.judged('a', 0.0, 1.0, {}, ''))
  assert len(lines) == 1 and lines[0].startswith('PASS a: max diff 0 ')
  assert lines[0].endswith(' s)')
  rec.run('b', lambda: 1 / 0)
  assert lines[1].startswith('ERROR b: ZeroDivisionError')
  rec.stopped = 'b failed'
  rec.results()
  assert lines[2] == 'NOT RUN c: b failed'


def test_fail_fast_ends_the_comparison_at_the_first_check_to_fail():
  failing = lambda: checks.judged('b', 1.0, 1e-6, {}, '')
  whole = harness.Recorder(['a', 'b', 'c'])
  whole.run('a', lambda: checks.judged('a', 0.0, 1.0, {}, ''))
  assert whole.run('b', failing).status == checks.FAILED
  assert not whole.stopped  # Without it every check runs.
  lines = []
  rec = harness.Recorder(['a', 'b', 'c', 'd'],
                         progress_lib.Progress(lines.append), fail_fast=True)
  rec.run('a', lambda: checks.judged('a', 0.0, 1.0, {}, ''))
  assert not rec.stopped  # A pass goes on.
  rec.run('b', failing)
  assert rec.stopped.startswith('--fail_fast stopped the comparison at b, '
                                'the first check to fail')
  statuses = [r.status for r in rec.results()]
  assert statuses == [checks.PASSED, checks.FAILED, checks.NOT_RUN,
                      checks.NOT_RUN]
  assert lines[-1] == f'NOT RUN d: {rec.stopped}'
  # An error stops it as a failure does.
  raised = harness.Recorder(['a', 'b'], fail_fast=True)
  raised.run('a', lambda: 1 / 0)
  assert raised.stopped.startswith('--fail_fast stopped the comparison at a')


def test_after_a_check_raised_a_missing_answer_does_not_blame_the_bundle():
  # A replay asks the legacy side in the recorded order: a port that
  # raises breaks it, and the next check finds no answer. That is not the
  # bundle's fault (it replays a correct port whole): the line says so.
  from migration_tools.pair import recorded  # pylint: disable=import-outside-toplevel

  def unanswered():
    raise recorded.NoAnswer("the bundle holds no answer to 'x': record it "
                            'again')
  alone = harness.Recorder(['b'])
  assert alone.run('b', unanswered).status == checks.ERROR
  assert 'record it again' in alone.results()[0].message
  rec = harness.Recorder(['a', 'b'])
  rec.run('a', lambda: 1 / 0)
  after = rec.run('b', unanswered)
  assert after.status == checks.NOT_RUN and not after.failed
  assert after.message == (
      'a raised first, which broke the order in which the '
      'bundle\'s legacy answers are asked; fix that error and run again')
  assert 'record it again' not in after.message


def test_the_heartbeat_says_what_runs_while_nothing_ends():
  lines = []
  progress = progress_lib.Progress(lines.append, interval=0.1)
  with progress.heartbeat():
    progress.now('updates (2 replicas): step 3 of 5')
    deadline = time.monotonic() + 10
    while len(lines) < 2 and time.monotonic() < deadline:
      time.sleep(0.05)
  assert len(lines) >= 2, lines
  assert lines[0].startswith('... updates (2 replicas): step 3 of 5 (')
  silent = progress_lib.Progress(None, interval=0.01)
  with silent.heartbeat():
    silent.now('x')  # --quiet: nothing, and no thread to stop.


@pytest.mark.e2e
@pytest.mark.estimator
def test_the_command_runs_reports_and_lists_a_check_added_in_one_file(
    tmp_path, fake_data_dir):
  env = dict(os.environ, PYTHONPATH=TOOLS_PYTHONPATH,
             KIT_PROGRESS_SECONDS='0.5', TOY_CHECK_SECONDS='3')
  command = [sys.executable, '-c', _WITH_TOY]
  shown = subprocess.run([*command, '--help'], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120,
                         check=False)
  assert shown.returncode == 0 and 'toy_wait [once, dropout on]' in (
      shown.stdout), shown.stdout[-2000:]
  report = tmp_path / 'report.json'
  params = json.dumps({'learning_rate': 0.05,
                       'data_dir': fake_data_dir.data_dir})
  result = subprocess.run(
      [*command, '--steps=2', '--replicas=1', '--eval_batches=1',
       '--notpu_ready', f'--params={params}', f'--report={report}'],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  with open(report, encoding='utf-8') as f:
    names = [c['name'] for c in json.load(f)['checks']]
  assert names[-2:] == ['dropout (1 replica)', 'toy_wait']
  lines = result.stdout.splitlines()
  # A line per check as it ends, in the report's order, each with its time.
  ended = [line for line in lines if line.split(' ')[0] in ('PASS', 'SKIP')]
  timed = [re.fullmatch(r'(?:PASS|SKIP) (.*?)(?:: .*)? \([\d.]+ s\)', line)
           for line in ended]
  assert all(timed), ended
  assert [match.group(1) for match in timed] == names
  # While the toy check waited 3 s, a line at least every 0.5 s said so.
  waiting = [line for line in lines if line.startswith('... toy_wait: ')]
  assert len(waiting) >= 3, result.stdout
  assert lines.index(waiting[-1]) < lines.index(ended[-1])
  assert ended[-1].startswith('PASS toy_wait: waited 3 s (3.')
  # The counts, what the comparison exercised of the legacy step, the
  # verdict, the files.
  assert lines[-4:] == [f'Checks: {len(names)} passed',
                        'Exercised: random draws of the step (1 op: '
                        'dropout): drawn on both sides with the random '
                        'numbers aligned, compared by dropout; '
                        'learning-rate schedule (falls to 0.00136029 at '
                        'step 8,829,358): compared at 114 global steps '
                        'from 0 to 8,829,358 by schedule',
                        'Verdict: pass (exit code 0)',
                        f'Report: {report}, plot: {tmp_path}/report.png']


# A variant of the progress lines the test above covers: the catalogue.
@pytest.mark.e2e
@pytest.mark.catalogue
@pytest.mark.estimator
def test_quiet_prints_the_results_at_the_end_only(tmp_path, fake_data_dir):
  params = json.dumps({'learning_rate': 0.05,
                       'data_dir': fake_data_dir.data_dir})
  report = tmp_path / 'report.json'
  env = dict(os.environ, PYTHONPATH=TOOLS_PYTHONPATH,
             KIT_PROGRESS_SECONDS='0.2')
  result = subprocess.run(
      [sys.executable, '-m', 'migration_tools.compare', '--quiet',
       '--steps=2', '--replicas=1', '--eval_batches=1', '--notpu_ready',
       f'--params={params}', f'--report={report}'], cwd=REPO, env=env,
      capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert not any(line.startswith('...') for line in lines), lines
  # Where the port ran, the results without their times, then the report.
  assert lines[0].startswith('Ran on: cpu (CPU), 1 device; tensorflow ')
  assert lines[1] == 'PASS inventory'
  assert lines[-1].startswith('Report: ')


def test_a_signal_inside_a_shared_pass_stops_the_comparison():
  # The pass over the trajectory turns a step's error into the reason the
  # checks after it cannot run; a signal it must let through.
  from types import SimpleNamespace  # pylint: disable=import-outside-toplevel
  from migration_tools.compare import passes  # pylint: disable=import-outside-toplevel
  steps = []

  def step(features, labels):
    del features, labels
    steps.append(1)
    if len(steps) == 3:
      raise errors.Interrupted('SIGTERM', 'no report was written')
    return {'loss': 0.0}
  batches = [(None, None)] * 4
  run = SimpleNamespace(batches=batches,
                        progress=progress_lib.Progress(None))
  side = SimpleNamespace(step=step, reordered_step=lambda f, l: None)
  replicas = context.Replicas('1 replica', None, side, side)
  with pytest.raises(errors.Interrupted):
    passes.trajectory(run, replicas)
  broken = lambda f, l: 1 / 0
  replicas = context.Replicas('1 replica', None, side, SimpleNamespace(
      step=broken, reordered_step=lambda f, l: None))
  steps.clear()
  steps.append(-10)  # No signal this time.
  # The check that takes the first step gets its error; those after it, why
  # they cannot run.
  with pytest.raises(ZeroDivisionError):
    passes.trajectory(run, replicas)
  with pytest.raises(context.Upstream, match='the first step raised'):
    passes.trajectory(run, replicas)


def test_each_bars_figures_are_the_values_its_judge_holds():
  # A check owns its bar: the text is written from tolerances.py's values,
  # so no figure in it can drift from the one the judge compares with.
  from migration_tools import tolerances  # pylint: disable=g-import-not-at-top
  values = {registry.bar_text(v) for k, v in vars(tolerances).items()
            if k.isupper() and isinstance(v, float) and v < 1}
  values |= {f'{tolerances.SPEED_MARGIN:.0%}', f'{tolerances.NOISE_MULTIPLE:g}',
             f'{tolerances.DRIFT_MULTIPLE:g}', str(tolerances.DRIFT_DRAWS),
             str(tolerances.ONE_STEP_ULPS), str(tolerances.UPDATE_ULPS)}
  for check in registry.checks():
    assert isinstance(check.bar, bars.Bar), check.name
    text = check.bar.text()
    figures = re.findall(r'(?<![\w^-])\d+(?:\.\d+)?(?:e-?\d+|%)?(?=[x ;,)]|$)',
                         text)
    assert set(figures) <= values, (check.name, text)
  one_step = {c.name: c.bar for c in registry.checks()}['one_step']
  assert (one_step.atol, one_step.ulps) == (tolerances.ONE_STEP_ATOL,
                                            tolerances.ONE_STEP_ULPS)


def _words(text: str) -> str:
  return ' '.join(text.replace('`', '').replace('**', '').split())


def test_help_the_docs_table_and_the_report_print_the_bar_the_check_holds():
  # One declaration: --help, the docs table and each report row are made
  # from the check's Bar, so they cannot say another bar.
  help_text, table = _words(registry.help_text()), registry.markdown_table()
  for check in registry.checks():
    assert _words(check.bar.text()) in help_text, check.name
    assert f'| {check.bar.text()} |' in table, check.name
  check = {c.name: c for c in registry.checks()}['one_step']
  rec = harness.Recorder(['one_step (1 replica)', 'never'], None,
                         {'one_step (1 replica)': check.bar})
  rec.run('one_step (1 replica)',
          lambda: checks.CheckResult('x', checks.PASSED))
  first, never = [r.to_json() for r in rec.results()]
  assert first['status'] == checks.PASSED and never['status'] == (
      checks.NOT_RUN)
  assert first['bar'] == check.bar.to_json()
  assert first['bar']['text'] == check.bar.text() and 'bar' not in never


def test_a_judge_holds_the_port_to_the_bar_it_is_given():
  # The judges read their bar from the Bar they receive (their check's by
  # default): the same figures pass at the declared bar and fail at a
  # tighter one.
  from migration_tools.compare.checks import dropout  # pylint: disable=g-import-not-at-top
  from migration_tools.compare.checks import inputs  # pylint: disable=g-import-not-at-top
  from migration_tools.compare.checks import learning_rate  # pylint: disable=g-import-not-at-top
  from migration_tools.compare.checks import stepwise  # pylint: disable=g-import-not-at-top
  tight = bars.Bar(atol=1e-11, rtol=1e-12, scale='the legacy rate')
  batch = ({'x': np.zeros(4, np.float32)}, np.zeros(4, np.int32))
  nudged = ({'x': np.full(4, 5e-7, np.float32)}, np.zeros(4, np.int32))
  assert inputs.judge(batch, nudged).passed
  assert not inputs.judge(batch, nudged, bar=tight).passed
  per_step = np.array([0.0, 5e-7])
  assert stepwise.judge('s', per_step).passed
  assert not stepwise.judge('s', per_step, bar=tight).passed
  assert dropout.judge('d', per_step, [1.0, 1.0]).tolerance == (
      dropout.BAR.atol)
  rates = [1e-3, 1e-3 * (1 + 1e-7)]
  assert learning_rate.judge('r', rates[:1], rates[1:]).passed
  assert not learning_rate.judge('r', rates[:1], rates[1:], bar=tight).passed


_TOY_IN_ORDER = '''"""toy_in_order: a check of the kit's, as one file in compare/checks/."""
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import PASSED


def drive(run, replicas):
  del run, replicas
  return CheckResult('toy_in_order', PASSED)


CHECK = Check('toy_in_order', 'nothing: its place in the run order', ONCE,
              drive, needs=('port.predict',), bar='none')
'''


def test_a_check_of_the_kits_is_one_file_and_one_line_of_the_order(
    tmp_path, monkeypatch):
  # The file, where the package finds it (here: a folder added to its
  # path, as the tests write nothing into the kit's own tree), and its name
  # after inference in checks.ORDER: it runs there, and --help and the docs
  # table list it there.
  (tmp_path / 'toy_in_order.py').write_text(_TOY_IN_ORDER)
  monkeypatch.setattr(checks, '__path__', [*checks.__path__, str(tmp_path)])
  monkeypatch.setitem(sys.modules,
                      'migration_tools.compare.checks.toy_in_order', None)
  monkeypatch.delitem(sys.modules,
                      'migration_tools.compare.checks.toy_in_order')
  at = checks.ORDER.index('inference') + 1
  order = (*checks.ORDER[:at], 'toy_in_order', *checks.ORDER[at:])
  plan = registry.Plan(('1 replica', '2 replicas'))
  monkeypatch.setattr(checks, 'toy_in_order', None, raising=False)
  with registry.only(checks.load(order)):
    names = registry.names(plan)
    assert names[names.index('inference') + 1] == 'toy_in_order'
    assert names.count('toy_in_order') == 1  # ONCE: the first run only.
    assert 'toy_in_order [1 replica]: nothing: its place' in (
        registry.help_text())
    assert '| `toy_in_order` | nothing: its place' in (
        registry.markdown_table())
  # Without the line, the kit's own order and nothing else.
  assert 'toy_in_order' not in registry.names(plan)
  assert [c.name for c in checks.load()] == [
      c.name for c in registry.checks()][:len(checks.ORDER)]


def test_a_run_keeps_only_what_the_harness_gives_and_the_checks_leave():
  # A check declares what it leaves for the checks after it, as it declares
  # what it needs: every other field of a Run is the harness's, and a Run
  # takes no undeclared attribute.
  fields = {f.name for f in dataclasses.fields(context.Run)}
  left = [name for c in registry.checks() for name in c.leaves]
  assert len(left) == len(set(left)), left  # One check leaves each.
  assert fields == set(context.GIVEN) | set(left)
  run = context.Run(None, None, None, [], None, '', None)
  with pytest.raises(AttributeError):
    run.undeclared = 1  # pylint: disable=attribute-defined-outside-init


def test_each_check_sets_only_the_run_fields_it_declares():
  # Read from each check's file: every `run.<field> = ...` (and
  # `run.a, run.b = ...`) is a field its CHECK declares it leaves.
  found = {}
  for name in checks.ORDER:
    path = os.path.join(REPO, 'migration_tools', 'compare', 'checks',
                        f'{name}.py')
    with open(path, encoding='utf-8') as f:
      tree = ast.parse(f.read())
    targets = [t for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for t in node.targets]
    targets += [e for t in list(targets) if isinstance(t, ast.Tuple)
                for e in t.elts]
    found[name] = {t.attr for t in targets if isinstance(t, ast.Attribute)
                   and isinstance(t.value, ast.Name) and t.value.id == 'run'}
  declared = {n: set(c.leaves) for n, c in zip(checks.ORDER, checks.load())}
  assert found == declared
