"""Each check of migration-compare on numpy inputs: what it passes, what it
fails, and what its message says. The harness feeds them what the runners
computed; here the figures are made by hand."""
import numpy as np
import pytest

from migration_tools import tolerances
from migration_tools.compare import checks

W = {'dense/kernel': np.ones((2, 3), np.float32),
     'dense/bias': np.zeros(3, np.float32)}


def _step(loss=1.0, scale=1.0, rate=0.1, examples=64):
  """What a runner's step returns: its loss, gradients and rate."""
  return {'loss': loss, 'learning_rate': rate, 'examples': examples,
          'gradients': {k: v * 0.5 * scale + 0.25 for k, v in W.items()}}


def _state(delta=0.0, moving=None):
  state = {k: v + delta for k, v in W.items()}
  if moving is not None:
    state['bn/moving_mean'] = np.full(3, moving, np.float32)
  return state


def test_one_step_passes_equal_steps():
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(),
                           _state(), _state(), 1)
  assert result.passed and result.max_abs_diff == 0.0
  # No slot was compared: the report says none, not 0.
  assert result.figures['slots_diff'] is None


def test_one_step_at_a_rate_of_0_says_the_update_is_judged_later():
  result = checks.one_step.judge('one_step (1 replica)', _step(rate=0.0),
                           _step(rate=0.0), _state(), _state(), 1)
  assert result.passed
  assert result.message.startswith('the learning rate was 0 at this step on '
                                   'both sides (e.g. a warmup from 0)')
  assert checks.one_step.judge('one_step (1 replica)', _step(), _step(), _state(),
                         _state(), 1).message == ''


def test_one_step_names_a_gradient_scale_of_the_replica_count():
  ours = _step()
  ours['gradients'] = {k: v * 2 for k, v in ours['gradients'].items()}
  result = checks.one_step.judge('one_step (2 replicas)', _step(), ours, _state(),
                           _state(), 2)
  assert result.failed
  assert result.figures['gradient_scale_ratio'] == pytest.approx(2.0)
  assert "the port's gradients are 2x the legacy ones" in result.message
  assert 'averaged over each replica' in result.message


def test_one_step_takes_gradients_as_the_legacy_optimizer_received_them():
  # A model_fn that takes its own gradients (BERT's tf.gradients) hands
  # CrossShardOptimizer each core's mean loss's: 2x the mean on 2 cores. A
  # port whose optimizer receives the same is compared in those units.
  theirs, ours = _step(), _step()
  theirs['received_scale'] = 2
  ours['gradients'] = {k: v * 2 for k, v in ours['gradients'].items()}
  result = checks.one_step.judge('one_step (2 replicas)', theirs, ours, _state(),
                           _state(), 2)
  assert result.passed, result.message
  assert result.figures['gradient_diff'] == 0
  assert result.figures['legacy_gradients_as'] == (
      "received by its optimizer (2x the mean: the cores' sum)")
  # The mean is compared as before, and a third scale is still named.
  assert checks.one_step.judge('one_step (2 replicas)', theirs, _step(), _state(),
                         _state(), 2).passed
  ours['gradients'] = {k: v * 4 for k, v in _step()['gradients'].items()}
  result = checks.one_step.judge('one_step (2 replicas)', theirs, ours, _state(),
                           _state(), 2)
  assert "the port's gradients are 2x the legacy ones" in result.message


def test_one_step_puts_other_examples_before_the_gradients():
  result = checks.one_step.judge('one_step (2 replicas)', _step(),
                           _step(scale=3, examples=128), _state(), _state(),
                           2)
  assert result.message.startswith(
      "one step differs: the port's replicas took 128 examples")


def test_one_step_blames_the_update_when_loss_and_gradients_agree():
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(),
                           _state(), _state(delta=1e-3), 1)
  assert result.failed
  assert 'the updated weights differ by 0.001' in result.message


def test_one_step_names_state_updated_outside_the_optimizer():
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(),
                           _state(moving=0.5), _state(moving=0.25), 1)
  assert result.failed
  assert 'bn/moving_mean differs by 0.25' in result.message


def test_one_step_compares_slots_when_both_sides_read_them():
  slot = ('dense/kernel', 'momentum')
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(),
                           _state(), _state(), 1, {slot: np.ones(3)},
                           {slot: np.ones(3) * 2})
  assert result.failed and result.figures['worst_slot'] == (
      'dense/kernel/momentum')
  assert 'slot dense/kernel/momentum differs by 1' in result.message


def test_one_step_says_when_a_slot_is_missing_in_the_port():
  slot = ('dense/kernel', 'momentum')
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(),
                           _state(), _state(), 1, {slot: np.ones(3)}, {})
  assert result.failed and result.figures['slots_diff'] == float('inf')


def test_learning_rate_names_the_step_where_the_rates_part():
  result = checks.learning_rate.judge('learning_rate (1 replica)',
                                [0.1, 0.1, 0.09], [0.1, 0.1, 0.1])
  assert result.failed and result.figures['first_step_over_tolerance'] == 3
  assert 'part at step 3 (0.09 vs 0.1)' in result.message
  assert checks.learning_rate.judge('lr', [0.1, 0.2], [0.1, 0.2]).passed


def test_trajectory_judged_each_step_names_where_losses_part():
  theirs = [1.0, 0.9, 0.8, 0.7]
  ours = [1.0, 0.9, 0.8 + 1e-3, 0.7 + 2e-3]
  result = checks.trajectory.judge('trajectory (1 replica)', theirs, ours, W, W)
  assert result.failed and result.figures['first_step_over_tolerance'] == 3
  assert 'earlier steps agree, so something builds up' in result.message
  same = checks.trajectory.judge('trajectory (1 replica)', theirs, theirs, W, W)
  assert same.passed and same.figures['bit_identical']


