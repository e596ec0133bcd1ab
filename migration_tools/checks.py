"""The equivalence checks, each a function of what the two runners computed.

Every check returns a ``CheckResult``: whether it passed, its headline figure
against its bar (``tolerances``), every figure measured, and on failure a
message that first says what the numbers show and only then names likely
causes, as examples.
"""
import dataclasses
from typing import Any

import numpy as np

from migration_tools import tolerances

PASSED, FAILED, ERROR, NOT_RUN = 'passed', 'failed', 'error', 'not run'


@dataclasses.dataclass
class CheckResult:
  """One check's outcome.

  status: PASSED or FAILED (judged on the figures), ERROR (the check raised:
  message is the cause) or NOT_RUN (a check it needs failed first).
  """
  name: str
  status: str
  message: str = ''
  max_abs_diff: float | None = None
  tolerance: float | None = None
  figures: dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def passed(self) -> bool:
    return self.status == PASSED

  def to_json(self) -> dict[str, Any]:
    """The report's form: the figures beside the named fields."""
    return {'name': self.name, 'passed': self.passed, 'status': self.status,
            'max_abs_diff': self.max_abs_diff, 'tolerance': self.tolerance,
            **self.figures, 'message': self.message}

  def summary(self) -> str:
    """One line: PASS/FAIL/ERROR/NOT RUN name: figure; message."""
    figure = ''
    if self.max_abs_diff is not None:
      figure = f' max diff {self.max_abs_diff:.3g} ' + (
          f'(tolerance {self.tolerance:.0e})' if self.tolerance is not None
          else '(free run, reported; stepwise holds each step)')
    label = {PASSED: 'PASS', FAILED: 'FAIL', ERROR: 'ERROR',
             NOT_RUN: 'NOT RUN'}[self.status]
    message = ''
    if self.message:
      message = ('; ' if figure else ' ') + self.message
    return f'{label} {self.name}:{figure}{message}'


def judged(name: str, value: float, tolerance: float, figures: dict,
           hint: str) -> CheckResult:
  """A check passed when value <= tolerance; on failure the message is hint."""
  passed = bool(value <= tolerance)
  return CheckResult(name, PASSED if passed else FAILED,
                     '' if passed else hint, float(value), tolerance, figures)


def max_diff(a: dict, b: dict) -> tuple[float, str]:
  """The largest |a[k] - b[k]| over the keys of a, and its key."""
  worst = max(a, key=lambda k: float(np.abs(a[k] - b[k]).max()))
  return float(np.abs(a[worst] - b[worst]).max()), worst


def inventory(theirs: dict, ours: dict) -> CheckResult:
  """Every legacy variable maps onto one port variable of the same shape.

  Args:
    theirs, ours: {legacy name: array}, the port's through its variable map.
  """
  theirs = {k: list(v.shape) for k, v in theirs.items()}
  ours = {k: list(v.shape) for k, v in ours.items()}
  missing = sorted(set(theirs) - set(ours))
  extra = sorted(set(ours) - set(theirs))
  shapes = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
  passed = not (missing or extra or shapes)
  shown = [f'{label} {", ".join(items[:3])}{" ..." if len(items) > 3 else ""}'
           for label, items in (('not mapped from the legacy model:', missing),
                                ('not mapped in the port:', extra),
                                ('of another shape:', shapes)) if items]
  return CheckResult(
      'inventory', PASSED if passed else FAILED,
      '' if passed else (
          'the variables do not map one to one (' + '; '.join(shown) + '): '
          'fix the port\'s variable map, or the layer names and sizes'),
      figures={'variables': theirs, 'missing_in_port': missing,
               'extra_in_port': extra, 'wrong_shape': shapes})


def inputs(legacy_batch: np.ndarray, port_batch: np.ndarray) -> CheckResult:
  """The two input pipelines give the same features for the same records."""
  port_batch = port_batch[:len(legacy_batch)]
  diff = float(np.abs(port_batch - legacy_batch).max())
  figures = {'legacy_range': [float(legacy_batch.min()),
                              float(legacy_batch.max())],
             'port_range': [float(port_batch.min()), float(port_batch.max())]}
  return judged('inputs', diff, tolerances.INPUT_ATOL, figures,
                'the port\'s input pipeline gives other features than the '
                'legacy input_fn for the same records (legacy range '
                f'{_range(figures["legacy_range"])}, port range '
                f'{_range(figures["port_range"])}): compare the '
                'preprocessing, e.g. the pixel scaling')


def _range(pair: list) -> str:
  return f'[{pair[0]:.3g}, {pair[1]:.3g}]'


def inference(theirs: np.ndarray, ours: np.ndarray) -> CheckResult:
  """The same outputs at identical weights and inputs."""
  diff = float(np.abs(theirs - ours).max())
  return judged('inference', diff, tolerances.INFERENCE_ATOL,
                {'outputs': int(np.prod(theirs.shape))},
                f'the outputs differ by up to {diff:.3g} before any training '
                'step, at identical weights and inputs: the model or its '
                'preprocessing differs (e.g. an input scaling done in the '
                'model_fn, an activation, a layer\'s order, a kernel read in '
                'another layout)')


