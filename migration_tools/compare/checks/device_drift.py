"""device_drift: the port as deployed on its device (its precision, or the
one --emulate_precision emulates) against the same port at the highest
precision, judged by what the device's rounding can explain.

The checks of the port's math run it at the highest precision, against the
legacy model_fn. This one asks a second question: does the port keep its
outputs where its device's rounding puts them? The bar is measured on the
model itself: every kernel and embedding is moved by up to the rounding's
unit roundoff (precision.perturbed) at the highest precision, and each
output's movement (its root mean square over tolerances.DRIFT_DRAWS draws of
that movement), times tolerances.DRIFT_MULTIPLE, is how far the device may
move it. A device rounds activations as well as kernels, a few times over in
a deep model, and the multiple allows for it; a port that amplifies the
rounding (a softmax of unshifted values, a cancellation) moves beyond it.
Distributions are judged by their argmax, where the highest-precision run
has no near-tie, and their KL divergence.
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import ERROR
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import PASSED
from migration_tools.pair import precision

# The bar: each output's drift, a multiple of its movement with every
# kernel moved by the precision's unit roundoff.
BAR = Bar(multiple=tolerances.DRIFT_MULTIPLE, scale=(
    'each output\'s movement with every kernel moved by the precision\'s '
    'unit roundoff (2^-11 TF32, 2^-8 bfloat16; root mean square over '
    f'{tolerances.DRIFT_DRAWS} draws)'))


NAME = 'device_drift'


def _rms(a, b) -> float:
  return float(np.sqrt(np.mean(np.square(
      np.asarray(a, np.float64) - np.asarray(b, np.float64)))))


def _is_distribution(value: np.ndarray) -> bool:
  """Rows of probabilities: two or more classes, none negative, each row
  summing to 1."""
  return (value.dtype.kind == 'f' and value.ndim >= 2 and
          value.shape[-1] > 1 and bool(np.all(value >= 0)) and
          bool(np.allclose(value.sum(-1), 1.0, atol=1e-3)))


def _kl(p: np.ndarray, q: np.ndarray) -> float:
  """The mean over rows of KL(p || q), in nats, as sum(p log(p/q) - p + q):
  each term at least 0, so that rows summing to 1 only up to float32's
  rounding make no negative divergence of their own."""
  p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
  tiny = np.finfo(np.float64).tiny
  terms = p * (np.log(np.maximum(p, tiny)) - np.log(np.maximum(q, tiny)))
  return float(np.mean(np.sum(terms - p + q, -1)))


def _near_ties(value: np.ndarray, margin: float) -> np.ndarray:
  """Rows whose top two classes are within margin of each other."""
  top = np.sort(value.reshape(-1, value.shape[-1]), -1)
  return (top[:, -1] - top[:, -2]) <= margin


def _flips(ours, drifted) -> np.ndarray:
  return (np.argmax(ours, -1) != np.argmax(drifted, -1)).reshape(-1)


def judge(ours: dict, drifted: dict, moved: dict | list[dict],
          rounding: precision.Rounding, bar: Bar = BAR) -> CheckResult:
  """Each output at the deployed precision (drifted) against the highest
  (ours), over DRIFT_MULTIPLE times its movement with the kernels moved by
  the rounding's unit roundoff (moved: the outputs of one such draw, or of
  each of several, whose movements are averaged: mean squares, mean KL)."""
  moved = moved if isinstance(moved, list) else [moved]
  multiple = bar.multiple
  figures = {'rounding': rounding.name, 'unit_roundoff': rounding.unit,
             'multiple': multiple, 'draws': len(moved), 'outputs': {}}
  judged = []  # (ratio, figure, bar, what)
  flipped = []
  near = None
  for name in sorted(ours):
    a, b = np.asarray(ours[name]), np.asarray(drifted[name])
    ms = [np.asarray(m[name]) for m in moved]
    if not outputs.numeric(a) or a.dtype.kind != 'f':
      continue
    drift = _rms(b, a)
    sensitivity = float(np.sqrt(np.mean([_rms(m, a) ** 2 for m in ms])))
    bar = multiple * sensitivity
    entry = {'drift_rms': drift, 'sensitivity_rms': sensitivity, 'bar': bar,
             'ratio': _ratio(drift, bar)}
    judged.append((entry['ratio'], drift, bar, f'{name} (root mean square)'))
    if _is_distribution(a):
      margin = multiple * max(float(np.max(np.abs(m - a), initial=0.0))
                              for m in ms)
      ties = _near_ties(a, margin)
      near = ties if near is None else near | ties
      flips = _flips(a, b)
      kl = _kl(a, b)
      kl_bar = multiple ** 2 * float(np.mean([_kl(a, m) for m in ms]))
      entry.update({'argmax_agreement': float(1 - flips.mean()),
                    'flips_at_near_ties': int((flips & ties).sum()),
                    'kl': kl, 'kl_bar': kl_bar,
                    'kl_ratio': _ratio(kl, kl_bar)})
      judged.append((entry['kl_ratio'], kl, kl_bar, f'{name} (KL divergence)'))
      if (flips & ~ties).any():
        flipped.append(f'{name}: {int((flips & ~ties).sum())} of '
                       f'{flips.size}')
    figures['outputs'][name] = entry
  for name in sorted(ours):
    a, b = np.asarray(ours[name]), np.asarray(drifted[name])
    if a.dtype.kind in 'biu' and a.shape == b.shape:
      changed = (a != b).reshape(len(a), -1).any(-1) if a.ndim else (
          np.array([a != b]))
      allowed = near if near is not None and near.shape == changed.shape \
          else np.zeros_like(changed)
      figures['outputs'][name] = {'agreement': float(1 - changed.mean())}
      if (changed & ~allowed).any():
        flipped.append(f'{name}: {int((changed & ~allowed).sum())} of '
                       f'{changed.size}')
  return _verdict(judged, flipped, figures, rounding)


def _ratio(figure: float, bar: float) -> float:
  if figure == 0:
    return 0.0
  return float(figure / bar) if bar > 0 else float('inf')


def _verdict(judged: list, flipped: list, figures: dict,
             rounding: precision.Rounding) -> CheckResult:
  if not judged:
    return CheckResult(NAME, PASSED, 'no float output to judge',
                       figures=figures)
  ratio, figure, bar, what = max(judged, key=lambda j: j[0])
  figures['worst'] = what
  failed = ratio > 1 or flipped
  message = ''
  if flipped:
    message = (f'at {rounding.name} the port\'s predictions change where '
               'the highest precision has no near-tie ('
               f'{"; ".join(flipped)}): ')
  elif failed:
    message = (f'at {rounding.name}, {what} moves {figure:.3g} from the port '
               f'at the highest precision, {ratio:.3g}x the bar ({bar:.3g}: '
               f'{figures["multiple"]:g}x its movement with every '
               f'kernel moved by {rounding.unit:.3g}, over '
               f'{figures["draws"]} draws): ')
  if failed:
    message += ('the port amplifies its device\'s rounding beyond what its '
                'math does with it (e.g. a softmax or log of unshifted '
                'values, a loss from probabilities rather than logits, a '
                'difference of large terms, a dtype cast to bfloat16 in '
                'it); compute that part at the highest precision '
                '(precision=\'highest\' on its dots) or rewrite it to be '
                'stable')
  return CheckResult(NAME, FAILED if failed else PASSED, message,
                     float(figure), float(bar), figures)


def _deployed_rounding(run: Run) -> precision.Rounding | None:
  """What the port's dots round to as deployed: the rounding emulated, or
  its device's (read with where it runs); None: float32."""
  return run.dots.emulated or precision.of_answers(
      run.ran_on.get('precision', {}))


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """The port's outputs as deployed (its device's precision, or the one
  emulated) against its own at the highest precision, every other check's,
  over what its kernels moved by that precision's rounding move them."""
  rounding = _deployed_rounding(run)
  runner = replicas.port
  features = run.data.batches[0][0]
  ours = runner.predict(features)
  with runner.at_deployed_precision() as dots:
    before = getattr(dots, 'rounded', 0)
    drifted = runner.predict(features)
    rounded = getattr(dots, 'rounded', 0) - before
  if run.dots.emulated and not rounded:
    return CheckResult(NAME, ERROR, _UNREACHED.format(run.dots.emulated.name))
  kernels = [n for n in run.weights if np.ndim(run.start[n]) >= 2]
  moved = []
  try:
    for draw in range(tolerances.DRIFT_DRAWS):
      runner.set_state(precision.perturbed(run.start, kernels, rounding,
                                           run.options.seed + draw))
      moved.append(runner.predict(features))
  finally:
    runner.set_state(run.start)
  result = judge(ours, drifted, moved, rounding)
  if run.dots.emulated:
    result.figures['dots_rounded'] = rounded
  return result


# An emulated rounding that reached no dot: the port's predict ran a
# program compiled before it, so its outputs say nothing of the rounding.
_UNREACHED = (
    '--emulate_precision={} rounded no dot of the port\'s predict: it runs '
    'a program compiled before the comparison set the rounding (e.g. a '
    'tf.function or a torch.compile\'d module made once), which the '
    'emulation cannot reach; let predict call the model as it is, or leave '
    'the flag out')


CHECK = Check(
    NAME, 'the port\'s PREDICT outputs as deployed on its device '
    '(TF32 on a GPU, bfloat16 passes on a TPU, or `--emulate_precision`) '
    'against its own at the highest precision, which every other check '
    'runs it at; distributions also by argmax (away from near-ties) and KL '
    'divergence; left out where the port computes float32', ONCE,
    drive, needs=('port.predict', 'port.set_state',
                  'port.at_deployed_precision'),
    # Where the port computes float32 (the CPU), nothing drifts.
    applies=lambda run, _: _deployed_rounding(run) is not None,
    bar=BAR)
