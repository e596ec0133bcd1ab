"""--verify: the same batches predicted by the legacy model_fn on the old
checkpoint (now, or recorded: predictions.py) and by the port on the
converted one; every output must agree, and so must every layer the
variable map pairs on the first example, as the comparison's inference
check holds them (compare/layers: a square kernel loaded untransposed
moves the outputs of a trained model by less than their rounding, and
its layer by far more). Outputs: floats within
tolerances.CONVERSION_ATOL, or NOISE_MULTIPLE times the port's own rounding
noise on them where that is larger, as the comparison's forward checks
measure it (compare/noise.py: the outputs again with every kernel and
embedding one unit in the last place apart); integers exactly; a NaN, or
an infinity the other side does not hold, never agrees). Trained weights
are larger than a start's, and so is their rounding: a fixed 1e-6 once
failed the default job's trained checkpoint at 1.01e-6. ``judge`` needs
numpy alone: a port on JAX is verified with it (arrays.py)."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from kit_core import checkpoint_files
from kit_core import progress as progress_lib
from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools import outputs as outputs_lib
from migration_tools import tolerances
from migration_tools.compare import layers as layers_lib
from migration_tools.compare import noise as noise_lib
from migration_tools.checkpoint import files
from migration_tools.checkpoint import predictions
from migration_tools.pair import legacy
from migration_tools.pair import port as port_lib


@dataclasses.dataclass(frozen=True)
class Verification:
  """What --verify compared: examples, each output's max difference, and
  the layers (compare/layers.compare's figures; {} where none were: see
  layers_not_compared)."""
  examples: int
  max_diff_by_output: dict[str, float]
  layers: dict = dataclasses.field(default_factory=dict)
  layers_not_compared: str = ''


# Examples each side predicts at a time: one batch's activations are held
# (BERT-base at 64: 0.6 GB, more than its model; at 16 a quarter of that).
BATCH = 16


def counted(progress: progress_lib.Progress, side: str):
  """A line per batch predicted by side (outputs.in_batches' done)."""
  def done(predicted: int, count: int) -> None:
    progress.now(f'verify: {side}: {predicted} of {count} examples predicted')
  return done


def legacy_predictions(estimator_dir: str, model_fn, input_fn, params: dict,
                       count: int, progress: progress_lib.Progress,
                       averages: bool = False) -> predictions.Recorded:
  """The legacy model_fn's PREDICT outputs on the latest checkpoint of
  estimator_dir, for the first `count` examples of input_fn (TF 2.15),
  BATCH at a time.

  averages: predict on the checkpoint's moving averages.
  """
  batch = min(count, BATCH)
  progress.now(f'verify: reading {count} examples from the legacy input_fn')
  data = legacy.read_input_fn(input_fn, params, batch, -(-count // batch))
  features = tf.nest.map_structure(lambda *xs: np.concatenate(xs)[:count],
                                   *[f for f, _ in data.batches])
  path = checkpoint_files.latest(estimator_dir)
  progress.now(f'verify: the legacy model_fn predicting on {path}')
  outputs, layers = legacy.predict_and_layers(
      model_fn, path, features, legacy.model_params(params, batch), averages,
      counted(progress, 'the legacy model_fn'))
  return predictions.Recorded(
      predictions.identity(path), features,
      {k: np.asarray(v) for k, v in outputs.items()}, averages, batch,
      {'tensorflow': tf.__version__}, layers)


def verify(output: str, port: port_lib.Port, theirs: predictions.Recorded,
           params: dict,
           progress: progress_lib.Progress | None = None,
           pair_variables: PairVariables | None = None) -> Verification:
  """Predicts the legacy side's features with the port on the converted
  checkpoint in output; raises unless every output, and every layer,
  agrees with theirs.

  Args:
    output: the converted checkpoint's folder.
    port: builds the model the converted checkpoint is restored into, and
      predicts with it (Port.predict, output_map).
    theirs: what the legacy model_fn predicted (legacy_predictions, or a
      recording of it).
    params: the user's params for the port's build_model.
    progress: told what runs (its heartbeat repeats it); None: silent.
    pair_variables: the conversion's variable pairs, given the port's
      variables: its layers are paired by them (None: outputs alone).

  Raises:
    KitError: an output or a layer differs, or the port lacks an output.
  """
  progress = progress or progress_lib.Progress(None)
  progress.now(f'verify: the port predicting on {output}')
  # Restored as written (files.save): with the optimizer. On Keras 3 a
  # restore of the model alone left some of its variables unset (the
  # BERT-shaped port's encoder layers, reached through the optimizer only:
  # its predictions 7e-5 off).
  model, optimizer, state = files.build(port, legacy.model_params(
      params, theirs.batch))
  files.restore(model, optimizer, tf.train.latest_checkpoint(output))
  def predict(features):
    return (port.predict(model, features) if port.predict else
            model(features, training=False))
  def predict_all(side: str):
    return outputs_lib.in_batches(predict, theirs.features, theirs.batch,
                                  counted(progress, side))
  ours = predict_all('the port')
  layers = Layers(
      theirs, lambda: port_lib.layer_outputs(
          model, outputs_lib.first_batch(theirs.features, theirs.batch)),
      pair_variables and pair_variables(state))
  variables = {v.name + str(i): v for i, v in enumerate(model.variables)}
  noise = measured_noise(
      ours, lambda: {k: v.numpy() for k, v in variables.items()},
      lambda values: [variables[k].assign(a) for k, a in values.items()],
      lambda: predict_all('the port, its own noise'), progress, layers)
  return judge(theirs, ours, port.output_map, noise, layers)


# {port variable name: anything with a shape} -> {legacy name: port name}:
# the pairs the conversion wrote the port's variables by (files.pairs).
PairVariables = Callable[[dict], dict]


class Layers:
  """Each layer's output on the first example, both sides (compare/layers),
  where both have them: the legacy recording's, and the port's (of, a
  function that reads them at the port's current weights)."""

  def __init__(self, theirs: predictions.Recorded, of: Callable[[], dict],
               variable_pairs: dict | None):
    self.of, self.theirs = of, theirs.layers
    self.scope_pairs = layers_lib.pairs(variable_pairs or {})
    self.why_not = (
        'the legacy predictions hold no layer outputs (a recording made '
        f'before --verify compared layers: {predictions.RECORD_AGAIN}; or '
        'no legacy variable lies in a name scope)' if not theirs.layers else
        'no variable pairs were given' if variable_pairs is None else '')
    self.ours = self.of() if not self.why_not else {}
    if not self.why_not and not self.ours:
      self.why_not = ('the port gives no layer outputs (an ArrayPort\'s '
                      'layer_outputs)')

  def measured(self) -> bool:
    return not self.why_not

  def compared(self, noise: noise_lib.Forward | None) -> dict:
    """compare/layers.compare's figures ({} where none are compared)."""
    if self.why_not:
      return {}
    return layers_lib.compare(self.theirs, self.ours, self.scope_pairs,
                              noise)


def layers_text(result: Verification) -> str:
  """What --verify said of the layers: how many agreed, the closest to its
  bar, those grouped otherwise; or why none were compared."""
  compared = result.layers.get('compared') or []
  if not compared:
    return f'no layer compared: {result.layers_not_compared or "none paired"}'
  grouped = result.layers.get('grouped_otherwise') or {}
  share = {name: result.layers['by_layer'][name] /
           max(result.layers['bar_by_layer'][name], 1e-300)
           for name in compared if name not in grouped}
  said = f'{len(compared)} layers agree on the first example'
  if share:
    closest = max(share, key=share.get)
    said += f' (closest to its bar: {closest}, {share[closest]:.2g}x it)'
  if grouped:
    said += ('; ' + ', '.join(grouped) + ' once an activation is applied '
             'that one side applies inside the layer and the other after it')
  return said


def measured_noise(ours: dict, state, set_state, predict_all,
                   progress: progress_lib.Progress,
                   layers: Layers | None = None) -> noise_lib.Forward:
  """The port's own rounding noise on its outputs (ours), and on its
  layers' where they are compared: predicted again with every kernel and
  embedding of state() one unit in the last place apart, and again at
  state() itself (noise.forward); set_state puts a state, predict_all
  predicts every example."""
  progress.now('verify: the port\'s own rounding noise')
  held = state()
  kernels = [k for k, v in held.items()
             if np.ndim(v) >= 2 and np.asarray(v).dtype.kind == 'f']
  measured = layers is not None and layers.measured()
  return noise_lib.measure_forward(
      ours, held, kernels, set_state, predict_all,
      layers=layers.ours if measured else None,
      layers_of=layers.of if measured else None)


def judge(theirs: predictions.Recorded, ours: dict[str, np.ndarray],
          output_map: dict[str, str],
          noise: noise_lib.Forward | None = None,
          layers: Layers | None = None) -> Verification:
  """Every output of the legacy side against the port's (ours, by the
  port's names; output_map pairs them), each float within the larger of
  CONVERSION_ATOL and its measured noise's bar (noise, by the port's
  names; None: the fixed bar); then each layer (layers; None: none), each
  within its bar (compare/layers), the first that parts named.

  Raises:
    KitError: an output or a layer differs, the port lacks an output, or
      the port's own outputs differ between two calls at the same weights
      (noise).
  """
  pairs, missing = outputs_lib.paired_outputs(theirs.outputs, ours,
                                              output_map)
  if missing:
    raise KitError(f'verification failed: the port has no output '
                   f'{", ".join(missing)} (port: {sorted(ours)}); map it '
                   '(Port.output_map)')
  if noise is not None and (noise.unsteady or noise.unrepeatable):
    raise KitError('verification failed: ' + (
        noise_lib.unsteady_text(noise.unsteady, noise_lib.FORWARD_AGAIN)
        if noise.unsteady else noise_lib.unrepeatable_text(
            noise.unrepeatable, noise_lib.FORWARD_REPEATED)))
  diffs = {k: outputs_lib.output_diff(*pair) for k, pair in pairs.items()}
  floats = {k for k, pair in pairs.items() if pair[0].dtype.kind == 'f'}

  def allowed(name):
    if name not in floats:
      return 0
    if noise is None:
      return tolerances.CONVERSION_ATOL
    return noise.bar(output_map.get(name, name), tolerances.CONVERSION_ATOL)

  figures = layers.compared(noise) if layers is not None else {}
  parting = layers_lib.parting_text(figures)
  worst = outputs_lib.worst_output(pairs, diffs, allowed)
  if not diffs[worst] <= allowed(worst):
    said = outputs_lib.difference_text(worst, *pairs[worst], diffs[worst])
    cause = ('is a variable missing from the checkpoint, or did the port '
             'or the legacy weights diverge?' if outputs_lib.non_finite(
                 *pairs[worst]) else
             'is a variable mis-paired or a kernel transposed?')
    inside = f'; inside the model, on the first example, {parting}' if (
        parting) else ''
    raise KitError(f'verification failed: {said} on {theirs.examples} '
                   f'examples (allowed {allowed(worst):.3g}: '
                   f'{tolerances.CONVERSION_ATOL:.0e}, or '
                   f'{tolerances.NOISE_MULTIPLE:g}x the port\'s own rounding '
                   f'noise there){inside}; {cause}')
  if parting:
    raise KitError(
        f'verification failed: the outputs agree within their bars on '
        f'{theirs.examples} examples, but inside the model, on the first '
        f'example, {parting}: is a variable of that layer mis-paired, or a '
        'square kernel loaded untransposed (its shape cannot tell)?')
  why_not = ('not asked' if layers is None else layers.why_not)
  return Verification(theirs.examples, diffs, figures, why_not)
