"""The divergence guard: a run whose loss or weights stop being finite stops
before anything is saved or exported from them.

The Estimator watches the loss alone (its NanTensorHook, for NaN only), and
its checkpoint hook saves before any other hook looks at a step. That is not
enough: on CPUs where TensorFlow runs oneDNN's kernels (Intel Xeons with
AVX-512, recent AMD EPYCs), a diverged run keeps a finite loss of about 4e29
while its weights are NaN, and the model it exports predicts NaN. The
model_fn takes its gradients inside ``optimizer.minimize``, out of a hook's
reach; a non-finite gradient reaches the weights in the same step. So:

- after each session run, the step's loss and the weights
  (``StopOnDivergence``; on a TPU the loss only, each loop, since reading the
  weights would copy the model to the host);
- before every checkpoint save, the weights (``FiniteWeightsBeforeSave``);
- before the export, the checkpoint it exports (``check_export``).
"""
import math
import os

import numpy as np
import tensorflow.compat.v1 as tf

from kit_core import checkpoint_files
from mnist_common.errors import DivergedError
from mnist_common.errors import NonFiniteExportError


def non_finite_names(tensors: dict[str, np.ndarray]) -> list[str]:
  """The names of the floating-point tensors holding a NaN or an infinity."""
  return sorted(name for name, value in tensors.items()
                if np.issubdtype(np.asarray(value).dtype, np.floating) and
                not np.isfinite(value).all())


class _WeightsCheck:
  """Which variables of the training graph are not finite: one extra session
  run. Built in the graph by the first begin() that asks for it."""

  def __init__(self):
    self._variables = None

  def build(self) -> None:
    if self._variables is not None:
      return
    self._variables = [v for v in tf.global_variables()
                       if v.dtype.base_dtype.is_floating]
    self._finite = tf.stack([tf.reduce_all(tf.math.is_finite(v))
                             for v in self._variables])
    self._step = tf.train.get_global_step()

  def run(self, session) -> tuple[list[str], int]:
    """(names of the non-finite variables, the global step)."""
    finite, step = session.run([self._finite, self._step])
    return ([v.op.name for v, ok in zip(self._variables, finite) if not ok],
            int(step))


def _latest_name(model_dir: str) -> str | None:
  latest = tf.train.latest_checkpoint(model_dir)
  return latest and os.path.basename(latest)


class StopOnDivergence(tf.estimator.SessionRunHook):
  """Raises DivergedError after the first session run whose loss or weights
  are not finite. Pass it to ``estimator.train(hooks=...)``: it then runs
  before the Estimator's NanTensorHook."""

  def __init__(self, weights: _WeightsCheck, model_dir: str,
               check_weights: bool = True):
    self._weights, self._model_dir = weights, model_dir
    self._check_weights = check_weights

  def begin(self):
    self._weights.build()
    # The Estimator adds the model_fn's loss to LOSSES last, just before it
    # creates the session (tensorflow_estimator 2.15's
    # _train_with_estimator_spec); on a TPU that is the host's copy.
    self._loss = tf.get_collection(tf.GraphKeys.LOSSES)[-1]

  def before_run(self, run_context):
    return tf.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    loss = float(run_values.results)
    if self._check_weights or not math.isfinite(loss):
      names, step = self._weights.run(run_context.session)
      error = DivergedError.found(names, loss, step,
                                  _latest_name(self._model_dir))
      if error:
        raise error


class FiniteWeightsBeforeSave(tf.train.CheckpointSaverListener):
  """Refuses to let the Estimator save weights that are not finite: pass it
  to ``estimator.train(saving_listeners=...)``."""

  def __init__(self, weights: _WeightsCheck, model_dir: str):
    self._weights, self._model_dir = weights, model_dir

  def begin(self):
    self._weights.build()

  def before_save(self, session, global_step_value):
    names, step = self._weights.run(session)
    error = DivergedError.found(names, None, step,
                                _latest_name(self._model_dir))
    if error:
      raise error


def guards(model_dir: str, use_tpu: bool
           ) -> tuple[StopOnDivergence, FiniteWeightsBeforeSave]:
  """The hook and the saving listener of one estimator.train call."""
  weights = _WeightsCheck()
  return (StopOnDivergence(weights, model_dir, check_weights=not use_tpu),
          FiniteWeightsBeforeSave(weights, model_dir))


def check_export(checkpoint: str) -> None:
  """Before exporting from checkpoint.

  Raises:
    NonFiniteExportError: a weight is not finite; nothing is written.
    UnreadableCheckpoint: the checkpoint cannot be read in full.
  """
  names = non_finite_names(checkpoint_files.read_all(checkpoint))
  if names:
    raise NonFiniteExportError(names)
