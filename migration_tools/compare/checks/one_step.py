"""one_step: the first training step of each replica count's run, at
identical state: loss, gradients, updated weights and other state, slots.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.checks import learning_rate as learning_rate_check
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import max_diff
from migration_tools.compare.verdict import non_finite_in

# The bar: loss, gradients, weights, state and slots within an absolute
# bar, beyond the port's own noise on each tensor; a value within ULPS units
# in the last place of itself is rounding.
BAR = Bar(atol=tolerances.ONE_STEP_ATOL, ulps=tolerances.ONE_STEP_ULPS,
          noise='beyond')


def judge(name: str, theirs: dict, ours: dict, legacy_state: dict,
          port_state: dict, replicas: int, legacy_slots: dict | None = None,
          port_slots: dict | None = None, reference: str = '',
          whole_batch: bool = False, parting: str = '',
          legacy_averages: dict | None = None,
          port_averages: dict | None = None,
          noise: noise_lib.Noise | None = None,
          bar: Bar = BAR) -> CheckResult:
  """One step at identical state: loss, every gradient, the updated weights,
  the other state the step updates (e.g. batch-norm moving statistics) and
  the optimizer's slots, each beyond the port's own rounding noise where it
  was measured (noise; compare/noise.py).

  Args:
    theirs, ours: what legacy.step and PortRunner.step returned.
    legacy_state, port_state: the models' variables after the step, by
      legacy name.
    replicas: the port's replica count.
    legacy_slots, port_slots: {(variable, slot): value} after the step, in
      the TF 1 convention; None when the optimizer is not read.
    reference: how the legacy step was taken (its describe_run()), reported.
    whole_batch: the legacy step took the whole batch at once though the
      port runs on several replicas: said, with reference, pass or fail.
    parting: where inside the model the two part (inference), said on a
      failure.
    legacy_averages, port_averages: {variable: its moving average} after the
      step (the legacy shadows the port keeps; inventory pairs them).
  """
  figures = _figures(theirs, ours, (legacy_state, port_state),
                     (legacy_slots, port_slots),
                     (legacy_averages, port_averages or {}), reference, noise)
  headline = max(figures[k] or 0.0 for k in (
      'loss_diff', 'gradient_diff', 'updated_weights_diff',
      'other_state_diff', 'slots_diff', 'averages_diff'))
  if noise is not None and noise.unsteady:
    # A NaN in one of two runs of the same step is no rounding: a finding.
    return CheckResult(name, FAILED, noise_lib.unsteady_text(
        noise.unsteady, noise_lib.STEP_AGAIN), headline, bar.atol, figures)
  if noise is not None and noise.unrepeatable:
    # Nor is a step that differs from itself: its noise widens no bar.
    return CheckResult(name, FAILED, noise_lib.unrepeatable_text(
        noise.unrepeatable, noise_lib.STEP_REPEATED), headline, bar.atol,
                       figures)
  if noise is not None:
    # The bar as applied: the fixed one, beyond each tensor's own noise.
    figures['noise_allowance'] = noise.applied()
  result = judged(name, headline, bar.atol, figures,
                  _one_step_hint(figures, replicas))
  said = [result.message] if result.message else []
  said += _step_notes(theirs, ours, reference if whole_batch else '',
                      parting if result.failed else '')
  return dataclasses.replace(result, message='; '.join(said))


def _figures(theirs: dict, ours: dict, states: tuple, slots_: tuple,
             averages_: tuple, reference: str,
             noise: noise_lib.Noise | None) -> dict:
  """One step's figures (judge's): each difference beyond the port's noise,
  where it is largest, and whether the two sides are equal to the bit.
  states, slots_, averages_: (legacy, port) after the step."""
  (legacy_state, port_state), (legacy_slots, port_slots) = states, slots_
  legacy_averages, port_averages = averages_
  allowed = functools.partial(noise_lib.allowance, noise)
  loss = max_diff({'loss': np.float64(theirs['loss'])},
                  {'loss': np.float64(ours['loss'])}, 0, allowed('loss'))[0]
  legacy_gradients, received = _in_the_ports_units(theirs, ours)
  gradient, worst = max_diff(legacy_gradients, ours['gradients'], 0,
                             allowed('gradients'))
  rate = abs(theirs.get('learning_rate', np.nan) - ours['learning_rate'])
  weights, state, worst_state = _split_state(legacy_state, port_state,
                                             theirs['gradients'],
                                             allowed('state'))
  slots, worst_slot = _kept_diff(legacy_slots, port_slots, allowed('slots'))
  averages, worst_average = _kept_diff(legacy_averages, port_averages,
                                       allowed('averages'))
  ratio = _scale_ratio(legacy_gradients, ours['gradients'])
  # Equal to the bit, as stored, before any noise is allowed: whether the
  # free run that follows can be judged step by step (checks/trajectory.py).
  # Without an allowance, the figures above say it; with one, the raw
  # differences are read again.
  equal = gradient == weights == state == 0 and slots in (0, None)
  if equal and noise is not None and not noise.order_dependent:
    equal = max_diff(legacy_gradients, ours['gradients'])[0] == 0 and all(
        v == 0 for v in _split_state(legacy_state, port_state,
                                     theirs['gradients'])[:2]) and (
            _kept_diff(legacy_slots, port_slots)[0] in (0, None))
  non_finite = next((said for said in (
      non_finite_in({'loss': theirs['loss']}, {'loss': ours['loss']}),
      non_finite_in(theirs['gradients'], ours['gradients']),
      non_finite_in(legacy_state, port_state),
      non_finite_in(legacy_slots or {}, port_slots or {}),
      non_finite_in(legacy_averages or {}, port_averages)) if said), '')
  return {'non_finite': non_finite,
          'loss_diff': loss, 'gradient_diff': gradient,
          'worst_gradient': worst, 'updated_weights_diff': weights,
          'other_state_diff': state, 'worst_other_state': worst_state,
          'slots_diff': slots,
          'worst_slot': '/'.join(worst_slot) if worst_slot else None,
          'averages_diff': averages, 'worst_average': worst_average,
          'learning_rate_diff': rate, 'gradient_scale_ratio': ratio,
          'legacy_gradients_as': (
              f'received by its optimizer ({received:g}x the mean: the '
              'cores\' sum)' if received != 1 else 'the mean'),
          'legacy_learning_rate': theirs.get('learning_rate'),
          'port_learning_rate': ours['learning_rate'],
          'legacy_examples': theirs.get('examples'),
          'port_examples': ours.get('examples'),
          'legacy_reference': reference,
          'equal_to_the_bit': equal,
          'noise': noise_lib.figures(noise)}


def _kept_diff(legacy: dict | None, port: dict | None,
               allowance: dict | None = None) -> tuple:
  """(largest difference, its key) of what the optimizer or the averages
  keep, beyond rounding and allowance; (None, None) where the legacy side
  keeps none (the report must not say 0 then), inf at the first key the
  port lacks."""
  if not legacy or port is None:
    return None, None
  missing = sorted(set(legacy) - set(port))
  if missing:
    return float('inf'), missing[0]
  return max_diff(legacy, port, BAR.ulps, allowance)


def _step_notes(theirs: dict, ours: dict, whole_batch: str,
                parting: str) -> list[str]:
  """What the message says beside the verdict: how the legacy step was
  taken (whole_batch: its reference, where it took the whole batch), a rate
  of 0, where inside the model the sides part (parting, on a failure)."""
  said = []
  if whole_batch:
    said.append(f'the legacy step was taken {whole_batch}')
  if theirs.get('learning_rate') == 0 and ours['learning_rate'] == 0:
    # A warmup from 0: the weights cannot show the update formula here.
    said.append('the learning rate was 0 at this step on both sides (e.g. '
                'a warmup from 0), so no weight moved: the update is judged '
                'from the first step with a rate above 0, by updates and '
                'stepwise')
  if parting:
    said.append(f'inside the model, {parting} (see inference)')
  return said


def _split_state(theirs: dict, ours: dict, trainable,
                 allowance: dict | None = None) -> tuple:
  """(weights diff, other state diff and its worst name) over legacy names,
  each beyond its allowance (max_diff)."""
  weights = {k: theirs[k] for k in trainable}
  others = {k: v for k, v in theirs.items() if k not in weights}
  ulps = BAR.ulps
  weight_diff = max_diff(weights, ours, ulps, allowance)[0] if weights else (
      0.0)
  state_diff, worst = max_diff(others, ours, ulps, allowance) if others else (
      0.0, None)
  return weight_diff, state_diff, worst


def _scale_ratio(theirs: dict, ours: dict) -> float:
  """The median over variables of |ours| / |theirs| (summed)."""
  return float(np.median([
      np.abs(ours[k]).sum() / max(np.abs(theirs[k]).sum(), 1e-30)
      for k in theirs]))


def _in_the_ports_units(theirs: dict, ours: dict) -> tuple[dict, float]:
  """The legacy gradients in the units the port gives its own, and that
  unit in means.

  A legacy step taken as on TPU cores gives the mean gradient (of the loss
  / global batch), and says what its optimizer received (received_scale):
  the cores' sum of their own mean losses' gradients where the model_fn
  took them itself (BERT's tf.gradients), 2x the mean on 2 cores. A port
  that gives its gradients as its optimizer receives them is compared in
  those units: what the optimizer then does with them, weights and slots,
  is judged alike either way.
  """
  scale = float(theirs.get('received_scale', 1))
  if scale != 1:
    ratio = _scale_ratio(theirs['gradients'], ours['gradients'])
    if abs(ratio - scale) < abs(ratio - 1):
      return {k: v * np.float32(scale)
              for k, v in theirs['gradients'].items()}, scale
  return theirs['gradients'], 1.0


def _one_step_hint(f: dict, replicas: int) -> str:
  """What the one-step figures show, most telling first."""
  said = _input_causes(f, replicas)
  said += _update_causes(f, not said)
  if not said:
    said.append('the figures differ by less than each bar alone shows')
  return 'one step differs: ' + '; '.join(said)


def _input_causes(f: dict, replicas: int) -> list[str]:
  """What differs in what the step computed from its inputs: the values,
  the examples, the loss, the gradients."""
  said = []
  if f['non_finite']:
    said.append(f['non_finite'] + ' (a NaN or an infinity is never equal: '
                'look for a division by zero, a log of 0 or an overflow on '
                'that side)')
  if f['legacy_examples'] != f['port_examples']:
    said.append(f'the port\'s replicas took {f["port_examples"]} examples in '
                f'one step where the legacy step took {f["legacy_examples"]} '
                '(e.g. the global batch used as the per-replica batch)')
  if f['loss_diff'] > tolerances.ONE_STEP_ATOL:
    said.append(f'the loss differs by {f["loss_diff"]:.3g} at identical '
                'weights (e.g. the label encoding, sparse vs one-hot, label '
                'smoothing, the loss function, or an L2 term over other '
                'variables, such as batch norm\'s gamma and beta too)')
  # Other examples or another loss explain the gradients; else look at them.
  ratio = f['gradient_scale_ratio']
  if not said and abs(ratio - 1) > 0.01:
    cause = (f'e.g. a loss averaged over each replica\'s {replicas}x smaller '
             'batch instead of divided by the global batch, or the '
             'replicas\' gradients summed instead of averaged (PyTorch\'s '
             'all_reduce is a SUM)' if
             abs(ratio - replicas) < 0.05 * replicas and replicas > 1 else
             'e.g. a loss summed, or averaged over another batch than the '
             'global one')
    said.append(f'the port\'s gradients are {ratio:.3g}x the legacy ones '
                f'({cause})')
  elif not said and f['gradient_diff'] > tolerances.ONE_STEP_ATOL:
    said.append(f'the gradients differ by up to {f["gradient_diff"]:.3g} '
                f'(worst: {f["worst_gradient"]}) at the same scale (e.g. '
                'other examples per replica than global batch // replicas)')
  return said


def _update_causes(f: dict, inputs_explained_nothing: bool) -> list[str]:
  """What differs in what the step did with its gradients: the rate, the
  weights, the other state, the slots, the averages."""
  said = []
  if f['learning_rate_diff'] > tolerances.learning_rate_bar(
      f['legacy_learning_rate']):
    said.append(f'the learning rates differ ({f["legacy_learning_rate"]} vs '
                f'{f["port_learning_rate"]}): ' +
                learning_rate_check.rate_cause(f['legacy_learning_rate'],
                                               f['port_learning_rate']))
  over = tolerances.ONE_STEP_ATOL
  if (inputs_explained_nothing and not said and
      f['updated_weights_diff'] > over):
    said.append(f'the updated weights differ by {f["updated_weights_diff"]:.3g}'
                ' though loss and gradients agree: the update differs (e.g. '
                'the optimizer or its hyper-parameters, see the optimizer '
                'check)')
  if f['other_state_diff'] > over:
    said.append(f'{f["worst_other_state"]} differs by '
                f'{f["other_state_diff"]:.3g} after the step (state updated '
                'outside the optimizer, e.g. batch-norm moving statistics: '
                'compare the batch-norm momentum, and that the port calls the '
                'model with training=True)')
  # The step's own inputs agree: what the optimizer keeps tells the rest.
  inputs_agree = f['loss_diff'] <= over and f['gradient_diff'] <= over
  if ((f['slots_diff'] or 0.0) > over and f['updated_weights_diff'] <= over
      and inputs_agree):
    said.append(f'the optimizer slot {f["worst_slot"]} differs by '
                f'{f["slots_diff"]:.3g} though the weights agree: the '
                'optimizer receives other gradients than the loss\'s (e.g. '
                'clipping by global norm missing or at another norm, a loss '
                'scale; the updates check says by what factor)')
  if ((f['averages_diff'] or 0.0) > over and f['updated_weights_diff'] <= over
      and f['other_state_diff'] <= over and inputs_agree):
    said.append(f'the moving average of {f["worst_average"]} differs by '
                f'{f["averages_diff"]:.3g} though the weights agree: the '
                'averages move otherwise (e.g. another decay, or TF 1\'s '
                'num_updates, which lowers the decay to (1 + step) / (10 + '
                'step) early on; the updates check says by what factor)')
  return said


def own_draws_text(left: dict[str, str], remedy: str) -> str:
  """The failure of a port whose step draws what the kit cannot switch
  off: where, and what to do (remedy: its framework's words)."""
  sites = sorted(left)
  named = ', '.join(f'{left[s]} at {s}' for s in sites[:3])
  more = f' and {len(sites) - 3} more' if len(sites) > 3 else ''
  return (f'the port\'s step draws random numbers that the kit cannot put at '
          f'their expectation: {named}{more}; a step that draws anew cannot '
          'be compared at identical state (the legacy step\'s masks are put '
          f'at theirs). {remedy}')


def drive(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = replicas.memo.once(
      'first step', lambda: passes.first_step(run, replicas),
      'the first step raised (see one_step)')
  both = passes.slots_compared(legacy, runner)
  port_state = runner.state()
  port_slots = runner.slots(ours['learning_rate']) if both else None
  averages = passes.averages_after(legacy, runner)
  noise = noise_lib.measure(replicas.memo.get('reordered first step'), ours,
                            port_state, port_slots, averages['port_averages'],
                            same_order=replicas.memo.get(
                                'repeated first step'))
  replicas.memo.put('repeated first step', None)
  # Measured: the reordered step's state and slots (BERT-base: 1.8 GB) go;
  # the pass at identical state takes its first step's noise from here.
  replicas.memo.put('reordered first step', None)
  replicas.memo.put('first step noise', noise)
  run.step_noise = {**run.step_noise, replicas.label: noise}
  # Asked before any return: the checks after read the legacy run in the
  # order a bundle recorded it.
  reference = replicas.describe()['reference']
  draws = runner.own_draws()
  if draws and draws['left']:
    # A step that draws anew differs by its draws: said, not judged.
    result = CheckResult(f'one_step ({replicas.label})', FAILED,
                         own_draws_text(draws['left'], draws['remedy']),
                         figures={'port_draws': draws})
    replicas.memo.put('one_step', result)
    return result
  result = judge(
      f'one_step ({replicas.label})', theirs, ours, legacy.state(),
      port_state, replicas.count,
      legacy.slots(ours['learning_rate']) if both else None, port_slots,
      reference=reference,
      # The legacy runner takes the whole batch where it cannot take the
      # step as on the cores (legacy.LegacyRunner).
      whole_batch=replicas.count > 1 and legacy.replicas < replicas.count,
      parting=run.parting, **averages, noise=noise)
  if draws:
    result = dataclasses.replace(result, figures={**result.figures,
                                                  'port_draws': draws})
  replicas.memo.put('one_step', result)
  # Judged: the gradients (two model-sized arrays) are let go.
  replicas.memo.put('first step', (passes.scalars(theirs),
                                   passes.scalars(ours)))
  return result


CHECK = Check(
    'one_step', 'loss, every gradient (the replicas\' summed, as the '
    'all-reduce sums them; of the loss / global batch, or as the legacy '
    'optimizer received them on TPU cores where the port gives them so), '
    'updated weights, other state the step moved, optimizer slots (TF 1 '
    'convention)', EACH, drive,
    needs=('legacy.step', 'legacy.state', 'legacy.slots',
           'legacy.describe_optimizer', 'legacy.describe_run', 'port.step',
           'port.state', 'port.slots', 'port.describe_optimizer',
           'legacy.averages', 'port.averages', 'port.reordered_step'),
    leaves=('step_noise',), bar=BAR)
