"""Trainer 'fit': Keras compile/fit with steps_per_execution.

``steps_per_execution`` is the TF2 form of ``iterations_per_loop``: Keras runs
that many steps inside one tf.function call, so the host is visited once per
N steps instead of every step.
"""
from absl import logging
import tensorflow as tf

from migrate import checkpoints
from migrate import model as model_lib


class SaveAndLog(tf.keras.callbacks.Callback):
  """Saves a checkpoint and logs the loss each time the step passes a multiple
  of every_steps, and at the end.

  Keras calls on_train_batch_end once per execution (steps_per_execution
  steps), so that is how often this looks.
  """

  def __init__(self, manager: tf.train.CheckpointManager, step: tf.Variable,
               every_steps: int, total_steps: int):
    super().__init__()
    self._manager, self._step = manager, step
    self._every, self._total = every_steps, total_steps
    self._last = int(step.numpy())

  def on_train_batch_end(self, batch, logs=None):
    step = int(self._step.numpy())
    if step // self._every > self._last // self._every:
      self._manager.save(checkpoint_number=step)
      self._last = step
      logging.info('step %d/%d: loss %.4f, accuracy %.4f (checkpoint saved)',
                   step, self._total, logs['loss'], logs['accuracy'])

  def on_train_end(self, logs=None):
    checkpoints.save_final(self._manager, int(self._step.numpy()))


def compile_model(model: tf.keras.Model, optimizer, steps_per_execution: int
                  ) -> None:
  """Loss averaged over the global batch (Keras does it under a strategy)."""
  model.compile(optimizer=optimizer, loss=model_lib.per_example_loss,
                metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                    'accuracy')],
                steps_per_execution=steps_per_execution)


def train(model: tf.keras.Model, dataset, total_steps: int,
          manager: tf.train.CheckpointManager, model_dir: str,
          every_steps: int, verbose: int) -> None:
  """Trains from the optimizer's step up to total_steps, as one Keras epoch."""
  step = model.optimizer.iterations
  remaining = total_steps - int(step.numpy())
  if remaining <= 0:
    return
  callbacks = [
      tf.keras.callbacks.TensorBoard(model_dir, update_freq=every_steps),
      SaveAndLog(manager, step, every_steps, total_steps),
  ]
  model.fit(dataset, epochs=1, steps_per_epoch=remaining, callbacks=callbacks,
            verbose=verbose)


def evaluate(model: tf.keras.Model, dataset, steps: int) -> dict:
  return model.evaluate(dataset, steps=steps, verbose=0, return_dict=True)