def one_step(name: str, theirs: dict, ours: dict, legacy_weights: dict,
             port_weights: dict, replicas: int) -> CheckResult:
  """One step at identical weights: loss, every gradient, updated weights."""
  loss = abs(theirs['loss'] - ours['loss'])
  gradient, worst = max_diff(theirs['gradients'], ours['gradients'])
  rate = abs(theirs.get('learning_rate', np.nan) - ours['learning_rate'])
  weights, _ = max_diff(legacy_weights, port_weights)
  ratio = float(np.median([
      np.abs(ours['gradients'][k]).sum() /
      max(np.abs(theirs['gradients'][k]).sum(), 1e-30)
      for k in theirs['gradients']]))
  figures = {'loss_diff': loss, 'gradient_diff': gradient,
             'worst_gradient': worst, 'updated_weights_diff': weights,
             'learning_rate_diff': rate, 'gradient_scale_ratio': ratio,
             'legacy_learning_rate': theirs.get('learning_rate'),
             'port_learning_rate': ours['learning_rate'],
             'legacy_examples': theirs.get('examples'),
             'port_examples': ours.get('examples')}
  return judged(name, max(loss, gradient, weights), tolerances.ONE_STEP_ATOL,
                figures, _one_step_hint(figures, replicas))


def _one_step_hint(f: dict, replicas: int) -> str:
  """What the one-step figures show, most telling first."""
  said = []
  if f['legacy_examples'] != f['port_examples']:
    said.append(f'the port\'s replicas took {f["port_examples"]} examples in '
                f'one step where the legacy step took {f["legacy_examples"]} '
                '(e.g. the global batch used as the per-replica batch)')
  if f['loss_diff'] > tolerances.ONE_STEP_ATOL:
    said.append(f'the loss differs by {f["loss_diff"]:.3g} at identical '
                'weights (e.g. the label encoding, sparse vs one-hot, or the '
                'loss function)')
  # Other examples or another loss explain the gradients; else look at them.
  ratio = f['gradient_scale_ratio']
  if not said and abs(ratio - 1) > 0.01:
    cause = (f'e.g. a loss averaged over each replica\'s {replicas}x smaller '
             'batch instead of divided by the global batch' if
             abs(ratio - replicas) < 0.05 * replicas and replicas > 1 else
             'e.g. a loss summed, or averaged over another batch than the '
             'global one')
    said.append(f'the port\'s gradients are {ratio:.3g}x the legacy ones '
                f'({cause})')
  elif not said and f['gradient_diff'] > tolerances.ONE_STEP_ATOL:
    said.append(f'the gradients differ by up to {f["gradient_diff"]:.3g} '
                f'(worst: {f["worst_gradient"]}) at the same scale (e.g. '
                'other examples per replica than global batch // replicas)')
  if f['learning_rate_diff'] > tolerances.LEARNING_RATE_ATOL:
    said.append(f'the learning rates differ ({f["legacy_learning_rate"]} vs '
                f'{f["port_learning_rate"]})')
  if not said:
    said.append(f'the updated weights differ by {f["updated_weights_diff"]:.3g}'
                ' though loss and gradients agree: the update differs (e.g. '
                'the optimizer or its hyper-parameters)')
  return 'one step differs: ' + '; '.join(said)


def learning_rate(name: str, theirs: list[float], ours: list[float]
                  ) -> CheckResult:
  """The rate each side applied at every step."""
  diffs = np.abs(np.array(theirs) - np.array(ours))
  over = np.flatnonzero(diffs > tolerances.LEARNING_RATE_ATOL)
  first = int(over[0]) + 1 if over.size else None
  at = (first or 1) - 1
  return judged(name, float(diffs.max()), tolerances.LEARNING_RATE_ATOL,
                {'legacy': theirs[-1], 'port': ours[-1],
                 'first_step_over_tolerance': first},
                f'the learning rates part at step {first} ({theirs[at]:.6g} '
                f'vs {ours[at]:.6g}): the schedule must read a step that '
                'advances once per global batch (not per replica, not per '
                'epoch)')


