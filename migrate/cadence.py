"""What both loops do between executions of steps, in one place: the
divergence check, the checkpoint and log line at every multiple of
--checkpoint_steps, SIGTERM's save, and the last save.

Keras calls back once per execution (``fit_loop.SaveAndLog``); the custom
loop returns to Python after each (``custom_loop.train``). Either hands the
step it reached and the loop's loss to ``Cadence.after_execution``.
"""
import dataclasses
from typing import Callable

from absl import logging
import tensorflow as tf

from migrate import checkpoints
from migrate import divergence


@dataclasses.dataclass
class Cadence:
  """Save / log / finite-check / preemption, every checkpoint_steps steps.

  manager: saves (and refuses non-finite weights); total_steps: where the
  run ends; sigterm: migrate/preemption.py's handler, asked after each
  execution (None: SIGTERM is not watched); start: the step the run resumed
  from.
  """
  manager: divergence.FiniteCheckpointManager
  checkpoint_steps: int
  total_steps: int
  sigterm: tf.distribute.experimental.PreemptionCheckpointHandler | None = None
  start: int = 0

  def __post_init__(self):
    self._last_saved = self.start

  def steps_to_boundary(self, step: int) -> int:
    """Steps from step to the next save, or to the end if sooner."""
    return min(self.checkpoint_steps - step % self.checkpoint_steps,
               self.total_steps - step)

  def after_execution(self, step: int, loss: float,
                      metrics: Callable[[], dict]) -> dict | None:
    """Checks, saves and logs after an execution that reached step.

    Args:
      step: the optimizer's step after the execution.
      loss: the loop's training loss (a mean over the steps it ran).
      metrics: the values to log, read only when a checkpoint is saved.

    Returns:
      The metrics logged if a checkpoint was saved, else None.

    Raises:
      DivergedError: the loss or the weights are not finite (before any
        save).
      Preempted: SIGTERM arrived; a checkpoint at step was saved.
    """
    # Before anything else: a diverged run stops here.
    divergence.check_execution(loss, step, self.manager)
    logged = None
    every = self.checkpoint_steps
    passed = step // every > self._last_saved // every
    if passed or step >= self.total_steps:
      self.manager.save(checkpoint_number=step)
      self._last_saved = step
      logged = metrics()
      logging.info('step %d/%d: loss %.4f, accuracy %.4f (checkpoint saved)',
                   step, self.total_steps, logged['loss'],
                   logged['accuracy'])
    if self.sigterm:
      self.sigterm.save_checkpoint_if_preempted()
    return logged

  def end(self, step: int) -> None:
    """The last save, unless the last execution made it."""
    checkpoints.save_final(self.manager, step)
