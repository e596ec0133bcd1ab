"""The divergence guard: a run whose loss or weights stop being finite
stops before anything is saved or exported from them.

TPUEstimator watched the loss alone (its NanTensorHook). That is not enough:
on CPUs where TensorFlow runs oneDNN's kernels (Intel Xeons with AVX-512,
recent AMD EPYCs), a diverged run keeps a finite loss of about 4e29 while its
weights are NaN (the ReLU's max turns a NaN into 0), and the model it exports
predicts NaN. So, from the host, where the loops already stop:

- after each execution of steps, before anything else, the loss and the
  weights (``check_execution``): a non-finite gradient reaches the weights in
  the step that took it, and an update can overflow them from finite ones;
- before every checkpoint save (``FiniteCheckpointManager``) and every export
  (``check_export``), the weights again.

The step itself is left as it was: a finiteness test that consumes the
gradients inside it changes how TensorFlow computes a 4-replica step (by
about 4e-9, measured with migration-compare on the kit's pair), and the port
would no longer match its model_fn bit for bit.
"""
import os
from typing import Sequence

import tensorflow as tf

from kit_core import keras_compat
from mnist_common.errors import DivergedError
from mnist_common.errors import NonFiniteExportError


def _latest_name(manager: tf.train.CheckpointManager) -> str | None:
  latest = manager.latest_checkpoint
  return latest and os.path.basename(latest)


def check_execution(loss: float, step: int,
                    manager: 'FiniteCheckpointManager') -> None:
  """After an execution of steps, before anything is saved.

  Args:
    loss: the mean training loss since the loop last reset it.
    step: the step reached.
    manager: the run's; checks the weights it saves, names the last good
      checkpoint.

  Raises:
    DivergedError: the weights or the loss are not finite.
  """
  error = DivergedError.found(manager.non_finite_weights(), loss, step,
                              _latest_name(manager))
  if error:
    raise error


def checkpointed_variables(checkpoint: tf.train.Checkpoint) -> list:
  """The model's weights and the optimizer's variables of a checkpoint made
  by checkpoints.make_checkpoint."""
  return [*checkpoint.model.weights, *checkpoint.optimizer.variables]


class WeightsCheck:
  """Which of some variables hold a NaN or an infinity: one call, one
  tf.function, whatever the number of variables; integers are skipped."""

  def __init__(self, variables: Sequence):
    self._variables = [v for v in variables
                       if tf.as_dtype(v.dtype).is_floating]
    self._finite = tf.function(lambda: tf.stack(
        [tf.reduce_all(tf.math.is_finite(v)) for v in self._variables]))

  def non_finite(self) -> list[str]:
    """The names of the variables that are not finite, in order."""
    if not self._variables:
      return []
    return [keras_compat.variable_path(v)
            for v, ok in zip(self._variables, self._finite().numpy())
            if not ok]


class FiniteCheckpointManager(tf.train.CheckpointManager):
  """A CheckpointManager that refuses to save weights that are not finite.

  Every save of a run goes through it (the loops', the last one, SIGTERM's),
  so a diverged model never becomes the latest checkpoint.
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, directory: str,
               **kwargs):
    super().__init__(checkpoint, directory, **kwargs)
    self._weights = WeightsCheck(checkpointed_variables(checkpoint))

  def non_finite_weights(self) -> list[str]:
    """The checkpointed variables that hold a NaN or an infinity."""
    return self._weights.non_finite()

  def save(self, checkpoint_number=None, check_interval=True, options=None):
    """CheckpointManager.save, after the weights check.

    Raises:
      DivergedError: a weight or optimizer variable is not finite; nothing
        is written.
    """
    error = DivergedError.found(self.non_finite_weights(), None,
                                checkpoint_number, _latest_name(self))
    if error:
      raise error
    return super().save(checkpoint_number=checkpoint_number,
                        check_interval=check_interval, options=options)


def check_export(model: tf.keras.Model) -> None:
  """Before an export.

  Raises:
    NonFiniteExportError: a weight is not finite; nothing is written.
  """
  names = WeightsCheck(model.weights).non_finite()
  if names:
    raise NonFiniteExportError(names)
