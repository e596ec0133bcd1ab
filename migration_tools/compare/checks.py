"""The equivalence checks, each a function of what the two runners computed.

Every check returns a ``CheckResult``: whether it passed, its headline figure
against its bar (``tolerances``), every figure measured, and on failure a
message that first says what the numbers show and only then names likely
causes, as examples.
"""
import dataclasses
import functools
import math
from typing import Any

import numpy as np

from kit_core.errors import printable
from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare import noise as noise_lib
from migration_tools.pair import legacy_state
from migration_tools.pair import optimizers

PASSED, FAILED, ERROR, NOT_RUN = 'passed', 'failed', 'error', 'not run'
# A check of an optional piece the port does not give (e.g. no
# input_pipeline): not a failure, and said.
SKIPPED = 'skipped'
# A finding to look at that fails nothing: e.g. a port slower than its
# model_fn (speed), which is not a difference in what it computes.
REVIEW = 'review'


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """One check's outcome, never edited once made (a check's judge says all
  of it).

  status: PASSED or FAILED (judged on the figures), ERROR (the check raised:
  message is the cause), NOT_RUN (a check it needs failed first, or the kit
  cannot judge it: message says why), SKIPPED (the port does not give
  what it compares, or another check judges it) or REVIEW (a finding to
  look at, not a failure: message says what).
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

  @property
  def failed(self) -> bool:
    """Whether it makes the comparison fail: FAILED or ERROR. A check NOT
    RUN because an earlier one failed follows that failure; one the kit
    cannot judge says why, and fails nothing."""
    return self.status in (FAILED, ERROR)

  @property
  def ratio_to_bar(self) -> float | None:
    """The figure as a multiple of its bar (a pass is at most 1), so a PASS
    says how close it came; None where the check has no such pair."""
    if self.max_abs_diff is None or self.tolerance is None:
      return None
    if self.tolerance == 0:  # An exact bar.
      return 0.0 if self.max_abs_diff == 0 else math.inf
    return float(self.max_abs_diff / self.tolerance)

  def to_json(self) -> dict[str, Any]:
    """The report's form: the figures beside the named fields."""
    return {'name': self.name, 'passed': self.passed, 'status': self.status,
            'max_abs_diff': self.max_abs_diff, 'tolerance': self.tolerance,
            'ratio_to_bar': self.ratio_to_bar, **self.figures,
            'message': self.message}

  def summary(self) -> str:
    """One line: PASS/FAIL/ERROR/NOT RUN name: figure; message."""
    figure = ''
    if self.max_abs_diff is not None and self.tolerance is not None:
      figure = (f' max diff {self.max_abs_diff:.3g} (tolerance '
                f'{self.tolerance:.3g}, {self.ratio_to_bar:.2g}x it)')
    elif self.max_abs_diff is not None and self.passed:
      # A free run's parting is not judged (tolerances.TRAJECTORY_ATOL's
      # comment): said first, lest a large figure read as a defect.
      steps = self.figures.get('steps')
      figure = (f' a free run{f" of {steps} steps" if steps else ""} '
                'completed with finite losses; it parted from the legacy '
                f'run by up to {self.max_abs_diff:.3g}, not judged (rounding '
                'grows step by step in a free run; stepwise holds each step)')
    elif self.max_abs_diff is not None:
      figure = f' max diff {self.max_abs_diff:.3g} (a free run)'
    label = {PASSED: 'PASS', FAILED: 'FAIL', ERROR: 'ERROR',
             NOT_RUN: 'NOT RUN', SKIPPED: 'SKIP',
             REVIEW: 'REVIEW'}[self.status]
    message = ''
    if self.message:
      message = ('; ' if figure else ' ') + self.message
    # The message may name the user's variables, outputs and files.
    return printable(f'{label} {self.name}' + (
        f':{figure}{message}' if figure or message else ''))


def judged(name: str, value: float, tolerance: float, figures: dict,
           hint: str) -> CheckResult:
  """A check passed when value <= tolerance; on failure the message is hint."""
  passed = bool(value <= tolerance)
  return CheckResult(name, PASSED if passed else FAILED,
                     '' if passed else hint, float(value), tolerance, figures)


def near_ties(per_step, bar: float, flip_bar: float) -> list[int]:
  """The steps (1-based) over bar that tolerances.FLIP_RTOL's comment takes
  for near-ties decided otherwise: each alone between steps within bar,
  below flip_bar, at most FLIP_SHARE of the steps; [] when any step over bar
  is not such a step."""
  values = [float(v) for v in per_step]
  over = [i for i, v in enumerate(values) if not v <= bar]
  alone = [i for i in over if values[i] <= flip_bar and all(
      values[j] <= bar for j in (i - 1, i + 1) if 0 <= j < len(values))]
  if not over or alone != over or len(over) > int(
      tolerances.FLIP_SHARE * len(values)):
    return []
  return [i + 1 for i in over]


