"""Training throughput: TPUEstimator and the migrated trainers, in one run.

  python benchmarks/throughput.py [--batch_size=1024] [--report=throughput.json]

Trains the kit's CNN on the same TFRecords at the same global batch with each
trainer in turn, in this one process, and reports training examples per second
(the median of --windows timed windows of --window_steps steps, after one
warm-up window), each trainer's ratio to the TPUEstimator baseline, and its
fraction of this machine's ceiling for its precision: the rate of a large
float32 matmul for the float32 trainers, of a bfloat16 one for the
mixed_bfloat16 trainers, against the FLOPs a training example costs (counted
from the layer shapes), and its fraction of the model's kernels alone: the
examples/s the step's convolutions and matmuls allow, each timed by itself
(benchmarks/ceilings.py). Near its kernels alone, a trainer is held back by
TensorFlow's kernels, not by the port. Also timed: the input pipelines
alone. The JSON names
the CPU and the instruction-set flags that decide those ceilings (AVX-512,
AVX512_BF16, AMX). Prints a table, writes JSON.

On a TensorFlow without tf.estimator (2.16 and later) every trainer but the
TPUEstimator baseline runs; benchmarks/across_versions.py runs this script in
each install profile and puts the results side by side.

Ratios are the headline: absolute rates move with the machine's load. Tests
run it for a few steps only; nothing here is asserted on timing.
"""
from importlib import metadata
import os
import platform
import sys
import time

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

# trainers splits the CPU in two at import, before any TF op.
import trainers  # pylint: disable=g-bad-import-order
import ceilings  # pylint: disable=g-bad-import-order
import flops as flops_lib  # pylint: disable=g-bad-import-order
import timing  # pylint: disable=g-bad-import-order

from estimator_mnist import data as estimator_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import atomic  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import cpu  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import process  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core.errors import KitError  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import data as migrate_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import model as model_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from mnist_common import prepare  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_integer('batch_size', 1024, 'Global batch, for every trainer.',
                     lower_bound=2)
flags.DEFINE_integer('window_steps', 50, 'Steps per timed window; a multiple '
                     'of --steps_per_execution.', lower_bound=1)
flags.DEFINE_integer('windows', 3, 'Timed windows per trainer (after one '
                     'warm-up window); the median is reported.', lower_bound=1)
flags.DEFINE_integer('steps_per_execution', 50, 'Steps per host visit for the '
                     '"many steps" trainers (the kit\'s default).',
                     lower_bound=1)
flags.DEFINE_list('trainers', [], 'Run only these: estimator, '
                  'estimator_guarded, fit_1, fit_many, custom_1, custom_many, '
                  'fit_2_replicas, custom_2_replicas, fit_tape, custom_tape, '
                  'fit_xla, custom_xla, fit_bf16, custom_bf16; empty: all this '
                  'TensorFlow can run.')
flags.DEFINE_bool('skip_unavailable', False, 'Leave out, with a line, the '
                  'asked-for trainers this TensorFlow cannot run (estimator '
                  'without tf.estimator) instead of failing.')
flags.DEFINE_integer('matmul_size', 4096, 'Side of the square matmuls that '
                     'measure the ceilings.', lower_bound=64)
flags.DEFINE_string('data_dir', None, 'Prepared data (see python -m migrate '
                    '--helpfull); unset: the kit\'s default data.')
flags.DEFINE_string('report', 'throughput.json', 'Where the JSON goes.')
FLAGS = flags.FLAGS


# ----------------------------------------------------------------- inputs --

def input_pipeline(dataset, batch: int, window_steps: int,
                   windows: int) -> dict:
  """How fast the pipeline alone delivers batches (no model)."""
  iterator = iter(dataset)
  stamps = []
  for _ in range(windows + 1):
    for _ in range(window_steps):
      next(iterator)
    stamps.append(time.perf_counter())
  return timing.median_rate(stamps, window_steps, batch)


# ------------------------------------------------------------------- main --

def _estimator_version() -> dict | None:
  if not trainers.HAS_ESTIMATOR:
    return None
  from estimator_mnist import versions  # pylint: disable=g-import-not-at-top
  return versions.estimator_build()


