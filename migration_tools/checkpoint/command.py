r"""Carries a trained Estimator checkpoint over to the port, or the port's
own checkpoint from TF 2.15 (Keras 2) over to Keras 3.

  migration-convert-checkpoint --estimator_dir=OLD_MODEL_DIR \
      --output=NEW_MODEL_DIR [--port=my_port:make_port] [--params=JSON] \
      [--variable_map=map.json] [--verify]
  migration-convert-checkpoint --keras2_dir=PORT_MODEL_DIR_ON_TF_2_15 \
      --output=NEW_MODEL_DIR [--port=my_port:make_port] [--params=JSON]

Reads the latest name-based checkpoint in --estimator_dir and writes an
object-based checkpoint (model and optimizer) into --output, a directory the
port restores and resumes from (the kit's: ``python -m migrate
--model_dir=NEW_MODEL_DIR``). What is carried: every model variable (weights
and e.g. batch-norm moving statistics), paired by the port's variable map,
--variable_map, or inferred from names and shapes (``variable_map``); the
optimizer's slots (TF 1 Momentum and Adam, in the port's convention:
``optimizers``; any other optimizer's '<variable>/<slot>', e.g. BERT's
adam_m and adam_v, paired with the port optimizer's slots by Port.slot_map,
equal names or creation order; --no_slots drops them, and says so); the
global step, as the optimizer's step. Anything left
unpaired on either side is an error that lists it. --verify then feeds the
same batches of the legacy input_fn to the legacy model_fn in PREDICT mode
(old checkpoint) and to the port's predict (new checkpoint), and requires
every output to agree (floats within tolerances.CONVERSION_ATOL, integers
exactly).

--keras2_dir reads a checkpoint the port wrote with Keras 2 (its layout,
``model/layer_with_weights-N/...``, is not Keras 3's) by the names the object
graph kept, and writes the same weights, optimizer slots and step in the
layout of the same port built on Keras 3.
"""
import os
import shutil

from kit_core import process

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
from absl import logging
import tensorflow as tf
# pylint: enable=g-import-not-at-top,wrong-import-position

from kit_core import exits
from kit_core import keras_compat
from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools import cli
from migration_tools.checkpoint import estimator
from migration_tools.checkpoint import files
from migration_tools.checkpoint import keras2
from migration_tools.checkpoint import verify
from migration_tools.pair import flags as pair
from migration_tools.pair import legacy


def define_flags(tool_flags: flags.FlagValues) -> None:
  """The command's flags, on the tool's own FlagValues (see cli)."""
  define = dict(flag_values=tool_flags)
  flags.DEFINE_string('estimator_dir', None, 'Estimator model_dir to read.',
                      **define)
  flags.DEFINE_string('keras2_dir', None,
                      'Instead of --estimator_dir: a model_dir the port '
                      'wrote on TF 2.15 (Keras 2), to carry over to the same '
                      'port on Keras 3 (TF 2.16 and later).', **define)
  flags.DEFINE_string('output', None, 'New directory for the TF2 checkpoint.',
                      **define)
  flags.DEFINE_bool('no_slots', False, 'Drop the optimizer\'s slots: the '
                    'model and step alone, the optimizer starting afresh.',
                    **define)
  flags.DEFINE_bool('averages_as_weights', False, 'Write the checkpoint\'s '
                    'moving averages (<variable>/ExponentialMovingAverage) as '
                    'the port\'s weights, as the Estimator evaluated and '
                    'exported them through its scaffold; --verify then '
                    'predicts the legacy side on them too.', **define)
  flags.DEFINE_bool('verify', False, 'Check that every output of both sides '
                    'agrees.', **define)
  flags.DEFINE_integer('verify_examples', 1000,
                       'How many examples --verify predicts, at most.',
                       lower_bound=1, **define)
  pair.define_pair_flags(tool_flags, serving=False)
  flags.mark_flags_as_required(['output'], flag_values=tool_flags)


