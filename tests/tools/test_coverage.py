"""The report's coverage (compare/coverage.py): each behaviour of the legacy
step the checks found, and whether a compared state exercised it, read from
the checks' results; and where the clipping check finds a clip engaged."""
from migration_tools.compare import coverage
from migration_tools.compare.checks import clipping
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import PASSED
from migration_tools.compare.verdict import SKIPPED

_CLIP = {'kind': 'global norm', 'where': 'model.py:12', 'tensors': 4}


def _clipping(label, status, step, state='recorded', message=''):
  return CheckResult(f'clipping ({label})', status, message, figures={
      'clips': [_CLIP], 'engaged_step': step, 'state': state, 'gain': 2.0})


def test_a_clip_engaged_on_any_replica_count_is_exercised():
  [found] = coverage.read([
      _clipping('1 replica', PASSED, 2),
      _clipping('2 replicas', NOT_RUN, None, 'made', 'never engaged')])
  assert found.name == 'gradient clipping by global norm (model.py:12)'
  assert found.exercised
  assert found.how == ('engaged at step 2 of the pass at identical state '
                       '(1 replica), compared by clipping')


def test_a_clip_that_failed_where_it_engaged_was_exercised_all_the_same():
  [found] = coverage.read([_clipping('1 replica', FAILED, 1, 'made')])
  assert found.exercised and 'a state made for it (gain 2)' in found.how


def test_a_clip_that_never_engaged_is_not_exercised_and_says_why():
  behaviours = coverage.read([
      _clipping('1 replica', NOT_RUN, None, 'made', 'the legacy clip never '
                'engaged')])
  assert [b.exercised for b in behaviours] == [False]
  [line] = coverage.lines(behaviours)
  assert line.startswith('Not exercised: gradient clipping by global norm '
                         '(model.py:12): (1 replica) the legacy clip never')
  report = coverage.to_json(behaviours)
  assert report['not_exercised'] == [behaviours[0].name]
  assert report['not_read']  # What the kit does not read, said.


def test_draws_are_exercised_only_where_dropout_compared_them():
  inventory = CheckResult('inventory', PASSED, figures={
      'random_ops_switched_off': {'a/RandomUniform': 'dropout',
                                  'b/RandomUniform': 'drop connect'}})
  skipped = CheckResult('dropout (1 replica)', SKIPPED, 'masks unaligned',
                        figures={'legacy_draws': ['a/RandomUniform']})
  [found] = coverage.read([inventory, skipped])
  assert not found.exercised
  assert found.name == ('random draws of the step (2 ops: drop connect, '
                        'dropout)')
  assert found.how.endswith('not compared drawn: masks unaligned')
  compared = CheckResult('dropout (1 replica)', PASSED, figures={
      'legacy_draws': ['a/RandomUniform']})
  [found] = coverage.read([CheckResult('inventory', PASSED), compared])
  assert found.exercised and found.name == ('random draws of the step (1 op: '
                                            'dropout)')


def test_a_step_that_draws_and_clips_nothing_lists_nothing():
  assert coverage.read([
      CheckResult('inventory', PASSED, figures={
          'random_ops_switched_off': {}}),
      CheckResult('dropout (1 replica)', PASSED, figures={
          'legacy_draws': []})]) == []


def test_a_host_call_not_compared_is_not_exercised():
  [found] = coverage.read([CheckResult(
      'host_call', SKIPPED, 'the port gives no Port.host_call',
      figures={'names': ['loss', 'lr']})])
  assert found.name == 'host_call (2 values)' and not found.exercised


def test_the_engaged_step_is_the_first_with_a_norm_above_its_threshold():
  assert clipping.engaged_step([None, [[0.5, 1.0]], [[1.5, 1.0]],
                                [[3.0, 1.0]]]) == 3
  assert clipping.engaged_step([[[1.0, 1.0]], None]) is None
  # Any of several clips (one per tensor) engaging is a clip compared.
  assert clipping.engaged_step([[[0.1, 1.0], [2.0, 1.0]]]) == 1


def test_a_schedule_is_exercised_where_it_was_compared_and_not_when_flat():
  shape = {'legacy_shape': 'rises to 0.001 at step 2', 'steps_compared': 114,
           'last_step': 8829358, 'constant': False}
  [found] = coverage.read([CheckResult('schedule', PASSED, figures=shape)])
  assert found.exercised and found.name == (
      'learning-rate schedule (rises to 0.001 at step 2)')
  assert found.how == ('compared at 114 global steps from 0 to 8,829,358 by '
                       'schedule')
  [found] = coverage.read([CheckResult(
      'schedule', SKIPPED, "the port's rate cannot be read", figures=shape)])
  assert not found.exercised and found.how == "the port's rate cannot be read"
  # A constant rate is no schedule to exercise.
  assert coverage.read([CheckResult('schedule', PASSED, figures={
      **shape, 'constant': True})]) == []


def test_the_verdict_is_fail_then_not_exercised_then_pass():
  left = coverage.read([_clipping('1 replica', NOT_RUN, None, 'made',
                                  'never engaged')])
  engaged = coverage.read([_clipping('1 replica', PASSED, 2)])
  passing = [CheckResult('one_step (1 replica)', PASSED)]
  failing = [CheckResult('one_step (1 replica)', FAILED, 'differs')]
  # A failure is a failure, whatever was exercised.
  assert coverage.verdict(failing, left) == coverage.FAIL
  assert coverage.verdict(passing, left) == coverage.NOT_EXERCISED
  assert coverage.verdict(passing, engaged) == coverage.PASS
  assert coverage.verdict(passing, []) == coverage.PASS  # Nothing to exercise.
  assert [coverage.EXIT_CODES[v] for v in (
      coverage.PASS, coverage.FAIL, coverage.NOT_EXERCISED)] == [0, 1, 3]
  line = coverage.verdict_line(coverage.NOT_EXERCISED, left)
  assert line == (
      'Verdict: not a pass, no check failed but 1 behaviour of the legacy '
      'step was compared at no state (gradient clipping by global norm '
      '(model.py:12)): "Not exercised" above says why and what to do (exit '
      'code 3)')
  assert coverage.verdict_line(coverage.PASS, engaged) == (
      'Verdict: pass (exit code 0)')


def _inventory(entry: dict) -> CheckResult:
  return CheckResult('inventory', PASSED, figures={'train_state': {
      'w': {'role': 'weights', 'moved': True},
      'w/ExponentialMovingAverage': {'role': 'moving average', 'moved': True,
                                     'of': 'w', 'decay': 0.9999, **entry}}})


def test_moving_averages_are_exercised_where_the_port_keeps_them():
  kept = _inventory({'compared_by': 'inventory (its start), updates'})
  [found] = coverage.read([kept, CheckResult('updates (1 replica)', PASSED)])
  assert found.name == 'moving averages of 1 variable (decay 0.9999)'
  assert found.exercised and found.how.endswith('by updates')
  # Declared not compared by the port: named, with what to do.
  declared = _inventory({'not_compared': 'declared by the port: no EMA'})
  [left] = coverage.read([declared,
                          CheckResult('updates (1 replica)', PASSED)])
  assert not left.exercised and left.how.startswith(
      '1 not compared (w/ExponentialMovingAverage: declared by the port: '
      'no EMA): keep them')
  # No step compared (a --fail_fast stop before them): not exercised.
  [unstepped] = coverage.read([kept, CheckResult('updates (1 replica)',
                                                 NOT_RUN, 'stopped')])
  assert not unstepped.exercised
