"""Checkpoints that resume: the TF2 form of the Estimator's model_dir.

Both trainers save ``tf.train.Checkpoint(model=..., optimizer=...,
random=...)`` with a ``CheckpointManager`` in --model_dir; the optimizer's
``iterations`` is the global step, and ``random`` the state of dropout's random
numbers. A restarted run restores the latest checkpoint and trains only the
remaining steps, as ``TPUEstimator.train(max_steps=...)`` did.
"""
import os

from absl import logging
import tensorflow as tf

from kit_core import checkpoint_files
from kit_core import keras_compat
from kit_core import private_folders
from kit_core import stale
from kit_core.errors import KitError
from kit_core.errors import one_line
from migrate import divergence
from migrate import strategy as strategy_lib
from mnist_common.errors import describe_names

# Present in every object-based (TF2) checkpoint, absent from name-based ones.
_OBJECT_GRAPH_KEY = '_CHECKPOINTABLE_OBJECT_GRAPH'


PREFIX = 'ckpt'  # CheckpointManager's default: ckpt-N.


def make_checkpoint(model: tf.keras.Model, optimizer,
                    strategy: tf.distribute.Strategy) -> tf.train.Checkpoint:
  """What a checkpoint holds: weights, optimizer (with the step) and the
  state of the model's random ops."""
  return tf.train.Checkpoint(
      model=model, optimizer=optimizer,
      random=keras_compat.random_state(model, strategy))


def _without_random(checkpoint: tf.train.Checkpoint,
                    keys) -> tf.train.Checkpoint:
  """checkpoint, or a view of it without its random state when the one on
  disk has none (converted from an Estimator's, or written by the harness)."""
  if not getattr(checkpoint, 'random', None) or any(
      k.startswith('random/') for k in keys):
    return checkpoint
  return tf.train.Checkpoint(model=checkpoint.model,
                             optimizer=checkpoint.optimizer)


def restore(checkpoint: tf.train.Checkpoint, model_dir: str,
            record_state: bool = True) -> bool:
  """Restores the newest usable checkpoint in model_dir; True if it restored
  one.

  A checkpoint that cannot be read (truncated, corrupt, files missing), or
  whose weights are not finite (written by a diverged run before the kit
  guarded its saves), is skipped with a line naming it, for the next older
  one, as the manager keeps several. Checkpoints are found by their files,
  the state file missing, garbage or stale; record_state (the chief's part)
  makes the state file name the one restored, for the manager.

  Raises:
    KitError: model_dir holds a checkpoint of something else (a name-based
      Estimator/TF1 checkpoint, another model's, Keras 2's on Keras 3), or
      none of its checkpoints can be used.
  """
  candidates = checkpoint_files.find(model_dir)
  unusable = []
  weights = divergence.WeightsCheck(
      divergence.checkpointed_variables(checkpoint))
  for path in candidates:
    try:
      _restore_one(checkpoint, model_dir, path)
    except checkpoint_files.READ_ERRORS as e:
      reason = f'it cannot be read ({one_line(e)})'
    else:
      names = weights.non_finite()
      if not names:
        logging.info('Restored %s', path)
        if record_state:
          checkpoint_files.record_state(model_dir, candidates, path)
        return True
      reason = f'its weights are not finite ({describe_names(names)})'
    unusable.append(os.path.basename(path))
    logging.warning('Skipped %s: %s; trying an older checkpoint', path,
                    reason)
  if unusable:
    raise KitError(f'no checkpoint in --model_dir {model_dir} can be used '
                   f'({", ".join(unusable)}); move them away to start '
                   'afresh, or use another --model_dir')
  return False


def _restore_one(checkpoint: tf.train.Checkpoint, model_dir: str,
                 path: str) -> None:
  keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
  if _OBJECT_GRAPH_KEY not in keys:
    raise KitError(f'--model_dir {model_dir} holds a name-based (Estimator or '
                   f'TF1) checkpoint, {os.path.basename(path)}; convert it with '
                   'migration-convert-checkpoint, or use another '
                   '--model_dir')
  if keras_compat.is_keras3() and keras_compat.written_by_keras2(keys):
    raise KitError(f'--model_dir {model_dir} holds a checkpoint written by '
                   f'Keras 2 (TF 2.15), {os.path.basename(path)}; carry it '
                   'over with migration-convert-checkpoint --keras2_dir='
                   f'{model_dir} --output=NEW_DIR and train in NEW_DIR')
  view = _without_random(checkpoint, keys)
  if view is not checkpoint:
    logging.warning('%s holds no random state: dropout draws from its first '
                    'state again', os.path.basename(path))
  try:
    view.restore(path).assert_consumed()
  except (AssertionError, ValueError) as e:
    reason = str(e).splitlines()[0][:200]
    raise KitError(f'--model_dir {model_dir} holds a checkpoint of another '
                   f'model ({os.path.basename(path)}: {reason}); use another '
                   '--model_dir') from e


def make_manager(checkpoint: tf.train.Checkpoint, model_dir: str,
                 strategy: tf.distribute.Strategy
                 ) -> tf.train.CheckpointManager:
  """A manager that keeps the last 3 checkpoints and saves only finite
  weights (divergence.FiniteCheckpointManager).

  With several workers all of them must save (saving may run collectives),
  but only the chief writes into model_dir; the others write into a
  temporary directory, removed at exit.
  """
  directory = model_dir
  if strategy_lib.is_chief(strategy):
    stale.remove(model_dir, stale.checkpoint_temp(PREFIX),
                 'unfinished checkpoint folders')
    # A save the disk refuses leaves its temporary folder: this run's.
    stale.watch(model_dir, stale.checkpoint_temp(PREFIX))
  else:
    # What a CheckpointManager writes: its checkpoint files, the index
    # file, and a save's temporary folder.
    directory = private_folders.private_folder(
        'migrate_worker_ckpt_',
        contents=rf'checkpoint(\.tmp\w*)?|{PREFIX}-\d+(\.index|\.data-\d+-of-'
        rf'\d+|_temp)(\.tempstate\d+)?')
  return divergence.FiniteCheckpointManager(checkpoint, directory,
                                           max_to_keep=3,
                                           checkpoint_name=PREFIX)


def save_final(manager: tf.train.CheckpointManager, step: int) -> None:
  """Saves at `step` unless the latest checkpoint already is that step."""
  latest = manager.latest_checkpoint
  if latest is None or not latest.endswith(f'-{step}'):
    manager.save(checkpoint_number=step)