def test_trajectory_not_judged_each_step_needs_finite_losses():
  free = checks.trajectory.judge('trajectory (2 replicas)', [1.0, 0.9],
                           [1.0, 0.5], W, W, judge_each_step=False)
  assert free.passed and free.tolerance is None
  diverged = checks.trajectory.judge('trajectory (2 replicas)', [1.0, 0.9],
                               [1.0, float('nan')], W, W,
                               judge_each_step=False)
  assert diverged.failed
  assert "the port's loss is not finite at step 2" in diverged.message


def test_trajectory_needs_equal_global_steps():
  result = checks.trajectory.judge('trajectory (2 replicas)', [1.0], [1.0], W, W,
                             global_steps=(10, 20))
  assert result.failed
  assert 'legacy global step is 10 and the port\'s optimizer step 20' in (
      result.message)


def test_stepwise_names_the_first_step_over_its_bar():
  per_step = np.array([0.0, 1e-7, 3e-6, 0.0])
  result = checks.stepwise.judge('stepwise (1 replica)', per_step)
  assert result.failed and result.figures['first_step_over_tolerance'] == 3
  assert result.max_abs_diff == pytest.approx(3e-6)
  assert checks.stepwise.judge('stepwise', np.zeros(4)).passed


def test_evaluation_holds_metrics_relative_to_their_size():
  theirs = {'accuracy': 0.5, 'loss': 100.0}
  assert checks.evaluation.judge(theirs, {'accuracy': 0.5, 'loss': 100.0001}, {},
                           64).passed
  result = checks.evaluation.judge(theirs, {'acc': 0.5, 'loss': 100.0},
                             {}, 64)
  assert result.failed and 'no metric for accuracy' in result.message
  assert checks.evaluation.judge(theirs, {'acc': 0.5, 'loss': 100.0},
                           {'accuracy': 'acc'}, 64).passed


def test_inventory_lists_missing_extra_and_reshaped_variables():
  theirs = {'a': np.zeros(2), 'b': np.zeros(3), 'c': np.zeros(4)}
  ours = {'a': np.zeros(2), 'b': np.zeros(4), 'd': np.zeros(1)}
  result = checks.inventory.judge(theirs, ours)
  assert result.failed
  assert result.figures['missing_in_port'] == ['c']
  assert result.figures['extra_in_port'] == ['d']
  assert result.figures['wrong_shape'] == ['b']
  assert 'of another shape: b (legacy [3], port [4])' in result.message
  assert checks.inventory.judge(theirs, dict(theirs)).passed
  # Both shapes, and a transposed kernel said to be one.
  kernel = checks.inventory.judge({'dense/kernel': np.zeros((3, 5))},
                            {'dense/kernel': np.zeros((5, 3))})
  assert ('of another shape: dense/kernel (legacy [3, 5], port [5, 3], '
          'transposed)') in kernel.message, kernel.message


def test_inventory_fails_on_a_draw_left_and_says_which_masks_it_switched_off():
  state = {'a': np.zeros(2)}
  left = {'noise/RandomStandardNormal': 'RandomStandardNormal, used '
          'otherwise than as a mask the kit knows (...)',
          'sample/Multinomial': 'Multinomial, ...'}
  result = checks.inventory.judge(state, dict(state), random_ops={
      'switched_off': {}, 'left': left})
  assert result.failed
  assert result.message.startswith(
      'the legacy training step draws random numbers the kit cannot switch '
      'off: noise/RandomStandardNormal (RandomStandardNormal, used otherwise '
      'than as a mask the kit knows (...)) and 1 more; ')
  assert result.figures['random_ops_left'] == left
  off = {'block/random_uniform/RandomUniform': 'floor of keep + uniform'}
  result = checks.inventory.judge(state, dict(state), random_ops={
      'switched_off': off, 'left': {}})
  assert result.passed and result.message.startswith(
      '1 random mask of the legacy step put at its expectation, as inference '
      'computes it (block/random_uniform/RandomUniform)')
  # An older bundle's run says nothing of random ops: nothing is said.
  assert checks.inventory.judge(state, dict(state)).message == ''


def test_a_summary_line_shows_the_figure_against_its_bar():
  result = checks.judged('inference', 2e-6, tolerances.INFERENCE_ATOL, {},
                         'the outputs differ')
  assert result.summary() == ('FAIL inference: max diff 2e-06 (tolerance '
                              '1e-06, 2x it); the outputs differ')
  assert result.to_json()['ratio_to_bar'] == pytest.approx(2)
  close = checks.judged('inference', 2.5e-7, tolerances.INFERENCE_ATOL, {}, '')
  assert close.summary() == ('PASS inference: max diff 2.5e-07 (tolerance '
                             '1e-06, 0.25x it)')
  exact = checks.judged('evaluation', 1.0, 0.0, {}, 'counts differ')
  assert exact.ratio_to_bar == float('inf')
  # A free run that parted is said to be unjudged before its figure.
  free = checks.trajectory.judge('trajectory (1 replica)', [1.0, 0.5], [1.0, 1.232],
                           {'w': np.zeros(2)}, {'w': np.zeros(2)},
                           judge_each_step=False)
  assert free.summary() == (
      'PASS trajectory (1 replica): a free run of 2 steps completed with '
      'finite losses; it parted from the legacy run by up to 0.732, not '
      'judged (rounding grows step by step in a free run; stepwise holds '
      'each step)')
  # The user's names are escaped: one line, nothing for the terminal.
  named = checks.inventory.judge({'ev\nil\x1b[2J': np.zeros(2)}, {})
  assert named.summary().startswith('FAIL inventory: ') and (
      'ev\\nil\\x1b[2J' in named.summary()), named.summary()
  assert named.summary().isprintable()
  not_run = checks.CheckResult('stepwise (2 replicas)', checks.NOT_RUN,
                               'inventory failed')
  assert not_run.summary() == 'NOT RUN stepwise (2 replicas): inventory failed'
  # A check not run fails nothing itself: the one that stopped it (here
  # inventory) fails the run, or the kit says why it cannot judge it.
  assert not not_run.failed
  assert not checks.CheckResult('inputs', checks.SKIPPED).failed
  assert checks.CheckResult('inputs', checks.ERROR, 'raised').failed


