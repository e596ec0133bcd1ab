"""The updates check on toy steps: each kind of difference a small optimizer
bug makes gets the hint that names it, and rounding is not a difference."""
import numpy as np

from migration_tools import tolerances
from migration_tools.compare import checks
from migration_tools.compare import step_record
from migration_tools.compare.checks import updates

RATE = 1e-3


def _weights(seed=0):
  rng = np.random.default_rng(seed)
  return {'layer/kernel': rng.normal(0, 0.02, (8, 4)).astype(np.float32),
          'layer/LayerNorm/gamma': np.ones(4, np.float32),
          'head/kernel': rng.normal(0, 0.02, (4, 3)).astype(np.float32)}


def _steps_of(before, legacy_step, port_step, number=1, slots=None,
              port_slots=None, rate=RATE):
  """One Step: both sides move `before` by their (float32) steps."""
  after = {k: (v + legacy_step[k]).astype(np.float32)
           for k, v in before.items()}
  ours = {k: (v + port_step[k]).astype(np.float32) for k, v in before.items()}
  return step_record.step(number, before, after, ours, slots or {},
                      port_slots or {}, rate)


def _adam_like(before, seed=1):
  rng = np.random.default_rng(seed)
  return {k: (-RATE * np.sign(rng.normal(size=v.shape))).astype(np.float32)
          for k, v in before.items()}


def test_equal_steps_pass_and_rounding_is_no_difference():
  before = _weights()
  step = _adam_like(before)
  # The port's step off by one unit in the last place of the new weight.
  port = {k: v + np.spacing(np.abs(before[k] + v)) for k, v in step.items()}
  result = updates.judge('updates', [_steps_of(before, step, port)])
  assert result.passed and result.max_abs_diff == 0, result.message


def test_a_missing_weight_decay_is_named_with_its_rate():
  before = _weights()
  step = _adam_like(before)
  decayed = {k: v - RATE * 0.01 * before[k] if k.endswith('kernel') else v
             for k, v in step.items()}
  result = updates.judge('updates', [_steps_of(before, decayed, step)])
  assert result.failed
  assert "weight-decay term (rate 0.01) that the port's lacks" in (
      result.message)
  assert 'layer/kernel' in result.message


def test_decay_on_layer_norm_is_named_as_the_skipped_variables():
  before = _weights()
  step = _adam_like(before)
  port = dict(step)
  port['layer/LayerNorm/gamma'] = (step['layer/LayerNorm/gamma'] -
                                   RATE * 0.01 * before['layer/LayerNorm/gamma'])
  result = updates.judge('updates', [_steps_of(before, step, port)])
  assert 'which variables the weight decay skips' in result.message
  assert 'layer/LayerNorm/gamma' in result.message


def test_every_update_scaled_alike_points_at_the_optimizer_formula():
  before = _weights()
  step = _adam_like(before)
  port = {k: v * 0.316 for k, v in step.items()}
  result = updates.judge('updates', [_steps_of(before, step, port)])
  assert 'about 0.316x the legacy ones' in result.message
  assert "Adam's bias correction" in result.message


def test_slots_scaled_alike_while_updates_agree_point_at_the_gradients():
  before = _weights()
  step = _adam_like(before)
  rng = np.random.default_rng(2)
  slots = {(k, 'adam_m'): rng.normal(size=v.shape).astype(np.float32)
           for k, v in before.items()}
  port_slots = {k: v * 1.4 for k, v in slots.items()}
  result = updates.judge('updates', [_steps_of(
      before, step, step, slots=slots, port_slots=port_slots)])
  assert 'adam_m about 1.4x the legacy ones' in result.message
  assert 'clipping by global norm missing' in result.message


def test_a_port_that_moves_where_the_legacy_step_did_not_is_a_warmup():
  before = _weights()
  zero = {k: np.zeros_like(v) for k, v in before.items()}
  result = updates.judge('updates', [_steps_of(before, zero,
                                               _adam_like(before), rate=0.0)])
  assert result.failed and 'compare the learning-rate schedule' in (
      result.message)


def test_no_step_that_moves_anything_cannot_be_judged():
  before = _weights()
  zero = {k: np.zeros_like(v) for k, v in before.items()}
  result = updates.judge('updates', [_steps_of(before, zero, zero, rate=0.0)])
  assert result.status == checks.NOT_RUN and not result.failed
  assert '--steps' in result.message


