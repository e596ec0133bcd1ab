"""SIGTERM and Ctrl-C (SIGINT): save a checkpoint at the step reached, then
stop.

A preempted TPU VM or a cluster scheduler sends SIGTERM and allows a grace
period. TensorFlow's ``PreemptionCheckpointHandler`` catches it and, with
several workers, agrees with them on the step at which all save, so that their
checkpoints match. The kit hands it its own saving (``save``) and ending
(``Preempted``) and checks after each execution of steps.

SIGINT is turned into the SIGTERM the handler watches, so that Ctrl-C saves
as a preemption does (with several workers, at one agreed step); the command
then ends as Ctrl-C ends one, exit 130.

The handler does nothing on Google Cloud CPU and TPU VMs, where TensorFlow
leaves preemption to the platform (its own warning says so); a TPUEstimator
job there was no better off.
"""
import os
import signal
from typing import Callable

import tensorflow as tf

from kit_core import private_folders
from kit_core.errors import Preempted


def watch(strategy: tf.distribute.Strategy,
          save: Callable[[], tuple[int, str | None]],
          again: str = 'run the same command again'
          ) -> tf.distribute.experimental.PreemptionCheckpointHandler:
  """Starts watching for SIGTERM and SIGINT; returns the handler.

  Call ``handler.save_checkpoint_if_preempted()`` after each execution of
  steps, on every worker. After a SIGTERM or SIGINT it calls save() at an
  execution that all workers reach, then raises Preempted. The caller puts
  back both signals' handlers once training is saved.

  Args:
    strategy: the training's strategy (its cluster, if any).
    save: saves a checkpoint; returns (step, the checkpoint's file name or
      None where this worker keeps none).
    again: how to run on from the checkpoint (errors.run_again).
  """
  saved, received = {}, []

  def save_fn():
    saved['step'], saved['path'] = save()

  def exit_fn():
    raise Preempted(saved.get('step', -1), saved.get('path'),
                    received[0] if received else 'SIGTERM', again)

  def on_sigint(signum, frame):  # pylint: disable=unused-argument
    if not received:
      received.append('SIGINT')
      os.kill(os.getpid(), signal.SIGTERM)

  signal.signal(signal.SIGINT, on_sigint)

  # The handler also restores, and keeps a run counter, in a checkpoint of
  # its own: an empty one in a private folder, so that the kit's checkpoints
  # stay as they are.
  private = os.path.join(
      private_folders.private_folder('migrate_preemption_', contents='handler'),
      'handler')
  return tf.distribute.experimental.PreemptionCheckpointHandler(
      getattr(strategy, 'cluster_resolver', None), tf.train.Checkpoint(),
      checkpoint_dir=private,
      termination_config=tf.distribute.experimental.TerminationConfig(
          exit_fn=exit_fn, save_fn=save_fn))