def test_an_unread_legacy_rate_is_not_run_with_its_reason_never_failed():
  result = checks.learning_rate.judge('learning_rate (1 replica)', [np.nan, np.nan],
                                [1e-3, 1e-3], 'MyOptimizer keeps no rate')
  assert result.status == checks.NOT_RUN and not result.failed
  assert 'MyOptimizer keeps no rate' in result.message
  assert checks.learning_rate.judge('learning_rate (1 replica)', [0.0, 1e-3],
                              [0.0, 2e-3]).failed


NAN, INF = float('nan'), float('inf')


def _with(values: dict, name: str, value: float) -> dict:
  """values with the first element of values[name] set to value."""
  changed = {k: np.array(v, np.float32) for k, v in values.items()}
  changed[name].flat[0] = value
  return changed


@pytest.mark.parametrize('bad', [NAN, INF], ids=['NaN', 'Inf'])
@pytest.mark.parametrize('side', ['legacy', 'port'])
def test_every_check_fails_a_value_that_is_not_finite(bad, side):
  """A NaN or an infinity on either side fails each check that compares
  numbers, and its message names the value and says which it is."""
  kind = 'NaN' if np.isnan(bad) else 'Inf'
  where = "the port's side" if side == 'port' else 'the legacy side'

  def sides(good, broken):
    return (broken, good) if side == 'legacy' else (good, broken)

  probabilities = {'probabilities': np.full((4, 3), 0.25, np.float32)}
  results = {
      'inference': checks.inference.judge(*sides(probabilities, _with(
          probabilities, 'probabilities', bad)), {}),
      'served_predictions': checks.served_predictions.judge(*sides(
          probabilities, _with(probabilities, 'probabilities', bad)), {}),
      'inputs': checks.inputs.judge(*sides(
          (probabilities['probabilities'], None),
          (_with(probabilities, 'probabilities', bad)['probabilities'],
           None))),
      'one_step (loss)': checks.one_step.judge(
          'one_step', *sides(_step(), _step(loss=bad)), _state(), _state(),
          1),
      'one_step (gradient)': checks.one_step.judge(
          'one_step', *sides(_step(), {**_step(), 'gradients': _with(
              _step()['gradients'], 'dense/kernel', bad)}), _state(),
          _state(), 1),
      'one_step (weights)': checks.one_step.judge(
          'one_step', _step(), _step(), *sides(
              _state(), _with(_state(), 'dense/bias', bad)), 1),
      'one_step (slots)': checks.one_step.judge(
          'one_step', _step(), _step(), _state(), _state(), 1, *sides(
              {('dense/bias', 'm'): np.zeros(3, np.float32)},
              {('dense/bias', 'm'): np.array([bad, 0, 0], np.float32)})),
      'learning_rate': checks.learning_rate.judge(
          'learning_rate', [0.1, 0.1], [0.1, bad]) if side == 'port' else
                       None,
      'trajectory': checks.trajectory.judge(
          'trajectory', *sides([1.0, 0.9], [1.0, bad]), W, W),
      'trajectory (free)': checks.trajectory.judge(
          'trajectory', *sides([1.0, 0.9], [1.0, bad]), W, W,
          judge_each_step=False),
      'trajectory (weights)': checks.trajectory.judge(
          'trajectory', [1.0], [1.0], *sides(W, _with(W, 'dense/bias', bad))),
      'stepwise': checks.stepwise.judge('stepwise', np.array([0.0, bad])),
      'evaluation': checks.evaluation.judge(
          *sides({'accuracy': 0.5}, {'accuracy': bad}), {}, 64),
  }
  for name, result in results.items():
    if result is None:
      continue  # A legacy rate that is NaN is one the kit cannot read.
    assert result.failed, (name, result.summary())
  for name, output in (('inference', 'probabilities'),
                       ('served_predictions', 'probabilities'),
                       ('inputs', 'features')):
    assert f'{output} holds {kind} on {where} (1 of 12 values)' in (
        results[name].message), results[name].message
  for name, named in (('gradient', 'dense/kernel holds'),
                      ('weights', 'dense/bias holds'),
                      ('slots', 'dense/bias/m holds')):
    message = results[f'one_step ({name})'].message
    assert f'{named} {kind} on {where} (1 of ' in message, message
  assert 'a NaN or an infinity on one side' in results['stepwise'].message
  assert 'accuracy differs' in results['evaluation'].message
  assert f': {kind} on {where})' in results['evaluation'].message, (
      results['evaluation'].message)


def test_the_same_infinity_on_both_sides_agrees_and_a_nan_never_does():
  both = {'logits': np.array([-np.inf, 0.5], np.float32)}
  assert checks.inference.judge(both, dict(both), {}).passed
  nan = {'logits': np.array([np.nan, 0.5], np.float32)}
  assert checks.inference.judge(nan, dict(nan), {}).failed


