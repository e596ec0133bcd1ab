"""Trainer 'fit': Keras compile/fit with steps_per_execution.

``steps_per_execution`` is the TF2 form of ``iterations_per_loop``: Keras runs
that many steps inside one tf.function call, so the host is visited once per
N steps instead of every step.
"""
import tensorflow as tf

from migrate import cadence as cadence_lib
from migrate import model as model_lib


class SaveAndLog(tf.keras.callbacks.Callback):
  """Hands each execution's end to the cadence: Keras calls
  on_train_batch_end once per execution (steps_per_execution steps)."""

  def __init__(self, cadence: cadence_lib.Cadence, step: tf.Variable):
    super().__init__()
    self._cadence, self._step = cadence, step

  def on_train_batch_end(self, batch, logs=None):
    self._cadence.after_execution(int(self._step.numpy()), float(logs['loss']),
                                  lambda: logs)

  def on_train_end(self, logs=None):
    self._cadence.end(int(self._step.numpy()))


def compile_model(model: tf.keras.Model, optimizer, steps_per_execution: int,
                  jit_compile: bool = False) -> None:
  """Loss averaged over the global batch (Keras does it under a strategy).
  jit_compile: the step compiled with XLA (given, not Keras 3's 'auto',
  which turns it on wherever there is a GPU)."""
  with model.distribute_strategy.scope():
    model.compile(optimizer=optimizer, loss=model_lib.per_example_loss,
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                      'accuracy')],
                  steps_per_execution=steps_per_execution,
                  jit_compile=jit_compile)


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


def train(model: tf.keras.Model, optimizer, dataset,
          steps_per_execution: int, cadence: cadence_lib.Cadence,
          model_dir: str, verbose: int, jit_compile: bool = False) -> None:
  """Trains from the optimizer's step up to exactly cadence.total_steps.

  Each block of ``executions`` is one Keras epoch of its own; a remainder
  block starts a new pass over the data, as a resumed run does (and as each
  ``TPUEstimator.train`` call did).
  """
  step = optimizer.iterations
  remaining = cadence.total_steps - int(step.numpy())
  callbacks = [
      tf.keras.callbacks.TensorBoard(model_dir,
                                     update_freq=cadence.checkpoint_steps),
      SaveAndLog(cadence, step),
  ]
  for steps, per_execution in executions(max(remaining, 0),
                                         steps_per_execution):
    compile_model(model, optimizer, per_execution, jit_compile)
    # shuffle=False: a dataset shuffles itself; Keras 3 warns of the default.
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks,
              verbose=verbose, shuffle=False)


def evaluate(model: tf.keras.Model, optimizer, dataset, steps: int,
             steps_per_execution: int, jit_compile: bool = False) -> dict:
  """Metrics over exactly `steps` batches, in one pass.

  Keras 3 runs whole executions, so this runs them at the largest number of
  steps per execution, up to the training one, that divides `steps`.
  """
  per_execution = max(n for n in range(1, min(steps, steps_per_execution) + 1)
                      if steps % n == 0)
  compile_model(model, optimizer, per_execution, jit_compile)
  return model.evaluate(dataset, steps=steps, verbose=0, return_dict=True)