def near_tie_text(steps: list[int], values, what: str, bar: str) -> str:
  """The report's line for the steps near_ties found; bar: the tolerance's
  name in tolerances.py."""
  shown = ', '.join(f'step {s} ({values[s - 1]:.2g})' for s in steps)
  return (f'{shown} alone differ{"s" if len(steps) == 1 else ""} in {what}, '
          'the steps around within the bar: taken for a near-tie (a max-pool '
          'window or a ReLU at rounding distance) that the port\'s rounding '
          f'decided otherwise, not failed (tolerances.{bar})')


def max_diff(a: dict, b: dict, ulps: int = 0,
             allowance: dict | None = None) -> tuple[float, str]:
  """The largest |a[k] - b[k]| over the keys of a, and its key; inf where
  a value is not finite on one side (outputs.output_diff). With ulps, each
  element's difference less ulps units in the last place (float32) of the
  larger of its two values: what storing them rounds. With allowance
  {k: amount} (noise.Noise.allowance), each key's difference less its
  amount: the port's own rounding noise measured on that tensor."""
  allowance = allowance or {}
  diffs = {k: max(0.0, _beyond_rounding(a[k], b[k], ulps) -
                  allowance.get(k, 0.0)) for k in a}
  worst = max(diffs, key=diffs.get)
  return diffs[worst], worst


def _beyond_rounding(a, b, ulps: int) -> float:
  """output_diff, less ulps units in the last place of the values."""
  a, b = np.asarray(a), np.asarray(b)
  if not ulps or a.shape != b.shape or not (
      outputs.numeric(a) and outputs.numeric(b)):
    return outputs.output_diff(a, b)
  diffs = outputs.elementwise_diff(a, b)
  with np.errstate(invalid='ignore', over='ignore'):
    larger = np.maximum(np.abs(a), np.abs(b)).astype(np.float32)
    rounding = ulps * np.spacing(larger).astype(np.float64)
  return float(np.maximum(diffs - np.nan_to_num(rounding), 0.0).max(
      initial=0.0))


def non_finite_in(a: dict, b: dict) -> str:
  """What the first pair of a and b (by key) that is not finite holds, as
  'name holds NaN on the port's side (...)', or ''."""
  for k in a:
    said = outputs.non_finite(a[k], b[k]) if k in b else ''
    if said:
      return f'{"/".join(k) if isinstance(k, tuple) else k} holds {said}'
  return ''


def inventory(theirs: dict, ours: dict, paired_by_order: list | None = None,
              warm_start: dict | None = None, train_variables=None,
              not_compared: dict | None = None,
              port_averages: dict | None = None,
              random_ops: dict | None = None) -> CheckResult:
  """Every legacy variable maps onto one port variable of the same shape,
  every other variable the legacy step moves is compared by a check or
  declared left out, and the legacy step draws no random number.

  Args:
    theirs, ours: {legacy name: array}, the port's through its variable map.
    paired_by_order: the pairs inferred by order (variable_map), reported.
    warm_start: {checkpoint: variables} the legacy run started from.
    train_variables: LegacySide.train_variables(); None: not accounted.
    not_compared: Port.not_compared.
    port_averages: the port's moving averages before any step, {legacy
      name of the variable: value}: each must start at its variable (ours),
      as TF 1 starts a shadow at its variable's initial value.
    random_ops: the legacy run's random ops (describe_run()['random_ops']:
      switched off, and left drawing); None: not read (an older bundle).
  """
  port_averages = port_averages or {}
  random_ops = random_ops or {'switched_off': {}, 'left': {}}
  # Before any step: an average must start at its variable's value.
  elsewhere = sorted(k for k, v in port_averages.items() if k in ours and not
                     np.allclose(v, ours[k], rtol=tolerances.OPTIMIZER_RTOL,
                                 atol=0))
  theirs = {k: list(v.shape) for k, v in theirs.items()}
  ours = {k: list(v.shape) for k, v in ours.items()}
  missing = sorted(set(theirs) - set(ours))
  extra = sorted(set(ours) - set(theirs))
  shapes = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
  passed = not (missing or extra or shapes)
  account = legacy_state.account(train_variables or {}, not_compared or {},
                                 set(port_averages))
  figures = {'variables': theirs, 'missing_in_port': missing,
             'extra_in_port': extra, 'wrong_shape': shapes,
             'paired_by_order': paired_by_order or [],
             'warm_start': warm_start or {}, 'train_state': account.table,
             'unaccounted': account.unaccounted,
             'random_ops_switched_off': random_ops['switched_off'],
             'random_ops_left': random_ops['left']}
  if passed and random_ops['left']:
    return CheckResult('inventory', FAILED, _drawing_text(random_ops['left']),
                       figures=figures)
  if passed and account.unaccounted:
    return CheckResult('inventory', FAILED, legacy_state.unaccounted_text(
        account, train_variables), figures=figures)
  if passed and elsewhere:
    first = port_averages[elsewhere[0]]
    start = ('at 0' if not np.any(first) else
             'elsewhere than its variable')
    return CheckResult(
        'inventory', FAILED, f'the port\'s moving averages of '
        f'{len(elsewhere)} variables ({", ".join(elsewhere[:3])}'
        f'{" ..." if len(elsewhere) > 3 else ""}) start {start}: TF 1 starts '
        'a shadow at its variable\'s initial value, and the first steps\' '
        'averages depend on it (Keras 3\'s use_ema starts at 0 and takes the '
        'variable at its first step); start each average at its variable',
        figures={**figures, 'averages_start_elsewhere': elsewhere})
  if passed:
    said = []
    if random_ops['switched_off']:
      masks = sorted(random_ops['switched_off'])
      said.append(f'{len(masks)} random mask{"s" if len(masks) > 1 else ""} '
                  'of the legacy step put at its expectation, as inference '
                  f'computes it ({", ".join(masks[:3])}'
                  f'{" ..." if len(masks) > 3 else ""}); the port\'s dropout '
                  'must be off for these checks')
    if warm_start:
      said.append('both sides start from the legacy warm start: ' + ', '.join(
          f'{path} ({count} variables)' for path, count in warm_start.items()))
    said += [f'not compared: {", ".join(names[:3])}'
             f'{" ..." if len(names) > 3 else ""} ({reason})'
             for reason, names in account.not_compared().items()]
    return CheckResult('inventory', PASSED, '; '.join(said), figures=figures)
  # A shape mismatch says both shapes, and whether the port's is the
  # legacy one transposed (a Dense kernel copied from a torch-style
  # [out, in] weight).
  shaped = [f'{k} (legacy {theirs[k]}, port {ours[k]}'
            f'{", transposed" if ours[k] == theirs[k][::-1] else ""})'
            for k in shapes]
  shown = [f'{label} {", ".join(items[:3])}{" ..." if len(items) > 3 else ""}'
           for label, items in (('not mapped from the legacy model:', missing),
                                ('not mapped in the port:', extra),
                                ('of another shape:', shaped)) if items]
  return CheckResult(
      'inventory', FAILED,
      'the variables do not map one to one (' + '; '.join(shown) + '): '
      'fix the port\'s variable map, or the layer names and sizes',
      figures=figures)