def test_host_call_compares_what_the_summaries_log_or_says_why_not():
  names = ['loss', 'learning_rate']
  legacy = [{'loss': np.array([0.5]), 'learning_rate': np.array([0.0])},
            {'loss': np.array([0.4]), 'learning_rate': np.array([0.1])}]
  same = [(t, {k: v[0] for k, v in t.items()}) for t in legacy]
  assert checks.host_call.judge(names, same).passed
  # The rate of the step after: the step and the value are named.
  shifted = [(legacy[0], {'loss': 0.5, 'learning_rate': 0.1}),
             (legacy[1], {'loss': 0.4, 'learning_rate': 0.2})]
  result = checks.host_call.judge(names, shifted)
  assert result.failed and result.message.startswith(
      'learning_rate differs at step 1 (0 vs 0.1)')
  missing = checks.host_call.judge(names, [(legacy[0], {'loss': 0.5})])
  assert missing.failed and 'the port logs no learning_rate' in (
      missing.message)
  # No Port.host_call: one line, not a failure.
  skipped = checks.host_call.judge(names, [(legacy[0], None)])
  assert skipped.status == checks.SKIPPED and not skipped.failed
  assert skipped.message == (
      'the legacy host_call receives loss, learning_rate at each step, and '
      'the port gives no Port.host_call (the values its summaries log), so '
      'the summaries were not compared')
  # On two cores the host got each core's loss: a port logging one value is
  # compared with core 0's, as a host_call that reads loss[0] logs.
  cores = [({'loss': np.array([0.5, 0.7])}, {'loss': 0.5})]
  assert checks.host_call.judge(['loss'], cores).passed


@pytest.mark.parametrize('per_step, ties', [
    # One step alone over the bar, below FLIP_ATOL, of 10: a near-tie.
    ([0, 1e-7, 0, 4e-6, 1e-7, 0, 0, 0, 0, 0], [4]),
    # Two apart, of 20 (FLIP_SHARE): both.
    ([0] * 3 + [4e-6] + [0] * 10 + [5e-6] + [0] * 5, [4, 15]),
    # Two in a row: no step alone, a failure.
    ([0] * 3 + [4e-6, 4e-6] + [0] * 5, []),
    # Over FLIP_ATOL: a failure.
    ([0] * 3 + [2e-4] + [0] * 6, []),
    # Fewer than 10 steps: no share of them is a near-tie.
    ([0, 4e-6, 0, 0, 0], []),
    # Every step off by the same small amount: a bug, not a tie.
    ([3e-6] * 10, []),
])
def test_near_ties_are_alone_small_and_few(per_step, ties):
  assert checks.near_ties(per_step, tolerances.ONE_STEP_ATOL,
                          tolerances.FLIP_ATOL) == ties
  result = checks.stepwise.judge('stepwise', np.array(per_step, float))
  assert result.passed == bool(ties)
  if ties:
    assert result.figures['near_ties'] == ties
    assert f'step {ties[0]} (' in result.message
    assert result.max_abs_diff <= tolerances.ONE_STEP_ATOL


def test_beyond_init_judges_each_output_relative_to_its_scale():
  theirs = {'logits': np.array([[300.0, -20.0]], np.float32),
            'probabilities': np.array([[1.0, 0.0]], np.float32),
            'classes': np.array([0], np.int32)}
  # 300 in float32 rounds by 3e-5: large values are held to their scale.
  ours = {'logits': np.array([[300.00003, -20.0]], np.float32),
          'probabilities': np.array([[1.0, 0.0]], np.float32),
          'classes': np.array([0], np.int32)}
  result = checks.beyond_init.judge(theirs, ours, {}, 2.0, 28.0)
  assert result.passed, result.message
  assert result.figures['relative_diff_by_output']['logits'] == (
      pytest.approx(3.05e-5 / 300, rel=0.01))
  assert (result.figures['gain'], result.figures['factor']) == (2.0, 28.0)
  # Probabilities under 1 are held to the bar itself.
  ours['probabilities'] = np.array([[0.9998, 0.0002]], np.float32)
  result = checks.beyond_init.judge(theirs, ours, {}, 2.0, 28.0,
                              parting='they part at layer_1/intermediate')
  assert result.failed
  assert result.message.startswith(
      'with the kernels and embeddings of the start state scaled up to a '
      'gain of 2 (28x, median), probabilities differs by 0.0002 of its '
      'scale')
  assert result.message.endswith('; inside the model, they part at '
                                 'layer_1/intermediate')


def test_beyond_init_halves_its_gain_while_the_outputs_overflow():
  asked = []

  def outputs_at(gain):  # Finite from 4 down, as a deep net would be.
    asked.append(gain)
    value = np.float32(1e35) * np.float32(gain) ** 4
    return {'logits': np.array([value], np.float32), 'ids': np.array([1])}

  with np.errstate(over='ignore'):
    gain, answer = checks.beyond_init.computable_gain(outputs_at, 16.0)
    assert (gain, asked) == (4.0, [16.0, 8.0, 4.0])
    assert np.isfinite(answer['logits']).all()
    assert checks.beyond_init.computable_gain(lambda f: {'x': np.array([np.inf])},
                                    16.0)[0] is None


def test_one_step_takes_two_units_in_the_last_place_of_a_value_for_rounding():
  # An RMSProp mean square of 30: one float32 unit there is 1.9e-6, over
  # the absolute bar alone; two are the rounding of storing it.
  slot = np.full(3, 30.0, np.float32)
  two_units = slot + 2 * np.spacing(slot)
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(), _state(),
                           _state(), 1, {('w', 'rms'): slot},
                           {('w', 'rms'): two_units})
  assert result.passed and result.figures['slots_diff'] == 0
  five_units = slot + 5 * np.spacing(slot)
  result = checks.one_step.judge('one_step (1 replica)', _step(), _step(), _state(),
                           _state(), 1, {('w', 'rms'): slot},
                           {('w', 'rms'): five_units})
  assert result.failed
  assert result.figures['slots_diff'] == pytest.approx(
      3 * float(np.spacing(np.float32(30))))
  # Small values are held to the absolute bar as before.
  assert checks.max_diff({'a': np.float32([1e-3])},
                         {'a': np.float32([1e-3 + 2e-6])}, 2)[0] > 1e-6


# device_drift (compare/checks/device_drift.py) and the measured noise (compare/noise.py) -

def _softmax(logits):
  shifted = np.exp(logits - logits.max(-1, keepdims=True))
  return (shifted / shifted.sum(-1, keepdims=True)).astype(np.float32)