def run(info, batch: int, window_steps: int, windows: int,
        steps_per_execution: int, only: list, matmul_size: int,
        skip_unavailable: bool = False) -> dict:
  """Every measurement; returns the report."""
  if window_steps % steps_per_execution:
    raise KitError(f'--window_steps={window_steps} must be a multiple of '
                   f'--steps_per_execution={steps_per_execution}')
  by_id = trainers.by_id(steps_per_execution)
  selected = trainers.select(by_id, only, skip_unavailable)
  flops = flops_lib.training_flops_per_example(model_lib.build_model())
  matmul, alone = {}, {}
  for precision, dtype in ceilings.CEILING_DTYPES.items():
    matmul[precision] = ceilings.matmul_flops_per_second(matmul_size, dtype)
    logging.info('%s matmul ceiling: %.1f GFLOP/s', dtype.name,
                 matmul[precision] / 1e9)
    alone[precision] = ceilings.kernels_alone(precision, batch)
    logging.info('%s: the model\'s kernels alone: %.1f GFLOP/s', precision,
                 alone[precision]['flops_per_second'] / 1e9)
  results = {}
  for key in selected:
    trainer = by_id[key]
    logging.info('timing %s', trainer.label)
    results[key] = trainer.run(info, batch, window_steps, windows)
    results[key].update(label=trainer.label, precision=trainer.precision)
  baseline = results.get('estimator', {}).get('examples_per_second')
  for result in results.values():
    rate = result['examples_per_second']
    result['ratio_to_estimator'] = rate / baseline if baseline else None
    result['fraction_of_ceiling'] = (
        rate * flops['training'] / matmul[result['precision']])
    result['fraction_of_kernels_alone'] = (
        rate / alone[result['precision']]['examples_per_second'])
  pipelines = {
      'migrate.data (train)': input_pipeline(migrate_data.make_dataset(
          info.data_dir, 'train', batch, True), batch, window_steps, windows),
      'estimator_mnist.data.train_input_fn': input_pipeline(
          estimator_data.train_input_fn({'data_dir': info.data_dir,
                                         'batch_size': batch, 'seed': 0}),
          batch, window_steps, windows),
  }
  return {
      'trainers': results, 'input_pipelines': pipelines,
      'matmul_flops_per_second': {ceilings.CEILING_DTYPES[p].name: rate
                                  for p, rate in matmul.items()},
      'kernels_alone': alone,
      'matmul_size': matmul_size,
      'flops_per_example': flops, 'batch_size': batch,
      'window_steps': window_steps, 'windows': windows,
      'steps_per_execution': steps_per_execution, 'data': info.description,
      'machine': {'cpu': cpu.name(), 'cpu_flags': cpu.matmul_flags(),
                  'cores': os.cpu_count(),
                  'python': platform.python_version(),
                  'tensorflow': tf.__version__,
                  'keras': metadata.version('keras'),
                  'estimator': _estimator_version(),
                  'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')},
  }


def table(report: dict) -> str:
  """The report as a Markdown table."""
  best = max(r['examples_per_second'] for r in report['trainers'].values())
  lines = ['| trainer | examples/s | vs TPUEstimator | of its ceiling | '
           'of its kernels alone |', '| --- | ---: | ---: | ---: | ---: |']
  for r in report['trainers'].values():
    ratio = r['ratio_to_estimator']
    lines.append(f'| {r["label"]} | {r["examples_per_second"]:,.0f} | '
                 f'{"-" if ratio is None else f"{ratio:.2f}x"} | '
                 f'{r["fraction_of_ceiling"]:.0%} | '
                 f'{r["fraction_of_kernels_alone"]:.0%} |')
  for name, r in report['input_pipelines'].items():
    lines.append(f'| input pipeline alone: {name} | '
                 f'{r["examples_per_second"]:,.0f} | | '
                 f'{r["examples_per_second"] / best:.0f}x the best trainer | |')
  lines += ['', footer(report)]
  return '\n'.join(lines)


def footer(report: dict) -> str:
  """The ceilings, the model's cost and the machine, in a sentence."""
  flops = report['flops_per_example']
  matmuls = ', '.join(f'{rate / 1e9:.0f} GFLOP/s {dtype}' for dtype, rate
                      in report['matmul_flops_per_second'].items())
  alone = ', '.join(f'{figures["flops_per_second"] / 1e9:.0f} GFLOP/s '
                    f'({figures["examples_per_second"]:,.0f} examples/s) '
                    f'{precision}' for precision, figures
                    in report['kernels_alone'].items())
  machine = report['machine']
  has = [flag for flag, present in machine['cpu_flags'].items() if present]
  return (f'Ceilings ({report["matmul_size"]}^2 matmul; a trainer is held to '
          f'the one of its precision): {matmuls}. The model\'s kernels '
          f'alone (benchmarks/ceilings.py): {alone}. The model: '
          f'{flops["training"] / 1e6:.1f} MFLOP per training example '
          f'({flops["forward"] / 1e6:.1f} forward). Global batch '
          f'{report["batch_size"]}; {machine["cpu"]}, {machine["cores"]} '
          f'cores ({" ".join(has) or "flags unknown"}); '
          f'TensorFlow {machine["tensorflow"]}, Keras {machine["keras"]}.')


def main(argv: list[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  tf.get_logger().setLevel('ERROR')
  try:
    info = prepare.prepare(FLAGS.data_dir)
    report = run(info, FLAGS.batch_size, FLAGS.window_steps, FLAGS.windows,
                 FLAGS.steps_per_execution, FLAGS.trainers, FLAGS.matmul_size,
                 FLAGS.skip_unavailable)
  except KitError as e:
    sys.exit(f'error: {e}')
  print(table(report))
  atomic.write_json(FLAGS.report, report)
  print(f'JSON: {FLAGS.report}')


if __name__ == '__main__':
  # Ends at once when done: no wait on tf.data's teardown (kit_core/process).
  process.run_command(lambda: app.run(main))