def main(tool_flags: flags.FlagValues, args: list[str]) -> None:
  """Converts, and with --verify checks the outputs of both sides."""
  if args:
    raise KitError(f'unexpected arguments {args}; flags take the form '
                   '--name=value (see --help)')
  logging.set_verbosity(logging.INFO)
  tf.get_logger().handlers.clear()
  if bool(tool_flags.estimator_dir) == bool(tool_flags.keras2_dir):
    raise KitError('give one of --estimator_dir (an Estimator checkpoint) or '
                   '--keras2_dir (the port\'s own, from TF 2.15)')
  if tool_flags.keras2_dir and tool_flags.verify:
    raise KitError('--verify runs the legacy model_fn: it goes with '
                   '--estimator_dir only')
  source = (('--keras2_dir', tool_flags.keras2_dir) if tool_flags.keras2_dir
            else ('--estimator_dir', tool_flags.estimator_dir))
  files.check_output(tool_flags.output, *source)  # Before any work.
  # An empty --output the user made stays; one this run makes goes, if the
  # verification fails.
  existed = os.path.isdir(tool_flags.output)
  # No batch here: a batch_size in --params goes to the port as it is.
  params = cli.parse_params(tool_flags.params, batch_flag=None)
  port = pair.load_port(tool_flags)
  fns = None  # The legacy model_fn and input_fn, when asked for.
  if tool_flags.estimator_dir and (tool_flags.verify or
                                   tool_flags['legacy_model_fn'].present):
    legacy.require_estimator(
        '--verify and --legacy_model_fn run your model_fn',
        'convert here without them')
    fns = (pair.legacy_callable(tool_flags, 'legacy_model_fn'),
           pair.legacy_callable(tool_flags, 'legacy_input_fn'))
    cli.set_legacy_flags(tool_flags.legacy_flags)
  # A signal stops the writing (its temporary folder removed) or the
  # verification (the unverified output removed): nothing half-done stays.
  # A line at least every 30 s while a large checkpoint is read, written or
  # verified.
  progress = progress_lib.Progress()
  with progress.heartbeat(), exits.interruptible(
      'nothing was written to --output; run the same command again'):
    progress.now('converting: reading, pairing and writing the variables')
    path = _convert(tool_flags, port, params, fns)
  print(f'Checkpoint: {path}')
  if tool_flags.estimator_dir and not keras_compat.is_keras3():
    # Keras 3 tracks a model's variables otherwise: it would restore this
    # layout in part.
    print(f'Written by Keras 2: on TF 2.16 and later (Keras 3), carry it '
          f'over first: migration-convert-checkpoint '
          f'--keras2_dir={tool_flags.output} --output=NEW_DIR')
  if tool_flags.verify:
    with progress.heartbeat():
      _verify(tool_flags, port, params, fns, existed, progress)


def _convert(tool_flags: flags.FlagValues, port, params: dict,
             fns: tuple | None) -> str:
  """Writes the converted checkpoint into --output; returns its path.
  fns: the legacy model_fn and input_fn, or None."""
  if tool_flags.keras2_dir:
    return keras2.convert_keras2(tool_flags.keras2_dir, tool_flags.output,
                                 port, params)
  order = None
  if port.variable_map is None and tool_flags['legacy_model_fn'].present:
    # A map inferred by shape and order follows the legacy creation order,
    # which the checkpoint (sorted by name) does not keep.
    order = legacy.creation_order(*fns, params)
  return estimator.convert(tool_flags.estimator_dir, tool_flags.output, port,
                           params, not tool_flags.no_slots, order,
                           tool_flags.averages_as_weights)


def _verify(tool_flags: flags.FlagValues, port, params: dict,
            fns: tuple, existed: bool,
            progress: progress_lib.Progress) -> None:
  """--verify: every output of both sides agrees, or what this run wrote
  into --output is removed (also when a signal stops the verification).

  existed: --output was there (empty) before the run: it stays, emptied.
  """
  output = tool_flags.output
  removed = f'what was written to {output} was removed' if existed else (
      f'{output} was removed')
  try:
    with exits.interruptible(f'the verification was stopped and {removed}; '
                             'run the same command again'):
      result = verify.verify(tool_flags.estimator_dir, output, port, *fns,
                             params, tool_flags.verify_examples, progress,
                             tool_flags.averages_as_weights)
  except Interrupted:
    _remove_written(output, existed)
    raise
  except Exception as e:  # pylint: disable=broad-except
    _remove_written(output, existed)
    raise KitError(f'{one_line(e)}; {removed}') from e
  shown = ', '.join(f'{k} {v:.2e}' for k, v in
                    sorted(result.max_diff_by_output.items()))
  print(f'Verified on {result.examples} examples: every output agrees '
        f'(max differences: {shown})')


def _remove_written(output: str, existed: bool) -> None:
  """Removes what this run wrote: all of output, or, if output was an
  empty folder before the run, what is in it."""
  if not existed:
    shutil.rmtree(output, ignore_errors=True)
    return
  for name in os.listdir(output):
    path = os.path.join(output, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      os.remove(path)


def run() -> None:
  """Console-script entry point (``migration-convert-checkpoint``)."""
  cli.run(main, define_flags, __doc__)