def _drift_case(drift: float, seed: int = 0):
  """Outputs at the highest precision, moved by kernels perturbed at the
  unit roundoff (a logit movement of 1e-3), and drifted by drift times that
  movement."""
  from migration_tools.compare.checks import device_drift as drift_lib  # pylint: disable=import-outside-toplevel
  generator = np.random.default_rng(seed)
  logits = generator.normal(size=(64, 10)) * 3
  move = generator.normal(size=logits.shape) * 1e-3
  ours = {'probabilities': _softmax(logits), 'class_ids': logits.argmax(-1)}
  moved = {'probabilities': _softmax(logits + move),
           'class_ids': (logits + move).argmax(-1)}
  shifted = logits + drift * generator.normal(size=logits.shape) * 1e-3
  drifted = {'probabilities': _softmax(shifted),
             'class_ids': shifted.argmax(-1)}
  return drift_lib, ours, drifted, moved


def test_device_drift_passes_what_the_rounding_explains_and_fails_beyond():
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  drift_lib, ours, drifted, moved = _drift_case(1.5)
  result = drift_lib.judge(ours, drifted, moved, precision.TF32)
  assert result.passed, result.message
  entry = result.figures['outputs']['probabilities']
  # The drift against its bar: the multiple times the kernels' movement.
  assert entry['bar'] == pytest.approx(
      tolerances.DRIFT_MULTIPLE * entry['sensitivity_rms'])
  assert 0.2 < result.ratio_to_bar < 1
  assert result.figures['rounding'] == 'tf32'
  assert result.figures['unit_roundoff'] == 2.0 ** -11
  drift_lib, ours, drifted, moved = _drift_case(20.0)
  result = drift_lib.judge(ours, drifted, moved, precision.BF16)
  assert not result.passed and result.ratio_to_bar > 1
  assert result.message.startswith('at bf16, probabilities (')
  assert 'amplifies its device\'s rounding' in result.message


def test_device_drift_takes_a_class_flip_only_at_a_near_tie():
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  drift_lib, ours, drifted, moved = _drift_case(1.0)
  # Row 0's top two classes 1e-4 apart, swapped as deployed: rounding.
  tie = np.full(10, 0.4 / 8, np.float32)
  tie[:2] = [0.30005, 0.29995]
  for side in (ours, moved, drifted):
    side['probabilities'][0] = tie
  drifted['probabilities'][0] = tie[[1, 0, *range(2, 10)]]
  for side in (ours, moved, drifted):
    side['class_ids'] = side['probabilities'].argmax(-1)
  result = drift_lib.judge(ours, drifted, moved, precision.TF32)
  assert result.passed, result.message
  assert result.figures['outputs']['probabilities']['flips_at_near_ties'] == 1
  assert result.figures['outputs']['class_ids']['agreement'] == 63 / 64
  # A class that changes where the top two stand far apart fails.
  top = np.sort(ours['probabilities'], -1)
  far = int(np.argmax(top[:, -1] - top[:, -2]))
  drifted['class_ids'][far] = (ours['class_ids'][far] + 1) % 10
  result = drift_lib.judge(ours, drifted, moved, precision.TF32)
  assert not result.passed
  assert ('predictions change where the highest precision has no near-tie '
          '(class_ids: 1 of 64)') in result.message


def test_the_kl_divergence_of_rounded_rows_is_never_negative():
  from migration_tools.compare.checks import device_drift as drift_lib  # pylint: disable=import-outside-toplevel
  rows = _softmax(np.random.default_rng(1).normal(size=(32, 10)))
  assert drift_lib._kl(rows, rows) == 0.0  # pylint: disable=protected-access
  # Rows that sum to 1 only up to float32's rounding, each way.
  off = rows * np.float32(1 + 3e-7)
  assert drift_lib._kl(rows, off) >= 0  # pylint: disable=protected-access
  assert drift_lib._kl(off, rows) >= 0  # pylint: disable=protected-access


def test_a_precision_is_read_from_what_the_dots_compute_in():
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  assert precision.TF32.unit == 2.0 ** -11 and precision.BF16.unit == 2 ** -8
  assert precision.of_answers({'matmul': 'float32',
                               'convolution': 'float32'}) is None
  assert precision.of_answers({'matmul': 'tf32 (3 ops), float32 (1 op)',
                               'convolution': 'float32'}) == precision.TF32
  # The coarsest of them: a TPU's one bfloat16 pass over a GPU's TF32.
  assert precision.of_answers({'matmul': 'tf32', 'convolution':
                               'bfloat16 (1 pass)'}) == precision.BF16


def test_kernels_are_perturbed_within_the_unit_roundoff_and_nothing_else():
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  state = {'k': np.full((50, 40), 2.0, np.float32),
           'b': np.ones(40, np.float32)}
  moved = precision.perturbed(state, ['k'], precision.BF16)
  relative = moved['k'] / state['k'] - 1
  assert 0 < np.abs(relative).max() <= precision.BF16.unit
  assert np.abs(relative).mean() > precision.BF16.unit / 4  # Not all tiny.
  assert moved['b'] is state['b'] and moved['k'].dtype == np.float32


def test_examples_are_reordered_within_each_replicas_share():
  from migration_tools.pair import side  # pylint: disable=import-outside-toplevel
  index = side.example_order(8, 2)
  assert sorted(index[:4]) == [0, 1, 2, 3] and sorted(index[4:]) == [4, 5,
                                                                     6, 7]
  assert list(index) != list(range(8))
  features = {'a': np.arange(8), 'b': np.arange(8) * 10}
  assert list(side.reordered(features, index)['b']) == list(index * 10)


def _noise(gradient_noise: float, loss_noise: float = 0.0):
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  answer = _step()
  again = {**answer, 'loss': answer['loss'] + loss_noise,
           'gradients': {k: v + gradient_noise
                         for k, v in answer['gradients'].items()},
           'state': _state(), 'slots': {}, 'averages': {}}
  return noise_lib.measure(again, answer, _state())


