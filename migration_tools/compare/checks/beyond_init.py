"""beyond_init: the PREDICT outputs with the start state's kernels and
embeddings scaled up, where activations leave their near-linear range and
variants of one (erf and tanh GELU) part.
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare import layers as layers_lib
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import passes
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import ONCE
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import NOT_RUN
from migration_tools.compare.verdict import SKIPPED

# The bar: each output relative to its scale (or the port's own noise
# where measured: noise.bar).
BAR = Bar(rtol=tolerances.BEYOND_INIT_RTOL)


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


def judge(theirs: dict, ours: dict, output_map: dict[str, str],
          gain: float, factor: float, layers: dict | None = None,
          parting: str = '', noise: noise_lib.Forward | None = None,
          bar: Bar = BAR) -> CheckResult:
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
  bars = {k: noise.bar(output_map.get(k, k), bar.rtol,
                       scales[k]) if noise else bar.rtol
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
  if parting:
    hint += f'; inside the model, {parting}'
  result = judged('beyond_init', relative[worst], bars[worst], figures, hint)
  layer = (layers or {}).get('parting')
  if not result.passed or layer is None:
    return result
  # The outputs agree, but a layer does not: the layers are judged too.
  return CheckResult(
      'beyond_init', FAILED, f'with the kernels and embeddings of the start '
      f'state scaled up to a gain of {gain:g} ({factor:.3g}x, median), the '
      f'outputs agree within their bars, but inside the model {parting}: '
      'that layer computes otherwise where activations leave their '
      'near-linear range (e.g. erf GELU for tanh GELU, a softmax or layer '
      'norm computed otherwise, a kernel read in another layout)',
      layers['by_layer'][layer], layers['bar_by_layer'][layer],
      {**figures, 'worst_layer': layer})


def scaled_start(start: dict, weights, gain: float) -> dict:
  """The start state with every trainable variable of 2 or more dimensions
  (kernels, embeddings) scaled up, never down, until its root mean square
  times the square root of its fan-in (every dimension but the last) is
  gain: what a unit input comes out as. Biases, norms' scales and offsets
  and batch-norm statistics stay as they are."""
  scaled = dict(start)
  for name in weights:
    value = start[name]
    if np.ndim(value) < 2:
      continue
    fan_in = int(np.prod(np.shape(value)[:-1]))
    rms = float(np.sqrt(np.mean(np.square(value, dtype=np.float64))))
    if rms > 0:
      factor = max(1.0, gain / (rms * np.sqrt(fan_in)))
      scaled[name] = value * np.asarray(factor, value.dtype)
  return scaled


def drive(run: Run, replicas: Replicas) -> CheckResult:
  """The outputs again, both sides set to the start state with its kernels
  and embeddings scaled up to a gain of --beyond_init: at a fresh
  initialisation (BERT's standard deviation of 0.02) most activations work
  near 0, where an activation and its variants agree (tanh and erf GELU part
  by 3e-8 at 0.1); scaled, they leave that range. Where the legacy outputs
  overflow (a deep network without normalisation grows by the gain at each
  layer), the gain is halved until they do not. Both sides go back to the
  start state after."""
  name, asked = 'beyond_init', run.options.beyond_init
  if not asked:
    return CheckResult(name, SKIPPED, 'off (--beyond_init=0, or a '
                       'bundle recorded before this check)')
  legacy, runner = replicas.legacy, replicas.port
  features = run.data.batches[0][0]
  weights = {n for n in run.weights if np.ndim(run.start[n]) >= 2 and
             np.any(run.start[n])}
  if not weights:
    return CheckResult(name, SKIPPED, 'the model has no trainable '
                       'variable of two or more dimensions that is not 0 '
                       '(no kernel or embedding to scale)')

  scaled = {}  # The last state tried, by its gain (one model's worth).

  def legacy_at(gain: float) -> dict:
    scaled.clear()
    scaled[gain] = scaled_start(run.start, weights, gain)
    legacy.set_state(scaled[gain])
    return legacy.predict(features)

  try:
    gain, theirs = computable_gain(legacy_at, asked)
    if gain is None:
      return CheckResult(name, SKIPPED, 'the legacy outputs overflow '
                         'with the weights scaled to any gain down to 1: no '
                         'such state is one the model computes')
    runner.set_state(scaled[gain])
    ours = runner.predict(features)
    our_layers = runner.layer_outputs(features)
    found = passes.forward_noise(run, runner, scaled[gain], ours,
                                 lambda: runner.predict(features), our_layers,
                                 lambda: runner.layer_outputs(features))
    figures = layers_lib.compare(legacy.layer_outputs(features), our_layers,
                                 layers_lib.pairs(run.pairs), found)
  finally:
    legacy.set_state(run.start)
    runner.set_state(run.start)
  state = scaled[gain]
  factors = [float(np.sqrt(np.mean(np.square(state[n], dtype=np.float64)) /
                           np.mean(np.square(run.start[n], dtype=np.float64))))
             for n in weights]
  return judge(theirs, ours, run.port.output_map, gain,
               float(np.median(factors)), figures,
               layers_lib.parting_text(figures), found)


CHECK = Check(
    'beyond_init', 'every PREDICT output by name, both sides set to the '
    'start state with every kernel and embedding scaled up to a gain (root '
    'mean square times the square root of the fan-in) of `--beyond_init` '
    '(2; halved while the legacy outputs overflow), where activations leave '
    'their near-linear range; relative to each output\'s scale', ONCE,
    drive,
    needs=('legacy.predict', 'legacy.layer_outputs', 'legacy.set_state',
           'port.predict', 'port.layer_outputs', 'port.set_state'),
    bar=BAR)