def test_a_variable_whose_gradient_is_noise_is_held_to_the_floor():
  """An attention key's bias: softmax ignores it, its step is rounding."""
  before = _weights()
  step = _adam_like(before)
  before['key/bias'] = np.zeros(4, np.float32)
  step['key/bias'] = np.full(4, 1e-12, np.float32)
  port = dict(step)
  port['key/bias'] = np.full(4, -1e-12, np.float32)  # 200% of its own step.
  result = updates.judge('updates', [_steps_of(before, step, port)])
  assert result.passed, result.message
  # Judged against a tenth of the typical step (RATE per element): noise of
  # a millionth of it passes (a Keras 3 port's was 8e-7), a ten-thousandth
  # is a difference.
  for apart, passes in ((1e-6, True), (1e-4, False)):
    port['key/bias'] = np.full(4, 1e-12 + apart * RATE, np.float32)
    result = updates.judge('updates', [_steps_of(before, step, port)])
    assert result.passed == passes, (apart, result.message)
  assert tolerances.UPDATE_FLOOR == 1e-1  # The docs' 10%.


def test_slots_are_judged_even_when_no_variable_moved():
  """A first warmup step (rate 0) still shows gradients clipped otherwise."""
  before = _weights()
  zero = {k: np.zeros_like(v) for k, v in before.items()}
  slots = {(k, 'adam_m'): np.full(v.shape, 0.1, np.float32)
           for k, v in before.items()}
  port_slots = {k: v * 2 for k, v in slots.items()}
  result = updates.judge('updates', [_steps_of(
      before, zero, zero, slots=slots, port_slots=port_slots, rate=0.0)])
  assert result.failed and 'adam_m about 2x' in result.message


def test_a_nan_update_or_slot_fails_and_is_named():
  """A NaN compares as nothing: it must not pass as a zero difference."""
  before = _weights()
  step = _adam_like(before)
  port = dict(step)
  port['head/kernel'] = np.full_like(step['head/kernel'], np.nan)
  result = updates.judge('updates', [_steps_of(before, step, port)])
  assert result.failed, result.summary()
  assert 'at step 1 head/kernel holds NaN on the port\'s side (12 of 12 ' \
      'values)' in result.message
  # The other variables are still judged against their own sizes.
  parts = _steps_of(before, step, port).variables
  assert parts['layer/kernel'].relative == 0.0
  slots = {('layer/kernel', 'm'): np.ones((8, 4), np.float32)}
  bad = {('layer/kernel', 'm'): np.full((8, 4), np.inf, np.float32)}
  result = updates.judge('updates', [_steps_of(
      before, step, step, slots=slots, port_slots=bad)])
  assert result.failed and 'layer/kernel/m holds Inf' in result.message


def test_after_a_warmup_from_0_it_says_from_which_step_it_judged():
  before = _weights()
  zero = {k: np.zeros_like(v) for k, v in before.items()}
  step = _adam_like(before)
  result = updates.judge('updates', [
      _steps_of(before, zero, zero, number=1, rate=0.0),
      _steps_of(before, step, step, number=2)])
  assert result.passed and result.figures['first_judged_step'] == 2
  assert result.message.startswith('the variables are judged from step 2, '
                                   'the first whose learning rate is above 0')
  # From step 1, nothing to say.
  assert updates.judge('updates', [_steps_of(before, step, step)]).message == ''


def test_one_step_alone_over_the_bar_is_a_near_tie_and_every_step_a_bug():
  before = _weights()
  step = _adam_like(before)
  flipped = {**step, 'head/kernel': step['head/kernel'] * 1.001}
  steps = [_steps_of(before, step, flipped if n == 7 else step, number=n)
           for n in range(1, 11)]
  result = updates.judge('updates', steps)
  assert result.passed and result.figures['near_ties'] == [7]
  assert 'step 7 (0.001) alone differs in the updates' in result.message
  every = [_steps_of(before, step, flipped, number=n) for n in range(1, 11)]
  assert updates.judge('updates', every).failed
  # Far over the bar, alone: a failure (a schedule's boundary, say).
  far = {**step, 'head/kernel': step['head/kernel'] * 1.05}
  steps[6] = _steps_of(before, step, far, number=7)
  assert updates.judge('updates', steps).failed


def _lamb(before, adapted, decay=0.01, outside=False, seed=3):
  """LAMB's step from Adam-like directions r (+ decay): each adapted
  variable's scaled by ||w|| / ||r||, so its norm is RATE ||w||; with
  outside, the decay added after the ratio."""
  rng = np.random.default_rng(seed)
  step = {}
  for name, w in before.items():
    w = w.astype(np.float64)
    r = np.sign(rng.normal(size=w.shape)) * rng.uniform(0.5, 1.5, w.shape)
    r = r + (0 if outside else decay * w)
    trust = np.linalg.norm(w) / np.linalg.norm(r) if name in adapted else 1.0
    update = trust * r + (decay * w if outside else 0)
    step[name] = (-RATE * update).astype(np.float32)
  return step