def test_one_step_counts_a_difference_only_beyond_the_ports_own_noise():
  # The port's gradients 2e-5 from the legacy ones, as on a GPU whose sums
  # run in another order: over the fixed bar alone ...
  ours = _step()
  ours['gradients'] = {k: v + 2e-5 for k, v in ours['gradients'].items()}
  alone = checks.one_step.judge('one_step (1 replica)', _step(), ours, _state(),
                          _state(), 1)
  assert not alone.passed
  assert alone.figures['noise']['measured_by'] is None
  # ... within NOISE_MULTIPLE times the noise its own reordered step shows.
  measured = checks.one_step.judge('one_step (1 replica)', _step(), ours, _state(),
                             _state(), 1, noise=_noise(1e-5))
  assert measured.passed, measured.message
  assert measured.figures['noise']['largest']['gradients'] == pytest.approx(
      1e-5, rel=1e-2)
  # Its line says the bar it applied: the fixed one, beyond that noise.
  allowed = measured.figures['noise_allowance']
  assert allowed['largest'] == pytest.approx(4e-5, rel=1e-2)
  assert allowed['on'].startswith('the gradients of ')
  assert (f"tolerance 1e-06 beyond the port's own noise, which allowed up "
          f"to {allowed['largest']:.3g} more on {allowed['on']}") in (
              measured.summary())
  assert 'beyond the port' not in alone.summary()
  # A bug 10x the noise still fails.
  ours['gradients'] = {k: v + 4e-4 for k, v in ours['gradients'].items()}
  assert not checks.one_step.judge('one_step (1 replica)', _step(), ours, _state(),
                             _state(), 1, noise=_noise(1e-5)).passed


def test_a_step_whose_loss_depends_on_the_order_gives_no_noise():
  noise = _noise(1e-3, loss_noise=0.01)
  assert noise.order_dependent and noise.allowance('gradients') == {}
  assert noise.figures()['order_dependent']


def test_a_nan_in_one_of_two_runs_of_the_step_widens_no_bar():
  # A port whose step gives NaN every other call: its reordered step's NaN
  # once made every allowance infinite, and any bug passed behind it. It is
  # now the finding, named, and no bar grows.
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  answer = _step()
  first = next(iter(answer['gradients']))
  nan = {**answer['gradients'],
         first: np.full_like(answer['gradients'][first], np.nan)}
  noise = noise_lib.measure({**answer, 'gradients': nan, 'state': _state(),
                             'slots': {}, 'averages': {}}, answer, _state())
  assert list(noise.unsteady) == [first]
  assert noise.allowance('gradients').get(first) is None
  assert all(np.isfinite(v) for v in noise.allowance('gradients').values())
  ours = _step()
  ours['gradients'] = {k: v + 4e-4 for k, v in ours['gradients'].items()}
  result = checks.one_step.judge('one_step (1 replica)', _step(), ours,
                                 _state(), _state(), 1, noise=noise)
  assert result.failed and result.tolerance == checks.one_step.BAR.atol
  assert result.message.startswith(
      f'the port is not deterministic: {first} holds NaN (')
  assert 'the order of the examples' in result.message
  # The loss NaN in one run only: the same finding, nothing measured.
  lossy = noise_lib.measure({**answer, 'loss': float('nan'),
                             'state': _state()}, answer, _state())
  assert lossy.unsteady == {'loss': 'NaN (1 of 1 values)'}
  assert lossy.allowance('gradients') == {}


def test_a_prediction_nan_in_one_of_two_calls_is_the_finding_not_a_bar():
  # A predict that is NaN every other call: the forward noise's second
  # call is NaN, which once made the bar infinite so that a serving bug
  # 100x its bar passed. Now inference fails on the port itself.
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  ours = {'probabilities': np.full((4, 3), 0.25, np.float32)}
  again = {'probabilities': np.where(np.eye(4, 3) > 0, np.nan, 0.25)}
  noise = noise_lib.forward(ours, again)
  assert noise.by_output == {} and 'probabilities' in noise.unsteady
  assert noise.bar('probabilities', 1e-6) == 1e-6
  wrong = {'probabilities': ours['probabilities'] * 1.01}
  result = checks.inference.judge(ours, wrong, {}, noise=noise)
  assert result.failed
  assert result.message.startswith('the port is not deterministic: '
                                   'probabilities holds NaN (3 of 12 values)')
  assert result.figures['noise']['unsteady'] == noise.unsteady
  # NaN in both calls at the same places is no movement (the legacy
  # comparison names it), and is not unsteady.
  both = noise_lib.forward(again, dict(again))
  assert both.unsteady == {} and both.by_output == {'probabilities': 0.0}


def test_a_step_that_differs_from_itself_is_the_finding_not_a_bar():
  # A port that moves its weights by 1e-4 at every other step: its
  # reordered step once made every bar 4e-4 wider, and a weight-decay bug
  # passed behind it. The same step again in the same order gives it away.
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  answer = _step()
  jittered = {k: v + 1e-4 for k, v in _state().items()}
  again = {**answer, 'state': jittered, 'slots': {}, 'averages': {}}
  noise = noise_lib.measure(again, answer, _state(), same_order=again)
  first = next(iter(jittered))
  assert list(noise.unrepeatable) == [('state', k) for k in jittered]
  assert noise.allowance('gradients') == {} and noise.norms('state') == {}
  ours = _step()
  ours['gradients'] = {k: v + 4e-4 for k, v in ours['gradients'].items()}
  result = checks.one_step.judge('one_step (1 replica)', _step(), ours,
                                 _state(), _state(), 1, noise=noise)
  assert result.failed and result.message.startswith(
      "the port is not deterministic: in the port's step, taken twice from "
      f'the same state on the same batch in the same order, the state of '
      f'{first} differs by 0.0001 (')
  assert noise.figures()['unrepeatable']
  # Rounding's share of a repeat (a GPU's atomics) is no finding.
  rounded = {**again, 'state': {k: v * (1 + 1e-7)
                                for k, v in _state().items()}}
  assert not noise_lib.measure(again, answer, _state(),
                               same_order=rounded).unrepeatable