def _drawing_text(left: dict[str, str]) -> str:
  """The failure for a legacy step that draws random numbers the kit
  cannot switch off: which, why, and what to do."""
  first = sorted(left)[0]
  more = f' and {len(left) - 1} more' if len(left) > 1 else ''
  return (f'the legacy training step draws random numbers the kit cannot '
          f'switch off: {first} ({left[first]}){more}; each run of the step '
          'draws anew, so no step can be compared at identical state: give '
          'the model_fn a switch for it that --params can set (as a drop '
          'rate of 0) and the port the same, or write it as dropout '
          '(tf.nn.dropout, or x / keep * floor(keep + uniform)) '
          '(docs/EQUIVALENCE.md, "Random numbers")')


def _leaves(structure) -> dict[str, np.ndarray]:
  """{path: array} of a tensor or a nested dict of them."""
  if isinstance(structure, dict):
    return {f'{k}/{p}'.rstrip('/'): v for k in sorted(structure)
            for p, v in _leaves(structure[k]).items()}
  return {'': np.asarray(structure)}


def inputs(legacy_batch: tuple, port_batch: tuple | None) -> CheckResult:
  """The port's input pipeline gives the legacy input_fn's first batch.

  Args:
    legacy_batch, port_batch: (features, labels) of the first global batch
      (the port's replicas concatenated); port_batch None if the port gives
      no input_pipeline.
  """
  if port_batch is None:
    return CheckResult('inputs', SKIPPED, 'the port gives no input_pipeline '
                       '(Port.input_pipeline) to compare with the legacy '
                       'input_fn')
  theirs = _leaves({'features': legacy_batch[0], 'labels': legacy_batch[1]}
                   if legacy_batch[1] is not None else
                   {'features': legacy_batch[0]})
  ours = _leaves({'features': port_batch[0], 'labels': port_batch[1]}
                 if port_batch[1] is not None else {'features': port_batch[0]})
  examples = [len(next(iter(theirs.values()))), len(next(iter(ours.values())))]
  figures = {'legacy_examples': examples[0], 'port_examples': examples[1]}
  if examples[0] != examples[1]:
    return CheckResult(
        'inputs', FAILED, f'the port\'s input pipeline gives {examples[1]} '
        f'examples per step where the legacy input_fn gives {examples[0]} '
        '(e.g. the global batch used as the per-replica batch)',
        figures=figures)
  if set(theirs) != set(ours):
    return CheckResult(
        'inputs', FAILED, 'the two pipelines yield other structures (legacy: '
        f'{sorted(theirs)}, port: {sorted(ours)}): the port\'s model must '
        'take the features as the legacy input_fn yields them',
        figures=figures)
  diffs = {k: outputs.output_diff(theirs[k], ours[k]) for k in theirs}
  worst = max(diffs, key=diffs.get)
  figures.update(worst=worst, **{
      f'{side}_range': [float(d[worst].min()), float(d[worst].max())]
      for side, d in (('legacy', theirs), ('port', ours))
      if outputs.numeric(d[worst]) and d[worst].size})
  said = outputs.non_finite(theirs[worst], ours[worst])
  return judged('inputs', diffs[worst], tolerances.INPUT_ATOL, figures,
                f'the port\'s input pipeline gives another {worst} than the '
                'legacy input_fn for the same records' + (
                    f' ({worst} holds {said})' if said else '') + (
                    f' (legacy range {_range(figures["legacy_range"])}, port '
                    f'range {_range(figures["port_range"])})'
                    if 'port_range' in figures else '') +
                ': compare the preprocessing, e.g. a scaling, and the order')


