"""--verify: the same batches predicted by the legacy model_fn on the old
checkpoint and by the port on the converted one; every output must agree
(floats within tolerances.CONVERSION_ATOL, integers exactly; a NaN, or an
infinity the other side does not hold, never agrees)."""
import dataclasses

import numpy as np
import tensorflow as tf

from kit_core import checkpoint_files
from kit_core import progress as progress_lib
from kit_core.errors import KitError
from migration_tools import outputs as outputs_lib
from migration_tools import tolerances
from migration_tools.pair import legacy
from migration_tools.pair import port as port_lib


@dataclasses.dataclass(frozen=True)
class Verification:
  """What --verify compared: examples, and each output's max difference."""
  examples: int
  max_diff_by_output: dict[str, float]


def verify(estimator_dir: str, output: str, port: port_lib.Port, model_fn,
           input_fn, params: dict, count: int,
           progress: progress_lib.Progress | None = None,
           averages: bool = False) -> Verification:
  """Predicts the same batches with both checkpoints; raises on mismatch.

  Args:
    estimator_dir, output: the old and the converted checkpoint's folders.
    port: builds the model the converted checkpoint is restored into, and
      predicts with it (Port.predict, output_map).
    model_fn: the legacy model_fn, run in PREDICT mode on the old checkpoint.
    input_fn: the legacy input_fn whose features are fed to both sides (each
      applies its own preprocessing after it).
    params: the user's params for input_fn and model_fn.
    count: how many examples, at most.
    progress: told what runs (its heartbeat repeats it); None: silent.
    averages: the legacy side predicts on the checkpoint's moving averages
      (converted as the weights: --averages_as_weights).

  Raises:
    KitError: an output differs, or the port lacks one.
  """
  progress = progress or progress_lib.Progress(None)
  batch = min(count, 64)
  progress.now(f'verify: reading {count} examples from the legacy input_fn')
  data = legacy.read_input_fn(input_fn, params, batch, -(-count // batch))
  features = tf.nest.map_structure(lambda *xs: np.concatenate(xs)[:count],
                                   *[f for f, _ in data.batches])
  progress.now('verify: the legacy model_fn predicting on '
               f'{checkpoint_files.latest(estimator_dir)}')
  theirs = legacy.predict(model_fn, checkpoint_files.latest(estimator_dir),
                          features, legacy.model_params(params, batch),
                          averages)
  progress.now(f'verify: the port predicting on {output}')
  model = port.build_model(legacy.model_params(params, batch))
  tf.train.Checkpoint(model=model).restore(
      tf.train.latest_checkpoint(output)).expect_partial()
  outputs = (port.predict(model, features) if port.predict else
             model(features, training=False))
  ours = {k: np.asarray(v) for k, v in outputs_lib.as_dict(outputs).items()}
  pairs, missing = outputs_lib.paired_outputs(theirs, ours, port.output_map)
  if missing:
    raise KitError(f'verification failed: the port has no output '
                   f'{", ".join(missing)} (port: {sorted(ours)}); map it '
                   '(Port.output_map)')
  diffs = {k: outputs_lib.output_diff(*pair) for k, pair in pairs.items()}
  floats = {k for k, pair in pairs.items() if pair[0].dtype.kind == 'f'}

  def allowed(name):
    return tolerances.CONVERSION_ATOL if name in floats else 0

  worst = outputs_lib.worst_output(pairs, diffs, allowed)
  examples = len(tf.nest.flatten(features)[0])
  if not diffs[worst] <= allowed(worst):
    said = outputs_lib.difference_text(worst, *pairs[worst], diffs[worst])
    cause = ('is a variable missing from the checkpoint, or did the port '
             'or the legacy weights diverge?' if outputs_lib.non_finite(
                 *pairs[worst]) else
             'is a variable mis-paired or a kernel transposed?')
    raise KitError(f'verification failed: {said} on {examples} examples '
                   f'(allowed {allowed(worst):.0e}); {cause}')
  return Verification(examples, diffs)
