"""inference: the PREDICT outputs at identical state, and each layer's
(compare/layers), each within its own bar: a layer that computes otherwise
fails it even where the outputs agree (a square kernel read untransposed
moves an attention's query, which a softmax of near-zero scores at a fresh
initialisation hides from the outputs).
"""
from __future__ import annotations

import dataclasses

from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import layers as layers_lib
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import bar_text
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import compare_outputs
from migration_tools.compare.verdict import FAILED

# The bar: each output within an absolute bar (integers exact), each
# layer's output relative to its scale.
BAR = Bar(atol=tolerances.INFERENCE_ATOL, words=(
    f'integers exact; each layer relative {bar_text(tolerances.LAYER_RTOL)}'
    ' or 4x its own noise'))

# What a layer that parts at identical weights and inputs may be.
LAYER_HINT = ('at identical weights and inputs, that layer computes '
              'otherwise: e.g. a kernel read in another layout (a square '
              'kernel untransposed), an epsilon, an input scaling, an '
              'activation inside the layer')


def judge(theirs: dict, ours: dict, output_map: dict[str, str],
          layers: dict | None = None, parting: str = '',
          noise: noise_lib.Forward | None = None,
          bar: Bar = BAR) -> CheckResult:
  """The same PREDICT outputs at identical state and inputs, by name.

  Args:
    layers: each layer's figures (compare/layers): a layer that parts fails
      the check, even where the outputs agree.
    parting: where inside the model the two part (layers.parting_text),
      '' where they do not.
    noise: the port's outputs' own rounding noise (noise.forward).
  """
  result = compare_outputs(
      'inference', theirs, ours, output_map, bar.atol,
      'before any training step, at identical weights and inputs: the model '
      'or its preprocessing differs (e.g. an input scaling done in the '
      'model_fn, an activation, a layer\'s order or hyper-parameter such as '
      'a batch-norm epsilon, an embedding\'s scaling, a kernel read in '
      'another layout)', {'layers': layers or {}}, noise)
  layer = (layers or {}).get('parting')
  if not parting:
    return result
  if not result.passed or layer is None:
    return dataclasses.replace(result, message=(
        f'{result.message}; ' if result.message else 'inside the model ') +
                               parting)
  return CheckResult(
      'inference', FAILED, f'the outputs agree within their bars, but '
      f'inside the model {parting}: {LAYER_HINT}',
      layers['by_layer'][layer], layers['bar_by_layer'][layer],
      {**result.figures, 'worst_layer': layer})


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """The outputs at identical state, and each layer's (compare/layers):
  where inside the model the two sides part, if they do."""
  legacy, runner = replicas.legacy, replicas.port
  features = run.data.batches[0][0]
  theirs, ours = legacy.predict(features), runner.predict(features)
  our_layers = runner.layer_outputs(features)
  run.forward_noise = passes.forward_noise(
      run, runner, run.start, ours, lambda: runner.predict(features),
      our_layers, lambda: runner.layer_outputs(features))
  figures = layers_lib.compare(legacy.layer_outputs(features), our_layers,
                               layers_lib.pairs(run.pairs), run.forward_noise)
  run.parting = layers_lib.parting_text(figures)
  return judge(theirs, ours, run.port.output_map, figures,
               run.parting, run.forward_noise)


CHECK = Check(
    'inference', 'every PREDICT output by name, at identical state; and each '
    'layer\'s output on one example (legacy name scope against the port\'s '
    'layer the variable map pairs with it), relative to its scale, the first '
    'that parts named (an activation one side applies inside a layer and '
    'the other after it is no parting)', ONCE, drive,
    needs=('legacy.predict', 'legacy.layer_outputs', 'port.predict',
           'port.layer_outputs'),
    leaves=('forward_noise', 'parting'), bar=BAR)
