"""served_predictions: both SavedModels (the Estimator's export, the
port's), loaded back, on the same receiver inputs.
"""
from __future__ import annotations

import os

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import compare_outputs
from migration_tools.pair import legacy_state

# The bar: each served output within an absolute bar, integers exact.
BAR = Bar(atol=tolerances.INFERENCE_ATOL, words='integers exact')


def judge(theirs: dict, ours: dict, output_map: dict[str, str],
          inputs: dict | None = None,
          exports: str = legacy_state.EVALUATES_WEIGHTS,
          noise: noise_lib.Forward | None = None,
          port_averages: bool = False, bar: Bar = BAR) -> CheckResult:
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
  return compare_outputs(
      'served_predictions', theirs, ours, output_map,
      bar.atol,
      'between the SavedModels at identical weights, on the same inputs: ' +
      averages + 'compare the serving functions (each input\'s dtype and '
      'preprocessing, as in training) and the exported outputs',
      {'inputs': {k: [*v.shape] for k, v in (inputs or {}).items()},
       'legacy_exports': exports}, noise)


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """Both SavedModels, loaded back, on the same receiver inputs."""
  legacy, runner = replicas.legacy, replicas.port
  inputs_ = legacy.serving_inputs(run.data, run.options.seed)
  passes.take_legacy_state(legacy, runner)
  # The port first: the legacy export leaves the port's Keras model unusable.
  ours = runner.serve(os.path.join(run.workdir, 'port'), inputs_)
  theirs = legacy.serve(run.workdir, inputs_)
  # The same outputs as inference's, served: their noise, measured there.
  return judge(theirs, ours, run.port.output_map,
               inputs_, replicas.describe()['exports'],
               run.forward_noise,
               port_averages=bool(runner.averages()))


CHECK = Check(
    'served_predictions', 'every output by name of both SavedModels (the '
    'Estimator\'s own export, the port\'s), loaded back, fed the receiver\'s '
    'inputs', ONCE, drive,
    needs=('legacy.serving_inputs', 'legacy.state', 'legacy.serve',
           'legacy.describe_run',
           'port.set_state', 'port.serve', 'legacy.averages',
           'port.set_averages'),
    bar=BAR,
    planned=lambda plan: plan.serving)