def test_outputs_that_differ_between_two_calls_set_no_bar():
  # A predict on weights jittered at each call: the forward noise once
  # took the jitter for rounding and passed a softmax of the logits x 1.01.
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  ours = {'probabilities': np.full((4, 3), 0.25, np.float32)}
  jittered = {'probabilities': ours['probabilities'] + 3e-3}
  noise = noise_lib.forward(ours, jittered, again=jittered)
  assert noise.by_output == {} and 'probabilities' in noise.unrepeatable
  result = checks.inference.judge(ours, {'probabilities': ours[
      'probabilities'] * 1.01}, {}, noise=noise)
  assert result.failed and result.message.startswith(
      "the port is not deterministic: in the port's outputs, asked twice at "
      'the same weights, probabilities differs by 0.003 (0.012 of its '
      'largest value)')
  # Asked again, the same: the noise sets the bar as ever.
  steady = noise_lib.forward(ours, jittered, again=dict(ours))
  assert steady.unrepeatable == {} and steady.by_output['probabilities'] > 0


def test_served_predictions_says_which_side_exports_its_averages():
  """The hint names the averages when one side serves them: the legacy
  (its scaffold restores them) or the port (its export swaps them in where
  the Estimator exported raw weights)."""
  theirs = {'probabilities': np.full((4, 3), 0.25, np.float32)}
  ours = {'probabilities': np.full((4, 3), 0.3, np.float32)}
  legacy_averages = checks.served_predictions.judge(
      theirs, ours, {}, exports='the moving averages')
  port_averages = checks.served_predictions.judge(theirs, ours, {},
                                            port_averages=True)
  neither = checks.served_predictions.judge(theirs, ours, {})
  assert legacy_averages.failed and port_averages.failed and neither.failed
  assert 'export the port\'s averages too' in legacy_averages.message
  assert ('the model_fn exports its raw weights' in port_averages.message and
          'export its raw weights' in port_averages.message)
  assert 'averages' not in neither.message


# schedule: the rates over the whole schedule (checks/schedule.py) ----------

def _polynomial_with_warmup(step, decay_steps=1000, warmup=100, peak=1e-3,
                            after_the_warmup=False):
  """TF BERT's schedule in float32; after_the_warmup: HF's linear decay
  over the steps after the warmup instead."""
  f32 = np.float32
  if step < warmup:
    return f32(peak) * f32(step) / f32(warmup)
  if after_the_warmup:
    return f32(peak) * f32(max(0, decay_steps - step)) / f32(
        decay_steps - warmup)
  return f32(peak) * (f32(1) - f32(min(step, decay_steps)) / f32(decay_steps))


def _legacy_schedule(rate_of):
  from migration_tools.pair import side  # pylint: disable=g-import-not-at-top
  steps = list(side.SCHEDULE_STEPS)
  return {'steps': steps, 'rates': [float(rate_of(s)) for s in steps]}


def test_schedule_passes_the_same_schedule_and_says_its_shape():
  from migration_tools.compare.checks import schedule  # pylint: disable=g-import-not-at-top
  theirs = _legacy_schedule(_polynomial_with_warmup)
  result = schedule.judge(theirs, list(theirs['rates']))
  assert result.passed and result.max_abs_diff == 0
  assert result.figures['legacy_shape'] == (
      'rises to 0.00093 at step 93, falls to 0 at step 1,001, holds 0 from '
      'step 1,001')
  assert not result.figures['constant']
  # A staircase (exponential decay, staircase=True, every 2 steps) is said
  # by its ends and its count.
  stairs = schedule.shape(list(range(20)), [0.5 ** (s // 2) for s in
                                            range(20)])
  assert stairs == ('holds 1 from step 0, falls to 0.5 at step 2, holds 0.5 '
                    'from step 2, 14 more pieces, falls to 0.00195312 at step '
                    '18, holds 0.00195312 from step 18')


def test_schedule_fails_a_decay_after_the_warmup_in_the_decay():
  from migration_tools.compare.checks import schedule  # pylint: disable=g-import-not-at-top
  theirs = _legacy_schedule(_polynomial_with_warmup)
  ours = [float(_polynomial_with_warmup(s, after_the_warmup=True))
          for s in theirs['steps']]
  result = schedule.judge(theirs, ours)
  assert not result.passed
  assert result.figures['first_step_over_tolerance'] == 107
  assert result.message.startswith(
      'the schedules part at global step 107 (0.000893 vs 0.000992222), in '
      "its decay: compare the decay's length, power and end rate")
  # Half the decay's length: caught where the rates first part.
  half = [float(_polynomial_with_warmup(s, decay_steps=500))
          for s in theirs['steps']]
  assert schedule.judge(theirs, half).figures[
      'first_step_over_tolerance'] == 107


def test_schedule_holds_float32s_pow_far_into_a_decay():
  # TF 1's exponential_decay in float32 against a float64 port's, to 8.8
  # million steps: float32's pow drifts with the decay's depth, and the bar
  # with it; a decay rate of 0.961 does not pass.
  from migration_tools.compare.checks import schedule  # pylint: disable=g-import-not-at-top
  f32 = np.float32
  theirs = _legacy_schedule(lambda s: f32(0.05) * np.power(
      f32(0.96), f32(s) / f32(1e5), dtype=np.float32))
  steps = np.asarray(theirs['steps'], np.float64)
  assert schedule.judge(theirs, list(0.05 * 0.96 ** (steps / 1e5))).passed
  assert not schedule.judge(theirs, list(0.05 * 0.961 ** (steps / 1e5))).passed


def test_schedule_says_why_it_compared_nothing():
  from migration_tools.compare.checks import schedule  # pylint: disable=g-import-not-at-top
  unread = schedule.judge({}, None)
  assert unread.status == 'skipped' and unread.message.startswith(
      'the legacy learning rate cannot be read at a given global step')
  theirs = _legacy_schedule(_polynomial_with_warmup)
  result = schedule.judge(theirs, None, 'give its model learning_rate_at')
  assert result.status == 'skipped' and result.message == (
      "the port's rate cannot be read at a given step: give its model "
      'learning_rate_at')


def test_the_legacy_slots_are_read_as_often_whatever_the_port():
  # A bundle answers in the order its recording asked: a port read by what
  # it does (a PyTorch SGD with weight decay) once asked twice what a Keras
  # port asked once, and met "the bundle holds no answer".
  import types  # pylint: disable=import-outside-toplevel
  readings = checks.optimizer._slot_readings  # pylint: disable=protected-access
  sgd, odd = types.SimpleNamespace(kind='SGD'), types.SimpleNamespace(kind='x')
  live = types.SimpleNamespace()  # A live or recording run: no format.
  assert readings(live, sgd, sgd, True) == readings(live, sgd, odd, False) == 1
  assert readings(live, None, sgd, False) == 2  # Read by what it does.
  # Format 3 and 4 bundles were asked as their port made the check ask.
  old = types.SimpleNamespace(recorded_format=4)
  assert [readings(old, sgd, sgd, True), readings(old, sgd, odd, True),
          readings(old, sgd, odd, False)] == [1, 0, 2]


def _attention_layers(query_kernel):
  """A legacy and a port layer output of one example: an embedding, a
  square query kernel applied, a dense whose GELU the legacy applies
  inside its layer and the port after it."""
  from migration_tools.compare import layers  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 16)).astype(np.float32)
  kernel = rng.normal(scale=0.3, size=(16, 16)).astype(np.float32)
  inner = (x @ kernel).astype(np.float32)
  gelu = layers.ACTIVATIONS['gelu (tanh)']
  theirs = {'emb': x.ravel(), 'attention/query': (x @ kernel).ravel(),
            'ffn': gelu(inner.astype(np.float64)).astype(np.float32).ravel()}
  ours = {'e': x.ravel(), 'a/q': (x @ query_kernel).ravel(),
          'f': inner.ravel()}
  pairs = layers.pairs({'emb/table': 'e/table', 'attention/query/kernel':
                        'a/q/kernel', 'ffn/kernel': 'f/kernel'})
  return theirs, ours, pairs, kernel


