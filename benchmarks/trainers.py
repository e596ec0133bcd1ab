"""The trainers the benchmarks time: TPUEstimator and the migrated ones.

Each trainer function trains the kit's CNN on a prepared dataset at a global
batch for (windows + 1) x window_steps steps and returns examples per second:
the median over the timed windows, after one warm-up window. by_id() lists
them by id for benchmarks/throughput.py and benchmarks/kernels.py; without
tf.estimator (TensorFlow 2.16 and later) the TPUEstimator baseline is not
among them. Importing this module splits the CPU into two logical devices
(for the 2-replica trainers): import it before any TF op runs.
"""
import dataclasses
from functools import partial
import importlib.util
import tempfile
import time
from typing import Callable

from absl import logging
import tensorflow as tf

import timing  # pylint: disable=g-bad-import-order

# Two logical CPUs for the 2-replica runs: must precede every TF op.
from kit_core import devices  # pylint: disable=g-bad-import-order
devices.split_cpu(2)

from kit_core import process  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core.errors import KitError  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import custom_loop  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import data as migrate_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import fit_loop  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import model as model_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

HAS_ESTIMATOR = importlib.util.find_spec('tensorflow_estimator') is not None


@dataclasses.dataclass(frozen=True)
class Trainer:
  """One timed set-up: run(info, batch, window_steps, windows) -> rates."""
  label: str
  run: Callable[..., dict]
  precision: str = 'float32'  # Its math: whose matmul ceiling it is held to.


class _WindowHook(tf.compat.v1.train.SessionRunHook):
  """Timestamps every window_steps session runs (one step each off a TPU)."""

  def __init__(self, window_steps: int):
    self.window_steps, self.runs, self.stamps = window_steps, 0, []

  def after_run(self, run_context, run_values):
    self.runs += 1
    if self.runs % self.window_steps == 0:
      self.stamps.append(time.perf_counter())


def estimator(info, batch: int, window_steps: int, windows: int,
              guarded: bool = False) -> dict:
  """estimator_mnist's TPUEstimator, use_tpu=False, as its main.py builds it.

  guarded: with the kit's divergence guard (a hook that checks the loss and
  the weights after every step, a listener before every save), as
  estimator_mnist trains; off, the Estimator as TPU-era code ran it.
  """
  # Imported here: the other trainers run on a TensorFlow without it.
  from estimator_mnist import config as estimator_config  # pylint: disable=g-import-not-at-top
  from estimator_mnist import data as estimator_data  # pylint: disable=g-import-not-at-top
  from estimator_mnist import divergence  # pylint: disable=g-import-not-at-top
  from estimator_mnist import train as estimator_train  # pylint: disable=g-import-not-at-top
  steps = window_steps * (windows + 1)
  config = estimator_config.Config(
      iterations=steps,  # Checkpoints only at the start and the end.
      batch_size=batch, data_dir=info.data_dir, train_steps=steps,
      eval_steps=0, enable_predict=False)
  hook = _WindowHook(window_steps)
  with tempfile.TemporaryDirectory() as model_dir:
    model = estimator_train.make_estimator(config, model_dir, info.data_dir,
                                           batch)
    hooks, listeners = [hook], None
    if guarded:
      guard, listener = divergence.guards(model_dir, use_tpu=False)
      hooks, listeners = [guard, hook], [listener]
    model.train(estimator_data.train_input_fn, max_steps=steps, hooks=hooks,
                saving_listeners=listeners)
  return timing.median_rate(hook.stamps, window_steps, batch)


def _model_and_data(strategy, info, batch: int, precision: str):
  with strategy.scope():
    model = model_lib.build_model(precision=precision)
    optimizer = model_lib.make_optimizer(0.05)
  dataset = migrate_data.distribute(strategy, info.data_dir, 'train', batch,
                                    True)
  return model, optimizer, dataset


class _WindowCallback(tf.keras.callbacks.Callback):
  """Timestamps each time the step count reaches a window's end."""

  def __init__(self, window_steps: int):
    super().__init__()
    self.window_steps, self.stamps = window_steps, []

  def on_train_batch_end(self, batch, logs=None):
    # Keras calls this once per execution, with the index of its last step.
    if (batch + 1) % self.window_steps == 0:
      self.stamps.append(time.perf_counter())


def fit(strategy, steps_per_execution: int, info, batch: int,
        window_steps: int, windows: int, keras_train_step: bool = False,
        precision: str = 'float32', jit_compile: bool = False) -> dict:
  """keras_train_step: Keras's own train_step (a GradientTape), as the kit
  had it before model_lib.gradients. jit_compile: migrate's --jit_compile."""
  model, optimizer, dataset = _model_and_data(strategy, info, batch,
                                              precision)
  if keras_train_step:
    # The same layers and variables, in a plain Model.
    model = tf.keras.Model(model.inputs, model.outputs)
  fit_loop.compile_model(model, optimizer, steps_per_execution, jit_compile)
  callback = _WindowCallback(window_steps)
  model.fit(dataset, epochs=1, steps_per_epoch=window_steps * (windows + 1),
            callbacks=[callback], verbose=0)
  return timing.median_rate(callback.stamps, window_steps, batch)


