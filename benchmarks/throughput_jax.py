"""Training throughput of the JAX example, in the report format of
throughput.py, so that across_versions.py puts it beside TPUEstimator's.

  .venv-jax/bin/python benchmarks/throughput_jax.py [--batch_size=1024] [--report=...]

Trains migrate_jax's model as its fit loop does (Keras 3 on JAX, XLA, the
global batch over --num_cpu_devices devices, --steps_per_execution steps
per compiled call) on the same TFRecords, in float32 and mixed_bfloat16,
and reports examples/s (the median of --windows timed windows of
--window_steps steps, after one warm-up window that includes the compile)
and the fraction of this machine's matmul ceiling of the trainer's
precision, measured by jax.numpy in the same process, against the FLOPs a
training example costs (benchmarks/flops.py). No TensorFlow: run it with
the jax profile's Python, or through across_versions.py. Nothing here is
asserted on timing.
"""
import os
import platform
import sys
import time

from absl import app
from absl import flags
from absl import logging

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import flops as flops_lib  # pylint: disable=g-bad-import-order,wrong-import-position
import timing  # pylint: disable=g-bad-import-order,wrong-import-position
from kit_core import atomic  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import cpu  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import devices  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core.errors import KitError  # pylint: disable=g-import-not-at-top,wrong-import-position
from mnist_common import prepare  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_integer('batch_size', 1024, 'Global batch.', lower_bound=2)
flags.DEFINE_integer('window_steps', 50, 'Steps per timed window; a multiple '
                     'of --steps_per_execution.', lower_bound=1)
flags.DEFINE_integer('windows', 3, 'Timed windows per trainer (after one '
                     'warm-up window); the median is reported.', lower_bound=1)
flags.DEFINE_integer('steps_per_execution', 50, 'Steps per compiled call.',
                     lower_bound=1)
flags.DEFINE_integer('num_cpu_devices', 1, 'XLA CPU devices (replicas).',
                     lower_bound=1)
flags.DEFINE_list('trainers', [], 'Run only these: jax_fit, jax_fit_bf16; '
                  'empty: both. (throughput.py\'s names are not run here.)')
flags.DEFINE_bool('skip_unavailable', False, 'Leave out, with a line, the '
                  'asked-for trainers this script does not run (the '
                  'TensorFlow ones) instead of failing.')
flags.DEFINE_integer('matmul_size', 4096, 'Side of the square matmuls that '
                     'measure the ceilings.', lower_bound=64)
flags.DEFINE_string('data_dir', None, 'Prepared data; unset: the kit\'s '
                    'default data.')
flags.DEFINE_string('report', 'throughput_jax.json', 'Where the JSON goes.')
FLAGS = flags.FLAGS

TRAINERS = {'jax_fit': 'JAX (Keras 3 fit, XLA)',
            'jax_fit_bf16': 'JAX (Keras 3 fit, XLA), mixed_bfloat16'}
PRECISIONS = {'jax_fit': 'float32', 'jax_fit_bf16': 'mixed_bfloat16'}
CEILING_DTYPES = {'float32': 'float32', 'mixed_bfloat16': 'bfloat16'}


def matmul_flops_per_second(size: int, dtype: str, repeats: int = 10) -> float:
  """FLOP/s of a size x size matmul in dtype, the median of several."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a = jax.random.normal(jax.random.PRNGKey(0), (size, size)).astype(dtype)
  b = jax.random.normal(jax.random.PRNGKey(1), (size, size)).astype(dtype)
  matmul = jax.jit(lambda x, y: jnp.sum(x @ y))
  return 2 * size ** 3 / timing.median_seconds(
      lambda: matmul(a, b).block_until_ready(), repeats)


def time_trainer(info, precision: str, batch: int, window_steps: int,
                 windows: int, steps_per_execution: int) -> dict:
  """migrate_jax's fit over (windows + 1) windows; examples/s of each."""
  import keras  # pylint: disable=g-import-not-at-top
  from migrate_jax import data as data_lib  # pylint: disable=g-import-not-at-top
  from migrate_jax import model as model_lib  # pylint: disable=g-import-not-at-top
  from migrate_jax import train  # pylint: disable=g-import-not-at-top
  model = model_lib.build_model(precision=precision)
  optimizer = model_lib.make_optimizer(0.05)
  train.compile_model(model, optimizer, steps_per_execution)
  images, labels = data_lib.load(info, 'train')
  batches = data_lib.TrainingBatches(images, labels, batch, seed=0)
  stamps = []

  class Stamp(keras.callbacks.Callback):

    def on_train_batch_end(self, step, logs=None):
      # Keras calls it once per execution, with its last step's index.
      if (step + 1) % window_steps == 0:
        float(logs['loss'])  # JAX dispatches ahead: wait for the steps.
        stamps.append(time.perf_counter())

  model.fit(data_lib.Steps(batches, 0, (windows + 1) * window_steps),
            epochs=1, verbose=0, callbacks=[Stamp()])
  return timing.median_rate(stamps, window_steps, batch)