def _range(pair: list) -> str:
  return f'[{pair[0]:.3g}, {pair[1]:.3g}]'


def _compare_outputs(name: str, theirs: dict, ours: dict,
                     output_map: dict[str, str], tolerance: float,
                     hint: str, extra: dict | None = None,
                     noise: noise_lib.Forward | None = None) -> CheckResult:
  """Every legacy output against the port's of the same (mapped) name, each
  within the larger of tolerance and its measured noise's bar (noise, by
  the port's names); extra: more figures for the report."""
  pairs, missing = outputs.paired_outputs(theirs, ours, output_map)
  if missing or not pairs:
    return CheckResult(name, FAILED, f'the port has no output for '
                       f'{", ".join(missing) or "any legacy output"} (legacy:'
                       f' {sorted(theirs)}, port: {sorted(ours)}): name the '
                       'port\'s outputs as the legacy ones, or map them '
                       '(Port.output_map)', figures=dict(extra or {}))
  diffs = {k: outputs.output_diff(*pair) for k, pair in pairs.items()}
  bars = {k: noise.bar(output_map.get(k, k), tolerance) if noise else
          tolerance for k in pairs}
  # Over its bar first, a float output (which says by how much) before an
  # integer one, then the closest to its bar.
  worst = max(diffs, key=lambda k: (diffs[k] > bars[k],
                                    pairs[k][0].dtype.kind == 'f',
                                    diffs[k] / bars[k] if bars[k] else
                                    diffs[k]))
  figures = {'outputs': {k: list(p[0].shape) for k, p in pairs.items()},
             'max_diff_by_output': diffs, 'bar_by_output': bars,
             'worst_output': worst, 'noise': noise_lib.forward_figures(noise),
             **(extra or {})}
  return judged(name, diffs[worst], bars[worst], figures,
                outputs.difference_text(worst, *pairs[worst], diffs[worst]) +
                ' ' + hint)


def inference(theirs: dict, ours: dict, output_map: dict[str, str],
              layers: dict | None = None, parting: str = '',
              noise: noise_lib.Forward | None = None) -> CheckResult:
  """The same PREDICT outputs at identical state and inputs, by name.

  Args:
    layers: each layer's figures (compare/layers), reported.
    parting: where inside the model the two part (layers.parting_text),
      '' where they do not: said even when the outputs pass.
    noise: the port's outputs' own rounding noise (noise.forward).
  """
  result = _compare_outputs(
      'inference', theirs, ours, output_map, tolerances.INFERENCE_ATOL,
      'before any training step, at identical weights and inputs: the model '
      'or its preprocessing differs (e.g. an input scaling done in the '
      'model_fn, an activation, a layer\'s order or hyper-parameter such as '
      'a batch-norm epsilon, an embedding\'s scaling, a kernel read in '
      'another layout)', {'layers': layers or {}}, noise)
  if not parting:
    return result
  return dataclasses.replace(result, message=result.message + (
      '; ' if result.message else 'the outputs agree within the bar, but '
      'inside the model ') + parting)


def computable_gain(outputs_at, asked: float) -> tuple[float | None, dict]:
  """The largest of asked, asked / 2, ... (down to 1) at which the outputs
  outputs_at(gain) gives are finite, and those outputs; (None, the last)
  where none is. A deep network without normalisation grows by the gain at
  each layer, and overflows."""
  gain = asked
  while True:
    answer = outputs_at(gain)
    finite = all(not outputs.numeric(np.asarray(v)) or np.all(np.isfinite(v))
                 for v in answer.values())
    if finite:
      return gain, answer
    if gain / 2 < 1:
      return None, answer
    gain /= 2