class TapeTrainer(custom_loop.Trainer):
  """The kit's custom loop with the gradients of a GradientTape, as it had
  them before model_lib.gradients."""

  def loss_and_gradients(self, images, labels):
    with tf.GradientTape() as tape:
      logits = self.model(images, training=True)
      per_example = self.per_example_loss(labels, logits)
      loss = self.scaled_loss(per_example)
    return per_example, logits, tape.gradient(
        loss, self.model.trainable_variables)


def custom(strategy, steps_per_call: int, info, batch: int,
           window_steps: int, windows: int,
           trainer_class=custom_loop.Trainer, precision: str = 'float32',
           jit_compile: bool = False) -> dict:
  model, optimizer, dataset = _model_and_data(strategy, info, batch,
                                              precision)
  trainer = trainer_class(model, optimizer, strategy, batch,
                          jit_compile=jit_compile)
  iterator = process.keep_alive(iter(dataset))
  steps = tf.constant(steps_per_call)
  stamps = []
  for _ in range(windows + 1):
    for _ in range(window_steps // steps_per_call):
      step = trainer.train_steps(iterator, steps)
    step.numpy()  # Waits for the window's last step.
    stamps.append(time.perf_counter())
  return timing.median_rate(stamps, window_steps, batch)


# The trainers that run tf.estimator: only on TF 2.15.
NEED_ESTIMATOR = ('estimator', 'estimator_guarded')


def by_id(steps_per_execution: int) -> dict[str, Trainer]:
  """The trainers this TensorFlow can run, by id; the first is the baseline
  (TPUEstimator, where tf.estimator is installed). Call it once per process:
  two MirroredStrategies over the same devices clash."""
  one = tf.distribute.OneDeviceStrategy('/cpu:0')
  two = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])
  many = steps_per_execution
  bf16 = 'mixed_bfloat16'
  trainers = {
      'estimator': Trainer('estimator (TPUEstimator, CPU)', estimator),
      'estimator_guarded': Trainer(
          'estimator, with the kit\'s divergence guard (estimator_mnist)',
          partial(estimator, guarded=True)),
      'fit_1': Trainer('fit, steps_per_execution=1', partial(fit, one, 1)),
      'fit_many': Trainer(f'fit, steps_per_execution={many}',
                          partial(fit, one, many)),
      'custom_1': Trainer('custom, 1 step per call', partial(custom, one, 1)),
      'custom_many': Trainer(f'custom, {many} steps per call',
                             partial(custom, one, many)),
      'fit_2_replicas': Trainer(f'fit, 2 replicas, steps_per_execution={many}',
                                partial(fit, two, many)),
      'custom_2_replicas': Trainer(f'custom, 2 replicas, {many} steps per call',
                                   partial(custom, two, many)),
      # As the kit had them before model_lib.gradients: tape gradients.
      'fit_tape': Trainer(f'fit, steps_per_execution={many}, GradientTape '
                          '(Keras\'s own train_step)',
                          partial(fit, one, many, keras_train_step=True)),
      'custom_tape': Trainer(f'custom, {many} steps per call, GradientTape',
                             partial(custom, one, many,
                                     trainer_class=TapeTrainer)),
      # --jit_compile: the step through XLA, as on a TPU.
      'fit_xla': Trainer(f'fit, steps_per_execution={many}, jit_compile',
                         partial(fit, one, many, jit_compile=True)),
      'custom_xla': Trainer(f'custom, {many} steps per call, jit_compile',
                            partial(custom, one, many, jit_compile=True)),
      # --precision=mixed_bfloat16: faster, but not the legacy numerics.
      'fit_bf16': Trainer(f'fit, steps_per_execution={many}, {bf16}',
                          partial(fit, one, many, precision=bf16), bf16),
      'custom_bf16': Trainer(f'custom, {many} steps per call, {bf16}',
                             partial(custom, one, many, precision=bf16), bf16),
  }
  if not HAS_ESTIMATOR:
    for key in NEED_ESTIMATOR:
      del trainers[key]
  return trainers


def select(by_id: dict, ids: list[str], skip_unavailable: bool = False
           ) -> list[str]:
  """The ids asked for (all of them if none), or KitError naming the
  unknown ones. skip_unavailable: leave out, with a line, the TPUEstimator
  trainers on a TensorFlow without tf.estimator, and the JAX ones
  (throughput_jax.py's), instead of failing."""
  on_jax = [key for key in ids if key.startswith('jax_')]
  if on_jax and skip_unavailable:
    # Across profiles the same --trainers go to every run (across_versions).
    logging.info('leaving out %s: JAX trainers run in '
                 'benchmarks/throughput_jax.py', ', '.join(on_jax))
    ids = [key for key in ids if key not in on_jax]
  missing = [key for key in ids if key in NEED_ESTIMATOR and key not in by_id]
  if missing and skip_unavailable:
    logging.info('leaving out %s: TensorFlow %s has no tf.estimator',
                 ', '.join(missing), tf.__version__)
    ids = [key for key in ids if key not in missing]
    if not ids:
      raise KitError('--trainers: none of them runs on TensorFlow '
                     f'{tf.__version__}')
  elif missing:
    raise KitError(f'--trainers: {", ".join(missing)} needs tf.estimator, '
                   f'which TensorFlow {tf.__version__} does not have; run it '
                   'on TF 2.15 (the estimator profile)')
  unknown = sorted(set(ids) - set(by_id))
  if unknown:
    raise KitError(f'--trainers: unknown {unknown}; known: {sorted(by_id)}')
  return list(ids) or list(by_id)
