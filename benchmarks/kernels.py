"""Where a training step's time goes: the kernels each trainer runs, by time.

  python benchmarks/kernels.py [--trainers=estimator,custom_many,custom_tape]

Runs each trainer of benchmarks/throughput.py (benchmarks/trainers.py: same
model, data and global batch) for two windows of --steps steps under the
TensorFlow profiler, and prints the kernels that took the most time per step:
op name, the kernel that ran it (after oneDNN's rewrites, e.g.
_MklNativeConv2DBackpropFilter), calls per step and milliseconds per step
(the median call's duration times the calls, so the first, slower calls of
the warm-up do not count). This is
how the kit found why its first port ran slower than TPUEstimator: the
tape's gradients let oneDNN fuse each convolution's weight and bias gradients
into a slower kernel (benchmarks/README.md). Writes the figures as JSON too.
"""
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

# trainers splits the CPU in two at import, before any TF op.
import trainers  # pylint: disable=g-bad-import-order

from kit_core import atomic  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import process  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import profile as profile_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core.errors import KitError  # pylint: disable=g-import-not-at-top,wrong-import-position
from mnist_common import prepare  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_integer('batch_size', 1024, 'Global batch, for every trainer.',
                     lower_bound=2)
flags.DEFINE_integer('steps', 40, 'Steps per window (two are profiled); a '
                     'multiple of --steps_per_execution.', lower_bound=1)
flags.DEFINE_integer('steps_per_execution', 10, 'Steps per host visit for '
                     'the "many steps" trainers.', lower_bound=1)
flags.DEFINE_list('trainers', ['estimator', 'custom_many', 'custom_tape'],
                  'Trainer ids, as benchmarks/throughput.py --trainers.')
flags.DEFINE_integer('top', 15, 'Kernels shown per trainer.', lower_bound=1)
flags.DEFINE_string('data_dir', None, 'Prepared data (see python -m migrate '
                    '--helpfull); unset: the kit\'s default data.')
flags.DEFINE_string('report', 'kernels.json', 'Where the JSON goes.')
FLAGS = flags.FLAGS

def profile(train, info, batch: int, steps: int) -> list[dict]:
  """Kernel times of trainers.by_id()'s `train`, over 2 windows of steps."""
  with tempfile.TemporaryDirectory() as logdir:
    with profile_lib.profiled(logdir):
      train(info, batch, steps, 1)
    return profile_lib.kernel_times(logdir, 2 * steps)


def table(label: str, rows: list[dict], top: int) -> str:
  lines = [f'{label}: {sum(r["ms_per_step"] for r in rows):.0f} ms of '
           'kernels per step',
           '| ms/step | calls/step | kernel | op |', '| ---: | ---: | --- | --- |']
  for r in rows[:top]:
    lines.append(f'| {r["ms_per_step"]:.1f} | {r["calls_per_step"]:g} | '
                 f'{r["kernel"]} | {r["op"]} |')
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  tf.get_logger().setLevel('ERROR')
  by_id = trainers.by_id(FLAGS.steps_per_execution)
  try:
    selected = trainers.select(by_id, FLAGS.trainers)
    if FLAGS.steps % FLAGS.steps_per_execution:
      raise KitError(f'--steps={FLAGS.steps} must be a multiple of '
                     f'--steps_per_execution={FLAGS.steps_per_execution}')
    info = prepare.prepare(FLAGS.data_dir)
    report = {}
    for key in selected:
      trainer = by_id[key]
      logging.info('profiling %s', trainer.label)
      report[key] = profile(trainer.run, info, FLAGS.batch_size, FLAGS.steps)
      print(table(trainer.label, report[key], FLAGS.top) + '\n', flush=True)
  except KitError as e:
    sys.exit(f'error: {e}')
  atomic.write_json(FLAGS.report, report)
  print(f'JSON: {FLAGS.report}')


if __name__ == '__main__':
  # Ends at once when done: no wait on tf.data's teardown (kit_core/process).
  process.run_command(lambda: app.run(main))