def test_a_square_kernel_read_untransposed_fails_inference_at_its_layer():
  # The outputs agree (a softmax of near-zero scores hides the query), but
  # the query layer does not: inference fails, naming it.
  from migration_tools.compare import layers  # pylint: disable=import-outside-toplevel
  _, _, _, kernel = _attention_layers(np.eye(16, dtype=np.float32))
  theirs, ours, pairs, _ = _attention_layers(kernel.T)
  figures = layers.compare(theirs, ours, pairs)
  assert figures['parting'] == 'attention/query'
  outputs = {'probabilities': np.full((2, 3), 1 / 3, np.float32)}
  result = checks.inference.judge(outputs, dict(outputs), {}, figures,
                                  layers.parting_text(figures))
  assert result.failed and result.figures['worst_layer'] == 'attention/query'
  assert result.message.startswith(
      'the outputs agree within their bars, but inside the model equal up '
      'to emb; they part at attention/query (port: a/q) by ')
  assert 'a square kernel untransposed' in result.message
  assert result.tolerance == tolerances.LAYER_RTOL
  assert result.max_abs_diff > 0.1


def test_an_activation_one_side_applies_after_its_layer_is_no_parting():
  # A legacy dense with its GELU inside, a port's Dense and a GELU after
  # it (TF Model Garden's BERT): grouped otherwise, said, and passed.
  from migration_tools.compare import layers  # pylint: disable=import-outside-toplevel
  _, _, _, kernel = _attention_layers(np.eye(16, dtype=np.float32))
  theirs, ours, pairs, _ = _attention_layers(kernel)
  figures = layers.compare(theirs, ours, pairs)
  assert figures['parting'] is None
  assert figures['by_layer']['ffn'] > tolerances.LAYER_RTOL
  assert figures['grouped_otherwise'] == {
      'ffn': "gelu (tanh): the legacy layer applies it, the port after its "
             'layer'}
  outputs = {'probabilities': np.full((2, 3), 1 / 3, np.float32)}
  assert checks.inference.judge(outputs, dict(outputs), {}, figures).passed


def test_a_layers_bar_grows_with_its_own_measured_noise():
  # A layer of large values rounds by more than 1e-5 of its scale in the
  # port's own float32: its bar is 4x what one unit in the last place of
  # the weights moves it by, not the fixed bar.
  from migration_tools.compare import layers  # pylint: disable=import-outside-toplevel
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  theirs = {'bn': np.array([1000.0, -500.0, 250.0])}
  ours = {'b': theirs['bn'] + np.array([0.02, 0.0, 0.0])}
  pairs = {'bn': 'b'}
  assert layers.compare(theirs, ours, pairs)['parting'] == 'bn'
  moved = {'b': ours['b'] + np.array([0.01, 0.0, 0.0])}
  found = noise_lib.Forward(
      {}, by_layer=noise_lib._layer_noise(ours, moved, dict(ours)))  # pylint: disable=protected-access
  figures = layers.compare(theirs, ours, pairs, found)
  assert figures['parting'] is None
  assert figures['bar_by_layer']['bn'] == pytest.approx(4 * 0.01 / 1000)
  # A layer that moved between two calls at the same weights sets no bar.
  jittered = {'b': ours['b'] + np.array([0.5, 0.0, 0.0])}
  assert noise_lib._layer_noise(ours, moved, jittered) == {}  # pylint: disable=protected-access