def trajectory(name: str, theirs: list[float], ours: list[float],
               legacy_weights: dict, port_weights: dict,
               judge_each_step: bool = True) -> CheckResult:
  """The loss of every step, and the final weights.

  Args:
    judge_each_step: hold every loss and the final weights to
      TRAJECTORY_ATOL (a single replica). False (several replicas): rounding
      differences grow chaotically in a free run (see tolerances), so the run
      must complete with finite losses, and where it parts from the legacy
      one is reported; the stepwise check holds each step to the bar.
  """
  losses = np.abs(np.array(theirs) - np.array(ours))
  weights, worst = max_diff(legacy_weights, port_weights)
  over = np.flatnonzero(losses > tolerances.TRAJECTORY_ATOL)
  first = int(over[0]) + 1 if over.size else None  # Steps count from 1.
  figures = {'steps': len(theirs), 'max_loss_diff': float(losses.max()),
             'first_step_over_tolerance': first, 'final_weights_diff': weights,
             'worst_weight': worst, 'judged_each_step': judge_each_step,
             'bit_identical': bool(losses.max() == 0 and weights == 0),
             'legacy_losses': [float(x) for x in theirs],
             'port_losses': [float(x) for x in ours]}
  if judge_each_step:
    return judged(name, max(float(losses.max()), weights),
                  tolerances.TRAJECTORY_ATOL, figures,
                  _trajectory_hint(first, losses))
  finite = bool(np.all(np.isfinite(ours)))
  return CheckResult(
      name, PASSED if finite else FAILED,
      '' if finite else 'the port\'s loss is not finite at step '
      f'{int(np.flatnonzero(~np.isfinite(ours))[0]) + 1}',
      float(losses.max()), None, figures)


def _trajectory_hint(first: int | None, losses: np.ndarray) -> str:
  if first is None:
    return ('the losses agree but the final weights differ: the update '
            'differs where the loss does not show it (e.g. the optimizer)')
  shown = f'the losses part at step {first} (by {losses[first - 1]:.3g})'
  if first <= 2:
    return (shown + ', before noise could grow: the steps differ (e.g. the '
            'replicas do not share the legacy global batch, or the loss is '
            'scaled otherwise)')
  return (shown + ': earlier steps agree, so something builds up step by '
          'step (e.g. optimizer state, the learning rate, the order of the '
          'data)')


def stepwise(name: str, per_step: np.ndarray) -> CheckResult:
  """Each step of the legacy trajectory as a one-step check (the port took
  the legacy weights before it): loss and updated weights per step."""
  over = np.flatnonzero(per_step > tolerances.ONE_STEP_ATOL)
  first = int(over[0]) + 1 if over.size else None
  return judged(name, float(per_step.max()), tolerances.ONE_STEP_ATOL, {
      'steps': len(per_step), 'per_step_max_diff': per_step.tolist(),
      'first_step_over_tolerance': first},
                f'step {first} of the legacy trajectory differs by '
                f'{per_step[(first or 1) - 1]:.3g} at identical weights: what '
                'that step computes differs (e.g. the per-replica batch, the '
                'loss scaling, the learning rate at that step)')


def evaluation(theirs: dict, ours: dict, examples: int) -> CheckResult:
  """Accuracy (and loss) of both evaluations at identical weights."""
  if 'accuracy' not in theirs or 'accuracy' not in ours:
    return CheckResult('evaluation', FAILED,
                       'both evaluations need a metric named accuracy '
                       f'(legacy: {sorted(theirs)}, port: {sorted(ours)})')
  accuracy = abs(theirs['accuracy'] - ours['accuracy'])
  return judged('evaluation', accuracy, tolerances.EVAL_ACCURACY_ATOL, {
      'examples': examples,
      'legacy_accuracy': theirs['accuracy'], 'port_accuracy': ours['accuracy'],
      'legacy_loss': theirs['loss'], 'port_loss': ours['loss'],
      'loss_diff': abs(theirs['loss'] - ours['loss'])},
                f'the accuracies differ ({theirs["accuracy"]:.4f} vs '
                f'{ours["accuracy"]:.4f}) at identical weights: compare the '
                'metric (e.g. argmax of the logits against int labels) and '
                'the eval input pipeline (split, batching, remainder)')


def served_predictions(theirs: dict, ours: dict) -> CheckResult:
  """Both SavedModels' outputs on the same raw inputs."""
  needed = {'class_ids', 'probabilities'}
  if not needed <= set(theirs) & set(ours):
    return CheckResult('served_predictions', FAILED,
                       'the two serving signatures differ: both need the '
                       'outputs class_ids and probabilities (legacy: '
                       f'{sorted(theirs)}, port: {sorted(ours)})')
  classes = int((theirs['class_ids'] != ours['class_ids']).sum())
  diff = float(np.abs(theirs['probabilities'] - ours['probabilities']).max())
  result = judged('served_predictions', diff, tolerances.INFERENCE_ATOL,
                  {'inputs': len(theirs['class_ids']),
                   'different_classes': classes},
                  f'the SavedModels\' probabilities differ by up to {diff:.3g}'
                  ' at identical weights: compare the serving functions (the '
                  'raw input\'s dtype, the same preprocessing as training) '
                  'and the exported outputs')
  if result.passed and classes:
    result.status = FAILED
    result.message = (f'{classes} inputs get another class from the two '
                      'SavedModels: compare their class_ids outputs')
  return result