def beyond_init(theirs: dict, ours: dict, output_map: dict[str, str],
                gain: float, factor: float, layers: dict | None = None,
                parting: str = '', noise: noise_lib.Forward | None = None
                ) -> CheckResult:
  """The PREDICT outputs at the start state with its kernels and embeddings
  scaled up to gain (factor: the median scale), each output's difference
  relative to the larger of 1 and its largest legacy value, within the
  larger of BEYOND_INIT_RTOL and its measured noise's bar (noise, at that
  state)."""
  pairs, missing = outputs.paired_outputs(theirs, ours, output_map)
  if missing or not pairs:
    return CheckResult('beyond_init', NOT_RUN, 'the outputs do not pair (see '
                       'inference)')
  scales = {k: max(1.0, float(np.max(np.abs(a), initial=0.0))
                   if outputs.numeric(np.asarray(a)) else 1.0)
            for k, (a, _) in pairs.items()}
  relative = {k: outputs.output_diff(a, b) / scales[k]
              for k, (a, b) in pairs.items()}
  bars = {k: noise.bar(output_map.get(k, k), tolerances.BEYOND_INIT_RTOL,
                       scales[k]) if noise else tolerances.BEYOND_INIT_RTOL
          for k in pairs}
  worst = max(relative, key=lambda k: relative[k] / bars[k])
  figures = {'gain': gain, 'factor': factor,
             'relative_diff_by_output': relative, 'bar_by_output': bars,
             'worst_output': worst, 'noise': noise_lib.forward_figures(noise),
             'layers': layers or {}}
  hint = (f'with the kernels and embeddings of the start state scaled up to '
          f'a gain of {gain:g} ({factor:.3g}x, median), {worst} differs by '
          f'{relative[worst]:.3g} of its scale, '
          'though the outputs agree at the start state: the activations '
          'now leave their near-linear range, and one differs (e.g. erf '
          'GELU for tanh GELU, swish for SiLU with another beta, a '
          'hard-sigmoid, a softmax or layer norm computed otherwise)')
  return judged('beyond_init', relative[worst], bars[worst], figures, hint + (f'; inside the model, {parting}'
                                 if parting else ''))


def optimizer(theirs, ours, starts: list[str] | None = None) -> CheckResult:
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


