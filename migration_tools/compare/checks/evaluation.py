"""evaluation: every eval metric by name, at identical state, over the same
batches.
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.pair import legacy_state

# The bar: each metric relative to the larger of 1 and its value (or the
# port's own noise where measured: noise.bar).
BAR = Bar(rtol=tolerances.EVAL_METRIC_RTOL)


def judge(theirs: dict, ours: dict, metric_map: dict[str, str],
          examples: int,
          evaluates_with: str = legacy_state.EVALUATES_WEIGHTS,
          on_weights: dict | None = None,
          noise: noise_lib.Forward | None = None,
          bar: Bar = BAR) -> CheckResult:
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
  bars = {k: noise.bar(metric_map.get(k, k), bar.rtol,
                       scales[k]) if noise else bar.rtol
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


def drive(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  batches = run.data.batches[:run.options.eval_batches]
  passes.take_legacy_state(legacy, runner)
  evaluates_with = replicas.describe()['evaluates_with']
  theirs = legacy.evaluate(batches)
  # Where the model_fn evaluates its averages: its metrics on the weights
  # too, which a port that evaluates its raw weights matches.
  on_weights = (legacy.evaluate_weights(batches)
                if evaluates_with == legacy_state.EVALUATES_AVERAGES else None)
  ours = runner.evaluate(batches)
  found = passes.forward_noise(run, runner, runner.state(), ours,
                               lambda: runner.evaluate(batches))
  return judge(theirs, ours, run.port.metric_map,
               len(batches) * run.options.global_batch,
               evaluates_with, on_weights, found)


CHECK = Check(
    'evaluation', 'every eval metric by name (and the loss), at identical '
    'state, over the same batches', ONCE, drive,
    needs=('legacy.state', 'legacy.evaluate', 'legacy.evaluate_weights',
           'legacy.describe_run', 'port.set_state',
           'port.evaluate', 'legacy.averages', 'port.set_averages'),
    bar=BAR)