def test_a_trust_ratio_on_one_side_only_is_read_from_the_update_norms():
  before = _weights()
  kernels = {'layer/kernel', 'head/kernel'}
  lamb = _lamb(before, kernels)
  # AdamW in LAMB's place: the same directions, no ratio.
  adamw = _lamb(before, set())
  result = updates.judge('updates', [_steps_of(before, lamb, adamw)])
  assert result.failed
  assert ('the legacy optimizer moves 2 variables (head/kernel, layer/kernel)'
          ' by exactly the learning rate times their norm') in result.message
  assert "no trust ratio (e.g. AdamW in LAMB's place" in result.message
  # The ratio on LayerNorm too, which the legacy one excludes.
  everywhere = _lamb(before, kernels | {'layer/LayerNorm/gamma'})
  result = updates.judge('updates', [_steps_of(before, lamb, everywhere)])
  assert result.failed
  assert ("the port's optimizer moves 1 variables (layer/LayerNorm/gamma) by "
          'exactly the learning rate times their norm') in result.message
  assert 'excluded from layer adaptation' in result.message
  # The weight decay outside the ratio: within a few % of it.
  outside = _lamb(before, kernels, outside=True)
  result = updates.judge('updates', [_steps_of(before, lamb, outside)])
  assert result.failed
  assert 'a term added to the update outside the trust ratio' in (
      result.message)
  # The same LAMB on both sides is no difference.
  assert updates.judge('updates', [_steps_of(before, lamb, dict(lamb))]).passed


def test_a_variable_whose_gradient_is_rounding_noise_is_held_to_rates():
  # An attention key's bias: its slots 1e-7 of the others', its Adam step
  # about a rate per element in a direction the two roundings do not share.
  before = _weights()
  rng = np.random.default_rng(4)
  slots = {(k, kind): rng.normal(size=v.shape).astype(np.float32) * (
      1e-7 if k == 'head/kernel' else 1.0)
           for k, v in before.items() for kind in ('adam_m', 'adam_v')}
  assert step_record.noise_gradients(slots) == {'head/kernel'}
  step = _adam_like(before)
  port = dict(step, **{'head/kernel': -step['head/kernel']})  # Flipped.
  result = updates.judge('updates', [_steps_of(before, step, port, slots=slots,
                                               port_slots=dict(slots))])
  assert result.passed, result.message
  assert result.figures['noise_gradient'] == ['head/kernel']
  assert 'the gradients of 1 variables are rounding noise' in result.message
  # Beyond 10 rates per element it fails all the same (a rate off by 100).
  port['head/kernel'] = step['head/kernel'] * 100
  assert updates.judge('updates', [_steps_of(
      before, step, port, slots=slots, port_slots=dict(slots))]).failed


def test_an_update_within_the_ports_own_measured_noise_passes():
  # A device that orders a kernel's gradient sum otherwise: the port's step
  # of layer/kernel 1% off the legacy one, where its own step on the batch
  # reordered moved it by half that (noise.Noise, as measured in the run).
  from migration_tools.compare import noise as noise_lib  # pylint: disable=import-outside-toplevel
  before = _weights()
  step = _adam_like(before)
  port = dict(step, **{'layer/kernel': step['layer/kernel'] * 1.01})
  after = {k: (v + port[k]).astype(np.float32) for k, v in before.items()}
  reordered = dict(after, **{
      'layer/kernel': (after['layer/kernel'] + 0.005 * step['layer/kernel']
                       ).astype(np.float32)})
  measured = noise_lib.measure(
      {'loss': 1.0, 'state': reordered}, {'loss': 1.0}, after)

  def judged(noise):
    return updates.judge('updates', [step_record.step(
        1, before, {k: (v + step[k]).astype(np.float32)
                    for k, v in before.items()}, after, {}, {}, RATE,
        measured=noise)])
  assert judged(None).failed  # 1% is 200x the bar on its own.
  assert judged(measured).passed
  # Twice the multiple of that noise fails all the same.
  port['layer/kernel'] = step['layer/kernel'] * (
      1 + 2 * tolerances.NOISE_MULTIPLE * 0.005)
  after = {k: (v + port[k]).astype(np.float32) for k, v in before.items()}
  assert judged(measured).failed
