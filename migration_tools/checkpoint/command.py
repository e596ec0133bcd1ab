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

A port on JAX (an ArrayPort: ``--port`` names one, or the jax profile's
default, the kit's Keras 3 port) gets the same variables, slots and step,
written by its own save_weights (the kit's: a Keras 3 ``.weights.h5`` with
the optimizer's state) or as named arrays, with no TensorFlow in the
process (``arrays``). Its --verify compares against the legacy model_fn's
predictions recorded on TF 2.15 (``predictions``):

  migration-convert-checkpoint --estimator_dir=OLD_MODEL_DIR \
      --legacy_model_fn=... --legacy_input_fn=... \
      --record_predictions=P.npz                          # on TF 2.15
  migration-convert-checkpoint --estimator_dir=OLD_MODEL_DIR \
      --output=NEW_DIR --port=my_jax_port:make_port --verify \
      --predictions=P.npz                                  # on JAX

--keras2_dir reads a checkpoint the port wrote with Keras 2 (its layout,
``model/layer_with_weights-N/...``, is not Keras 3's) by the names the object
graph kept, and writes the same weights, optimizer slots and step in the
layout of the same port built on Keras 3.
"""
import contextlib
import os
import shutil
from typing import Iterator

from kit_core import process

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
from absl import logging

from kit_core import exits
from kit_core import keras_compat
from kit_core import lazy
from kit_core import paths
from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import printable
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools import cli
from migration_tools.checkpoint import arrays
from migration_tools.checkpoint import estimator
from migration_tools.checkpoint import files
from migration_tools.checkpoint import predictions
from migration_tools.checkpoint import verify
from migration_tools.pair import flags as pair
from migration_tools.pair import frameworks
from migration_tools.pair import legacy
# pylint: enable=g-import-not-at-top,wrong-import-position

# How a port's checkpoint is written and verified: with TensorFlow for a
# framework on it (Framework.on_tensorflow), else through the port's model
# and its framework's save_state and load_state (checkpoint/arrays.py):
# convert(estimator_dir, output, port, params, slots, order, averages), and
# verify(written path, output folder, port, recorded, params, progress,
# pair_variables).
_ON_TENSORFLOW = {
    True: (estimator.convert,
           lambda path, output, *rest: verify.verify(output, *rest)),
    False: (arrays.convert,
            lambda path, output, *rest: arrays.verify(path, *rest)),
}


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
                       'How many examples --verify (or '
                       '--record_predictions) predicts, at most.',
                       lower_bound=1, **define)
  flags.DEFINE_string('record_predictions', None,
                      'Instead of converting: record the legacy model_fn\'s '
                      'predictions on --estimator_dir\'s checkpoint into this '
                      'file (.npz), on TF 2.15, for --verify --predictions '
                      'where the legacy code cannot run (a port on JAX, a '
                      'newer TensorFlow).', **define)
  flags.DEFINE_string('predictions', None,
                      'With --verify: the legacy predictions recorded by '
                      '--record_predictions, compared instead of running '
                      'the legacy model_fn.', **define)
  pair.define_pair_flags(tool_flags, serving=False)


def main(tool_flags: flags.FlagValues, args: list[str]) -> None:
  """Converts, and with --verify checks the outputs of both sides; or, with
  --record_predictions, records the legacy side's."""
  exits.output_flags('--output (or --record_predictions)')
  if args:
    raise KitError(f'unexpected arguments {args}; flags take the form '
                   '--name=value (see --help)')
  logging.set_verbosity(logging.INFO)
  if lazy.installed('tensorflow'):
    tf.get_logger().handlers.clear()
  if bool(tool_flags.estimator_dir) == bool(tool_flags.keras2_dir):
    raise KitError('give one of --estimator_dir (an Estimator checkpoint) or '
                   '--keras2_dir (the port\'s own, from TF 2.15)')
  if tool_flags.record_predictions is not None:
    _record(tool_flags)
    return
  _check_conversion_flags(tool_flags)
  source = (('--keras2_dir', tool_flags.keras2_dir) if tool_flags.keras2_dir
            else ('--estimator_dir', tool_flags.estimator_dir))
  files.check_output(tool_flags.output, *source)  # Before any work.
  files.check_room(source[1], tool_flags.output)
  # An empty --output the user made stays; one this run makes goes, if the
  # verification fails.
  existed = os.path.isdir(tool_flags.output)
  # No batch here: a batch_size in --params goes to the port as it is.
  params = cli.parse_params(tool_flags.params, batch_flag=None)
  port = pair.load_port(tool_flags)
  framework = frameworks.framework_of(port)
  on_tensorflow = framework.on_tensorflow
  if not on_tensorflow and tool_flags.keras2_dir:
    raise KitError('--keras2_dir carries a port\'s TF 2.15 checkpoint to '
                   'Keras 3 on TensorFlow; --port names a port on '
                   f'{framework.describe(port)}: convert its --estimator_dir '
                   'instead')
  theirs = _recorded(tool_flags)  # Refused before any work if it is wrong.
  if not on_tensorflow and tool_flags.verify and theirs is None:
    raise KitError(f'--verify of a port on {framework.describe(port)} '
                   'compares with the legacy '
                   'predictions recorded on TF 2.15: record them there '
                   '(--record_predictions=FILE), then add --predictions=FILE')
  fns = None  # The legacy model_fn and input_fn, when asked for.
  if tool_flags.estimator_dir and (
      (tool_flags.verify and theirs is None) or
      tool_flags['legacy_model_fn'].present):
    legacy.require_estimator(
        '--verify and --legacy_model_fn run your model_fn',
        'convert here without them, or verify against predictions recorded '
        'on TF 2.15 (--record_predictions, then --predictions)')
    fns = _legacy_fns(tool_flags)
  # A signal stops the writing (its temporary folder removed) or the
  # verification (the unverified output removed): nothing half-done stays.
  # A line at least every 30 s while a large checkpoint is read, written or
  # verified.
  progress = progress_lib.Progress()
  # With --verify, a signal between the conversion and its verification (at
  # the Checkpoint: line) removes the unverified output too: the handlers of
  # _unverified_removed hold from the conversion to the verification's end.
  with _unverified_removed(tool_flags, existed):
    with progress.heartbeat(), exits.interruptible(
        'nothing was written to --output; run the same command again'):
      progress.now('converting: reading, pairing and writing the variables')
      order = _creation_order(tool_flags, port, params, fns)
      path = _convert(tool_flags, port, params, order)
      if tool_flags.verify:
        # A SIGKILL from here to the verification's end leaves the mark,
        # which the next run reads.
        files.mark_unverified(tool_flags.output)
    print(printable(f'Checkpoint: {path}'))
    if (tool_flags.estimator_dir and on_tensorflow and
        not keras_compat.is_keras3()):
      # Keras 3 tracks a model's variables otherwise: it would restore this
      # layout in part.
      print(f'Written by Keras 2: on TF 2.16 and later (Keras 3), carry it '
            f'over first: migration-convert-checkpoint '
            f'--keras2_dir={tool_flags.output} --output=NEW_DIR')
    if tool_flags.verify:
      with progress.heartbeat():
        _verify(tool_flags, port, params, fns, theirs, path, existed,
                progress, _pairing(tool_flags.estimator_dir, port, order))
      files.mark_verified(tool_flags.output)


def _check_conversion_flags(tool_flags: flags.FlagValues) -> None:
  """The flags of a conversion that cannot go together, refused in one
  line."""
  if tool_flags.output is None:
    raise KitError('--output is required: a new directory for the converted '
                   'checkpoint (or --record_predictions=FILE, on TF 2.15, to '
                   'record the legacy predictions)')
  if tool_flags.keras2_dir and tool_flags.verify:
    raise KitError('--verify runs the legacy model_fn: it goes with '
                   '--estimator_dir only')
  if tool_flags.predictions and not tool_flags.verify:
    raise KitError('--predictions is what --verify compares with: add '
                   '--verify')


def _legacy_fns(tool_flags: flags.FlagValues) -> tuple:
  """The legacy model_fn and input_fn, their flags set."""
  fns = (pair.legacy_callable(tool_flags, 'legacy_model_fn'),
         pair.legacy_callable(tool_flags, 'legacy_input_fn'))
  cli.set_legacy_flags(tool_flags.legacy_flags)
  return fns


def _recorded(tool_flags: flags.FlagValues) -> predictions.Recorded | None:
  """--predictions, read and checked against --estimator_dir's checkpoint
  (and --averages_as_weights); None if not given."""
  if not tool_flags.predictions:
    return None
  recorded = predictions.load(tool_flags.predictions)
  path = files.latest(tool_flags.estimator_dir)
  predictions.check_matches(recorded, predictions.identity(path),
                            tool_flags.predictions,
                            tool_flags.averages_as_weights)
  return recorded


def _record(tool_flags: flags.FlagValues) -> None:
  """--record_predictions: the legacy model_fn's predictions on the latest
  checkpoint of --estimator_dir, written for a later --verify."""
  if (tool_flags.keras2_dir or tool_flags.output is not None or
      tool_flags.verify):
    raise KitError('--record_predictions records the legacy model_fn\'s '
                   'predictions on --estimator_dir, and converts nothing: '
                   'leave out --keras2_dir, --output and --verify, and '
                   'convert in a second command with --verify '
                   '--predictions=FILE')
  output = paths.check_output(
      tool_flags.record_predictions, '--record_predictions',
      [('the input --estimator_dir', tool_flags.estimator_dir)])
  files.latest(tool_flags.estimator_dir)  # Refused now if there is none.
  legacy.require_estimator('--record_predictions runs your model_fn',
                           'record on the estimator profile (TF 2.15)')
  params = cli.parse_params(tool_flags.params, batch_flag=None)
  fns = _legacy_fns(tool_flags)
  progress = progress_lib.Progress()
  with progress.heartbeat(), exits.interruptible(
      'nothing was written to --record_predictions; run the same command '
      'again'):
    recorded = verify.legacy_predictions(
        tool_flags.estimator_dir, *fns, params, tool_flags.verify_examples,
        progress, tool_flags.averages_as_weights)
    predictions.save(output, recorded)
  print(printable(f'Recorded the predictions of {recorded.checkpoint["name"]} '
                  f'(step {recorded.checkpoint["step"]}) on '
                  f'{recorded.examples} examples: {output}'))
  print('Verify a conversion with them where the port runs: '
        'migration-convert-checkpoint '
        f'--estimator_dir={tool_flags.estimator_dir} --output=NEW_DIR '
        f'--port=... --verify --predictions={output}')


def _creation_order(tool_flags: flags.FlagValues, port, params: dict,
                    fns: tuple | None) -> list[str] | None:
  """The legacy variables in creation order, where a map is inferred by
  shape and order and the legacy model_fn is at hand (fns); else None."""
  if tool_flags.keras2_dir or port.variable_map is not None or fns is None:
    return None
  # A map inferred by shape and order follows the legacy creation order,
  # which the checkpoint (sorted by name) does not keep.
  return legacy.creation_order(*fns, params)


def _pairing(estimator_dir: str | None, port, order: list[str] | None
             ) -> verify.PairVariables:
  """The conversion's pairs again, given the port's variables as --verify
  restored them: its layers are paired by them."""
  def pair_variables(ours: dict) -> dict:
    shapes = estimator.read_checkpoint(estimator_dir).model.shapes
    return files.pairs(shapes, ours, port.variable_map, order)
  return pair_variables


def _convert(tool_flags: flags.FlagValues, port, params: dict,
             order: list[str] | None) -> str:
  """Writes the converted checkpoint into --output; returns its path.
  order: _creation_order's."""
  if tool_flags.keras2_dir:
    # It reads TensorFlow's object graph: imported where TensorFlow is due.
    from migration_tools.checkpoint import keras2  # pylint: disable=g-import-not-at-top
    return keras2.convert_keras2(tool_flags.keras2_dir, tool_flags.output,
                                 port, params)
  convert, _ = _ON_TENSORFLOW[frameworks.framework_of(port).on_tensorflow]
  return convert(tool_flags.estimator_dir, tool_flags.output, port, params,
                 not tool_flags.no_slots, order,
                 tool_flags.averages_as_weights,
                 say=lambda line: print(printable(line)))


def _verify(tool_flags: flags.FlagValues, port, params: dict,
            fns: tuple | None, theirs: predictions.Recorded | None,
            path: str, existed: bool, progress: progress_lib.Progress,
            pair_variables: verify.PairVariables) -> None:
  """--verify: every output of both sides agrees, or what this run wrote
  into --output is removed (also when a signal stops the verification).

  theirs: the recorded legacy predictions, or None: the legacy model_fn
    (fns) predicts now. path: what the conversion wrote.
  existed: --output was there (empty) before the run: it stays, emptied.
  pair_variables: the conversion's variable pairs, for the layers.
  """
  output = tool_flags.output
  removed = _removed_text(output, existed)
  try:
    with exits.interruptible(f'the verification was stopped and {removed}; '
                             'run the same command again'):
      if theirs is None:
        theirs = verify.legacy_predictions(
            tool_flags.estimator_dir, *fns, params,
            tool_flags.verify_examples, progress,
            tool_flags.averages_as_weights)
      _, check = _ON_TENSORFLOW[
          frameworks.framework_of(port).on_tensorflow]
      result = check(path, output, port, theirs, params, progress,
                     pair_variables)
  except Interrupted:
    _remove_written(output, existed)
    raise
  except Exception as e:  # pylint: disable=broad-except
    _remove_written(output, existed)
    raise KitError(f'{one_line(e)}; {removed}') from e
  shown = ', '.join(f'{k} {v:.2e}' for k, v in
                    sorted(result.max_diff_by_output.items()))
  print(printable(f'Verified on {result.examples} examples: every output '
                  f'agrees (max differences: {shown}); '
                  f'{verify.layers_text(result)}'))


def _removed_text(output: str, existed: bool) -> str:
  return (f'what was written to {output} was removed' if existed else
          f'{output} was removed')


@contextlib.contextmanager
def _unverified_removed(tool_flags: flags.FlagValues,
                        existed: bool) -> Iterator[None]:
  """With --verify: a signal while the block runs and no inner block
  handles it stops the command with what this run wrote removed."""
  if not tool_flags.verify:
    yield
    return
  stopped = (f'the verification was stopped and '
             f'{_removed_text(tool_flags.output, existed)}; run the same '
             'command again')
  try:
    with exits.interruptible(stopped):
      yield
  except Interrupted as e:
    if e.consequence == stopped:  # Not the conversion's: it wrote nothing.
      _remove_written(tool_flags.output, existed)
    raise


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

