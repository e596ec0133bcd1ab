"""Trainer 'fit': Keras compile/fit with steps_per_execution.

``steps_per_execution`` is the TF2 form of ``iterations_per_loop``: Keras runs
that many steps inside one tf.function call, so the host is visited once per
N steps instead of every step.
"""
from absl import logging
import tensorflow as tf

from migrate import checkpoints
from migrate import divergence
from migrate import model as model_lib


class SaveAndLog(tf.keras.callbacks.Callback):
  """Saves a checkpoint and logs the loss each time the step passes a multiple
  of every_steps, and at the end.

  Keras calls on_train_batch_end once per execution (steps_per_execution
  steps), so that is how often this looks, and asks sigterm
  (migrate/preemption.py's handler) whether to save and stop.
  """

  def __init__(self, manager: divergence.FiniteCheckpointManager,
               step: tf.Variable, every_steps: int, total_steps: int, sigterm):
    super().__init__()
    self._manager, self._step, self._sigterm = manager, step, sigterm
    self._every, self._total = every_steps, total_steps
    self._last = int(step.numpy())

  def on_train_batch_end(self, batch, logs=None):
    step = int(self._step.numpy())
    # Before anything else: a diverged run stops here.
    divergence.check_execution(float(logs['loss']), step, self._manager)
    if step // self._every > self._last // self._every:
      self._manager.save(checkpoint_number=step)
      self._last = step
      logging.info('step %d/%d: loss %.4f, accuracy %.4f (checkpoint saved)',
                   step, self._total, logs['loss'], logs['accuracy'])
    self._sigterm.save_checkpoint_if_preempted()

  def on_train_end(self, logs=None):
    checkpoints.save_final(self._manager, int(self._step.numpy()))


def compile_model(model: tf.keras.Model, optimizer, steps_per_execution: int
                  ) -> None:
  """Loss averaged over the global batch (Keras does it under a strategy)."""
  with model.distribute_strategy.scope():
    model.compile(optimizer=optimizer, loss=model_lib.per_example_loss,
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                      'accuracy')],
                  steps_per_execution=steps_per_execution)


def executions(steps: int, steps_per_execution: int) -> list[tuple[int, int]]:
  """(steps, steps_per_execution) blocks that add up to exactly `steps`.

  Keras 3 runs whole executions: asked for 20 steps at 50 per execution, it
  runs 50. So the remainder gets a block of its own, at one execution.
  """
  whole = steps // steps_per_execution * steps_per_execution
  blocks = [(whole, steps_per_execution)] if whole else []
  if steps > whole:
    blocks.append((steps - whole, steps - whole))
  return blocks


def train(model: tf.keras.Model, optimizer, dataset, total_steps: int,
          steps_per_execution: int,
          manager: divergence.FiniteCheckpointManager,
          model_dir: str, every_steps: int, sigterm, verbose: int) -> None:
  """Trains from the optimizer's step up to exactly total_steps.

  Each block of ``executions`` is one Keras epoch of its own; a remainder
  block starts a new pass over the data, as a resumed run does (and as each
  ``TPUEstimator.train`` call did).
  """
  step = optimizer.iterations
  remaining = total_steps - int(step.numpy())
  callbacks = [
      tf.keras.callbacks.TensorBoard(model_dir, update_freq=every_steps),
      SaveAndLog(manager, step, every_steps, total_steps, sigterm),
  ]
  for steps, per_execution in executions(max(remaining, 0),
                                         steps_per_execution):
    compile_model(model, optimizer, per_execution)
    # shuffle=False: a dataset shuffles itself; Keras 3 warns of the default.
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks,
              verbose=verbose, shuffle=False)


def evaluate(model: tf.keras.Model, optimizer, dataset, steps: int,
             steps_per_execution: int) -> dict:
  """Metrics over exactly `steps` batches, in one pass.

  Keras 3 runs whole executions, so this runs them at the largest number of
  steps per execution, up to the training one, that divides `steps`.
  """
  per_execution = max(n for n in range(1, min(steps, steps_per_execution) + 1)
                      if steps % n == 0)
  compile_model(model, optimizer, per_execution)
  return model.evaluate(dataset, steps=steps, verbose=0, return_dict=True)