def run(info, batch: int, window_steps: int, windows: int,
        steps_per_execution: int, only: list, matmul_size: int,
        skip_unavailable: bool) -> dict:
  """Every measurement; returns the report (throughput.py's format)."""
  import jax  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from migrate_jax import model as model_lib  # pylint: disable=g-import-not-at-top
  if window_steps % steps_per_execution:
    raise KitError(f'--window_steps={window_steps} must be a multiple of '
                   f'--steps_per_execution={steps_per_execution}')
  unknown = [t for t in only if t not in TRAINERS]
  if unknown and not skip_unavailable:
    raise KitError(f'--trainers: {", ".join(unknown)} not run here; this '
                   f'script runs {", ".join(TRAINERS)}')
  for name in unknown:
    logging.info('left out: %s (a TensorFlow trainer)', name)
  selected = [t for t in TRAINERS if not only or t in only]
  keras.distribution.set_distribution(keras.distribution.DataParallel(
      devices=jax.devices()))
  flops = flops_lib.training_flops_per_example(model_lib.build_model())
  ceilings = {p: matmul_flops_per_second(matmul_size, d)
              for p, d in CEILING_DTYPES.items()}
  results = {}
  for key in selected:
    logging.info('timing %s', TRAINERS[key])
    result = time_trainer(info, PRECISIONS[key], batch, window_steps,
                          windows, steps_per_execution)
    result.update(label=TRAINERS[key], precision=PRECISIONS[key],
                  ratio_to_estimator=None, fraction_of_kernels_alone=None,
                  fraction_of_ceiling=(result['examples_per_second'] *
                                       flops['training'] /
                                       ceilings[PRECISIONS[key]]))
    results[key] = result
  return {
      'trainers': results, 'input_pipelines': {},
      'matmul_flops_per_second': {CEILING_DTYPES[p]: rate
                                  for p, rate in ceilings.items()},
      'matmul_size': matmul_size, 'flops_per_example': flops,
      'batch_size': batch, 'window_steps': window_steps, 'windows': windows,
      'steps_per_execution': steps_per_execution, 'data': info.description,
      'machine': {'cpu': cpu.name(), 'cpu_flags': cpu.matmul_flags(),
                  'cores': os.cpu_count(), 'python': platform.python_version(),
                  'framework': f'JAX {jax.__version__}',
                  'tensorflow': None, 'keras': keras.__version__,
                  'devices': len(jax.devices())},
  }


def main(argv: list[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  try:
    # Before JAX starts: Keras's backend and XLA's devices.
    os.environ.setdefault('KERAS_BACKEND', 'jax')
    devices.split_xla_cpu(FLAGS.num_cpu_devices)
    info = prepare.prepare(FLAGS.data_dir)
    report = run(info, FLAGS.batch_size, FLAGS.window_steps, FLAGS.windows,
                 FLAGS.steps_per_execution, FLAGS.trainers, FLAGS.matmul_size,
                 FLAGS.skip_unavailable)
  except KitError as e:
    sys.exit(f'error: {e}')
  for result in report['trainers'].values():
    print(f'{result["label"]}: {result["examples_per_second"]:,.0f} '
          f'examples/s, {result["fraction_of_ceiling"]:.0%} of its ceiling')
  atomic.write_json(FLAGS.report, report)
  print(f'JSON: {FLAGS.report}')


if __name__ == '__main__':
  app.run(main)