def optimizer_by_behaviour(legacy_run: dict, ours, slot_map,
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


def _split_state(theirs: dict, ours: dict, trainable,
                 allowance: dict | None = None) -> tuple:
  """(weights diff, other state diff and its worst name) over legacy names,
  each beyond its allowance (max_diff)."""
  weights = {k: theirs[k] for k in trainable}
  others = {k: v for k, v in theirs.items() if k not in weights}
  ulps = tolerances.ONE_STEP_ULPS
  weight_diff = max_diff(weights, ours, ulps, allowance)[0] if weights else (
      0.0)
  state_diff, worst = max_diff(others, ours, ulps, allowance) if others else (
      0.0, None)
  return weight_diff, state_diff, worst


def one_step(name: str, theirs: dict, ours: dict, legacy_state: dict,
             port_state: dict, replicas: int, legacy_slots: dict | None = None,
             port_slots: dict | None = None, reference: str = '',
             whole_batch: bool = False, parting: str = '',
             legacy_averages: dict | None = None,
             port_averages: dict | None = None,
             noise: noise_lib.Noise | None = None) -> CheckResult:
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
  # None: no slot was compared (the report must not say 0 then).
  slots, worst_slot = None, None
  if legacy_slots and port_slots is not None:
    missing = sorted(set(legacy_slots) - set(port_slots))
    slots, worst_slot = (float('inf'), missing[0]) if missing else max_diff(
        legacy_slots, port_slots, tolerances.ONE_STEP_ULPS, allowed('slots'))
  averages, worst_average = None, None
  if legacy_averages:
    averages, worst_average = max_diff(legacy_averages, port_averages or {},
                                       tolerances.ONE_STEP_ULPS,
                                       allowed('averages'))
  ratio = _scale_ratio(legacy_gradients, ours['gradients'])
  # Equal to the bit, as stored, before any noise is allowed: whether the
  # free run that follows can be judged step by step (units.trajectory).
  # Without an allowance, the figures above say it; with one, the raw
  # differences are read again.
  equal = gradient == weights == state == 0 and slots in (0, None)
  if equal and noise is not None and not noise.order_dependent:
    equal = max_diff(legacy_gradients, ours['gradients'])[0] == 0 and all(
        v == 0 for v in _split_state(legacy_state, port_state,
                                     theirs['gradients'])[:2]) and (
            slots is None or max_diff(legacy_slots, port_slots,
                                      tolerances.ONE_STEP_ULPS)[0] == 0)
  non_finite = next((said for said in (
      non_finite_in({'loss': theirs['loss']}, {'loss': ours['loss']}),
      non_finite_in(theirs['gradients'], ours['gradients']),
      non_finite_in(legacy_state, port_state),
      non_finite_in(legacy_slots or {}, port_slots or {}),
      non_finite_in(legacy_averages or {}, port_averages or {})) if said), '')
  figures = {'non_finite': non_finite,
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
  result = judged(name, max(loss, gradient, weights, state, slots or 0.0,
                            averages or 0.0),
                  tolerances.ONE_STEP_ATOL, figures,
                  _one_step_hint(figures, replicas))
  said = [result.message] if result.message else []
  if whole_batch:
    said.append(f'the legacy step was taken {reference}')
  if theirs.get('learning_rate') == 0 and ours['learning_rate'] == 0:
    # A warmup from 0: the weights cannot show the update formula here.
    said.append('the learning rate was 0 at this step on both sides (e.g. '
                'a warmup from 0), so no weight moved: the update is judged '
                'from the first step with a rate above 0, by updates and '
                'stepwise')
  if parting and result.failed:
    said.append(f'inside the model, {parting} (see inference)')
  return dataclasses.replace(result, message='; '.join(said))


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
  if f['learning_rate_diff'] > tolerances.learning_rate_bar(
      f['legacy_learning_rate']):
    said.append(f'the learning rates differ ({f["legacy_learning_rate"]} vs '
                f'{f["port_learning_rate"]}): ' + _rate_cause(
                    f['legacy_learning_rate'], f['port_learning_rate']))
  over = tolerances.ONE_STEP_ATOL
  if not said and f['updated_weights_diff'] > over:
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
  if not said:
    said.append('the figures differ by less than each bar alone shows')
  return 'one step differs: ' + '; '.join(said)


def learning_rate(name: str, theirs: list[float], ours: list[float],
                  legacy_source: str = '') -> CheckResult:
  """The rate each side applied at every step.

  Args:
    theirs: the legacy rates, NaN where they cannot be read.
    legacy_source: where the legacy rate is read, or why it cannot be.
  """
  if any(np.isnan(theirs)):
    return CheckResult(name, NOT_RUN, 'the legacy learning rate cannot be '
                       f'read ({legacy_source}); the updates checks judge the '
                       'rate through each step\'s size',
                       figures={'port': ours[-1]})
  diffs = outputs.elementwise_diff(theirs, ours)
  bars = tolerances.learning_rate_bar(np.asarray(theirs, np.float64))
  over = np.flatnonzero(diffs > bars)
  first = int(over[0]) + 1 if over.size else None
  at = (first or 1) - 1
  # Judged at the first step over its bar, else by the largest difference
  # against the largest bar.
  value = float(diffs[at] if first else diffs.max())
  return judged(name, value, float(bars[at] if first else bars.max()),
                {'legacy': theirs[-1], 'port': ours[-1],
                 'first_step_over_tolerance': first},
                f'the learning rates part at step {first} ({theirs[at]:.6g} '
                f'vs {ours[at]:.6g}): ' + _rate_cause(theirs[at], ours[at]))


def _rate_cause(theirs: float, ours: float) -> str:
  if theirs == 0 and ours:
    return ('the legacy rate is 0 there, as a warmup from 0 starts: compare '
            'the port\'s warmup (its length, and that it has one)')
  return ('the schedule must read a step that advances once per global batch '
          '(not per replica, not per epoch), and have the legacy shape (its '
          'warmup, decay steps and end rate)')


def trajectory(name: str, theirs: list[float], ours: list[float],
               legacy_weights: dict, port_weights: dict,
               judge_each_step: bool = True,
               global_steps: tuple[int, int] | None = None) -> CheckResult:
  """The loss of every step, and the final weights.

  Args:
    judge_each_step: hold every loss and the final weights to
      TRAJECTORY_ATOL (the reference sums as the port does). False (a
      reference that takes the whole batch at once against several
      replicas): rounding differences grow chaotically in a free run (see
      tolerances), so the run must complete with finite losses, and where it
      parts from the legacy one is reported; the stepwise check holds each
      step to the bar.
    global_steps: (the legacy global step, the port optimizer's step) at the
      end; they must be equal.
  """
  losses = outputs.elementwise_diff(theirs, ours)
  weights, worst = max_diff(legacy_weights, port_weights)
  over = np.flatnonzero(losses > tolerances.TRAJECTORY_ATOL)
  first = int(over[0]) + 1 if over.size else None  # Steps count from 1.
  figures = {'steps': len(theirs), 'max_loss_diff': float(losses.max()),
             'first_step_over_tolerance': first, 'final_weights_diff': weights,
             'worst_weight': worst, 'judged_each_step': judge_each_step,
             'bit_identical': bool(losses.max() == 0 and weights == 0),
             'legacy_losses': [float(x) for x in theirs],
             'port_losses': [float(x) for x in ours],
             'global_steps': list(global_steps) if global_steps else None}
  if global_steps and global_steps[0] != global_steps[1]:
    return CheckResult(name, FAILED, f'after {len(theirs)} steps the legacy '
                       f'global step is {global_steps[0]} and the port\'s '
                       f'optimizer step {global_steps[1]}: one step must '
                       'advance it once (e.g. apply_gradients called once '
                       'per replica or per micro-batch)', float(losses.max()),
                       None, figures)
  if judge_each_step:
    return judged(name, max(float(losses.max()), weights),
                  tolerances.TRAJECTORY_ATOL, figures,
                  _trajectory_hint(first, losses))
  for side, values in (('port\'s', ours), ('legacy', theirs)):
    if not np.all(np.isfinite(values)):
      return CheckResult(
          name, FAILED, f'the {side} loss is not finite at step '
          f'{int(np.flatnonzero(~np.isfinite(values))[0]) + 1}',
          float(losses.max()), None, figures)
  return CheckResult(name, PASSED, '', float(losses.max()), None, figures)


def _trajectory_hint(first: int | None, losses: np.ndarray) -> str:
  if first is None:
    return ('the losses agree but the final weights differ: the update '
            'differs where the loss does not show it (e.g. the optimizer)')
  shown = f'the losses part at step {first} (by {losses[first - 1]:.3g}' + (
      ': a NaN or an infinity on one side)' if np.isinf(losses[first - 1])
      else ')')
  if first <= 2:
    return (shown + ', before noise could grow: the steps differ (e.g. the '
            'replicas do not share the legacy global batch, or the loss is '
            'scaled otherwise)')
  return (shown + ': earlier steps agree, so something builds up step by '
          'step (e.g. optimizer state, the learning rate, the order of the '
          'data)')


def stepwise(name: str, per_step: np.ndarray,
             parting: str = '') -> CheckResult:
  """Each step of the legacy trajectory as a one-step check (the port took
  the legacy weights before it): loss and updated weights per step; parting
  (inference) is said on a failure."""
  per_step = np.where(np.isnan(per_step), np.inf, per_step)
  ties = near_ties(per_step, tolerances.ONE_STEP_ATOL, tolerances.FLIP_ATOL)
  if ties:
    rest = np.delete(per_step, [t - 1 for t in ties])
    return CheckResult(name, PASSED, near_tie_text(
        ties, per_step, 'the loss or the updated weights', 'FLIP_ATOL'),
                       float(rest.max()), tolerances.ONE_STEP_ATOL, {
                'steps': len(per_step), 'per_step_max_diff': per_step.tolist(),
                'near_ties': ties})
  over = np.flatnonzero(per_step > tolerances.ONE_STEP_ATOL)
  first = int(over[0]) + 1 if over.size else None
  shown = ('holds a NaN or an infinity on one side' if over.size and
           np.isinf(per_step[first - 1]) else
           f'differs by {per_step[(first or 1) - 1]:.3g}')
  return judged(name, float(per_step.max()), tolerances.ONE_STEP_ATOL, {
      'steps': len(per_step), 'per_step_max_diff': per_step.tolist(),
      'first_step_over_tolerance': first},
                f'step {first} of the legacy trajectory {shown} at identical '
                'weights: what '
                'that step computes differs (e.g. the per-replica batch, the '
                'loss scaling, the learning rate at that step)' + (
                    f'; inside the model, {parting} (see inference)'
                    if parting else ''))


def dropout(name: str, per_step: np.ndarray, losses: list[float]
            ) -> CheckResult:
  """Every step with dropout on, at identical state, the random numbers
  aligned: stepwise's figures, and a hint that names dropout."""
  result = stepwise(name, per_step)
  figures = {**result.figures, 'legacy_losses': losses}
  if result.passed:
    return dataclasses.replace(result, figures=figures)
  return dataclasses.replace(
      result, figures=figures, message=(
          f'with dropout on (random numbers aligned) step '
          f'{figures["first_step_over_tolerance"]} differs by '
          f'{result.max_abs_diff:.3g} at identical state; if stepwise and '
          'one_step pass, dropout is the difference: compare the dropout '
          'rate and where the dropout layer sits. (Masks align only when '
          'both draw them with stateful random ops, as tf.compat.v1.layers '
          'and Keras 2.15 layers do by default.)'))


def evaluation(theirs: dict, ours: dict, metric_map: dict[str, str],
               examples: int,
               evaluates_with: str = legacy_state.EVALUATES_WEIGHTS,
               on_weights: dict | None = None,
               noise: noise_lib.Forward | None = None) -> CheckResult:
  """Every legacy eval metric (and the loss) against the port's metric of
  the same (mapped) name, at identical state over the same batches.

  Args:
    evaluates_with: what the legacy evaluation restores
      (legacy_state.EVALUATES_WEIGHTS or EVALUATES_AVERAGES).
    on_weights: the legacy metrics on the weights themselves, when it
      evaluates the averages; a port whose metrics are these evaluated its
      raw weights.
    noise: the port's metrics' own rounding noise (noise.forward, by the
      port's names): a metric is held to the larger of EVAL_METRIC_RTOL and
      its bar.
  """
  pairs, missing = {}, []
  for name, value in theirs.items():
    mapped = metric_map.get(name, name)
    if mapped in ours:
      pairs[name] = (value, ours[mapped])
    else:
      missing.append(name)
  figures = {'examples': examples, 'legacy': theirs, 'port': ours,
             'legacy_evaluates_with': evaluates_with}
  if missing:
    return CheckResult('evaluation', FAILED, f'the port reports no metric for '
                       f'{", ".join(missing)} (port: {sorted(ours)}): name '
                       'its metrics as the legacy eval metrics, or map them '
                       '(Port.metric_map)', figures=figures)
  scales = {k: max(1.0, abs(a) if np.isfinite(a) else 1.0)
            for k, (a, _) in pairs.items()}
  relative = {k: outputs.output_diff(np.float64(a), np.float64(b)) /
              scales[k] for k, (a, b) in pairs.items()}
  bars = {k: noise.bar(metric_map.get(k, k), tolerances.EVAL_METRIC_RTOL,
                       scales[k]) if noise else tolerances.EVAL_METRIC_RTOL
          for k in pairs}
  worst = max(relative, key=lambda k: relative[k] / bars[k])
  figures.update({'worst_metric': worst, 'bar_by_metric': bars,
                  'noise': noise_lib.forward_figures(noise)})
  a, b = pairs[worst]
  said = outputs.non_finite(np.float64(a), np.float64(b))
  cause = ('compare how the port computes it (e.g. on another output or '
           'head, from logits vs probabilities, top-k with another k) and '
           'what it averages over')
  if on_weights is not None and _same_metrics(on_weights, ours, metric_map):
    figures['port_matches_the_raw_weights'] = True
    cause = ('the port\'s metrics are the model_fn\'s on the raw weights, '
             'and the model_fn evaluates on its moving averages (its '
             'scaffold_fn\'s Saver restores each shadow over its variable): '
             'evaluate the port on its averages (e.g. swap them in for the '
             'evaluation, and back)')
  return judged('evaluation', relative[worst], bars[worst], figures,
                f'{worst} differs ({a:.6g} vs {b:.6g}' +
                (f': {said.split(" (")[0]}' if said else '') +
                ') at identical weights on the same batches: ' + cause)


def _same_metrics(theirs: dict, ours: dict, metric_map: dict) -> bool:
  """Every metric of theirs within the evaluation bar of ours."""
  for name, value in theirs.items():
    mine = ours.get(metric_map.get(name, name))
    if mine is None or outputs.output_diff(np.float64(value), np.float64(
        mine)) / max(1.0, abs(value)) > tolerances.EVAL_METRIC_RTOL:
      return False
  return True


def host_call(names: list[str], steps: list) -> CheckResult:
  """The tensors the legacy host_call received at each step against the
  values the port logs (Port.host_call), by name.

  Args:
    names: the host_call's tensors, by name.
    steps: each step's (legacy {name: array}, port {name: array} or None).
  """
  name = 'host_call'
  if any(ours is None for _, ours in steps):
    return CheckResult(name, SKIPPED, f'the legacy host_call receives '
                       f'{", ".join(names)} at each step, and the port gives '
                       'no Port.host_call (the values its summaries log), so '
                       'the summaries were not compared')
  missing = sorted(set(names) - set(steps[0][1]))
  if missing:
    return CheckResult(name, FAILED, f'the port logs no {", ".join(missing)}'
                       f' (it logs {sorted(steps[0][1])}): give each value '
                       'the legacy host_call receives, by its name '
                       '(Port.host_call)', figures={'names': list(names)})
  worst = (0.0, '', 0, 0.0, 0.0)
  for number, (theirs, ours) in enumerate(steps, 1):
    for key in names:
      a = np.asarray(theirs[key], np.float64).ravel()
      b = np.asarray(ours[key], np.float64).ravel()
      if b.size == 1 and a.size > 1:
        a = a[:1]  # Core 0's, as a host_call that reads x[0] logs it.
      if a.size != b.size:
        return CheckResult(name, FAILED, f'the port logs {b.size} values of '
                           f'{key} where the legacy host_call receives '
                           f'{a.size}', figures={'names': list(names)})
      diff = outputs.output_diff(a, b) / max(1.0, float(np.max(np.abs(a))))
      if diff > worst[0] or not worst[1]:
        worst = (diff, key, number, float(a[0]), float(b[0]))
  value, key, number, a, b = worst
  return judged(name, value, tolerances.HOST_CALL_RTOL,
                {'names': list(names), 'worst': key, 'worst_step': number},
                f'{key} differs at step {number} ({a:.6g} vs {b:.6g}) at '
                'identical state: the port logs another value than the '
                'legacy host_call received (e.g. the loss without its L2 '
                'term, the rate of the step before or after, a mean over '
                'other examples): compare how its summary computes it')


def served_predictions(theirs: dict, ours: dict, output_map: dict[str, str],
                       inputs: dict | None = None,
                       exports: str = legacy_state.EVALUATES_WEIGHTS,
                       noise: noise_lib.Forward | None = None,
                       port_averages: bool = False) -> CheckResult:
  """Both SavedModels' outputs on the same inputs (reported by shape), by
  name; exports: what the legacy export restores (as evaluation's
  evaluates_with); noise: the same outputs' rounding noise (inference's);
  port_averages: the port keeps moving averages (Port.averages)."""
  if exports == legacy_state.EVALUATES_AVERAGES:
    averages = ('the model_fn exports its moving averages (its PREDICT '
                'scaffold_fn\'s Saver restores each shadow over its '
                'variable, and the Estimator\'s export restores through it): '
                'export the port\'s averages too; ')
  elif port_averages:
    averages = ('the model_fn exports its raw weights (no PREDICT '
                'scaffold_fn restores its moving averages) while the port '
                'keeps averages: if the port\'s export swaps its averages in, '
                'export its raw weights, as the Estimator did; ')
  else:
    averages = ''
  return _compare_outputs(
      'served_predictions', theirs, ours, output_map,
      tolerances.INFERENCE_ATOL,
      'between the SavedModels at identical weights, on the same inputs: ' +
      averages + 'compare the serving functions (each input\'s dtype and '
      'preprocessing, as in training) and the exported outputs',
      {'inputs': {k: [*v.shape] for k, v in (inputs or {}).items()},
       'legacy_exports': exports}, noise)
