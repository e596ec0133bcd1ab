r"""How big a golden bundle grows against the model it records.

  python benchmarks/bundle_size.py [--sizes=16x2,64x2,128x4] [--steps=1,6]

Records, on the estimator profile (TF 2.15), the BERT-shaped test pair
(tests/user_code/bert_*.py) at several widths x depths, with --replicas=1,2
and each number of steps, the way `migration-compare --record_bundle` does,
and prints for each: the parameters, the Estimator checkpoint's size (the
weights and Adam's two slots, float32: 12 bytes a parameter), the bundle's
size, and the bundle in model-sized arrays (its bytes over 4 a parameter).
The model-sized arrays a bundle holds per replica count grow with --steps:
each resynced step keeps the legacy weights and slots it started from.
"""
import os
import sys
import tempfile
import time

os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, 'tests'),
                os.path.join(REPO, 'tests', 'user_code')]

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags

from kit_core import devices
from kit_core import process

flags.DEFINE_list('sizes', ['16x2', '64x2', '128x4'],
                  'Encoder widths x depths to record.')
flags.DEFINE_list('steps', ['1', '6'], 'Steps to record, each a bundle.')
flags.DEFINE_integer('batch_size', 16, 'Global batch.')
FLAGS = flags.FLAGS


def _record(width: int, depth: int, steps: int, workdir: str) -> tuple:
  """(parameters, bundle bytes) of one recording."""
  import tensorflow as tf
  import bert_legacy
  import bert_port
  from migration_tools.compare import golden
  from migration_tools.compare import harness
  bert_legacy.HIDDEN, bert_legacy.LAYERS = width, depth
  bert_legacy.INTERMEDIATE = 4 * width
  data_dir = os.path.join(workdir, f'data_{width}x{depth}')
  if not os.path.exists(data_dir):
    bert_legacy.write_data(data_dir)
  params = {'data_dir': data_dir, 'learning_rate': 1e-3,
            'num_train_steps': 20, 'num_warmup_steps': 2,
            'init_checkpoint': os.path.join(data_dir, 'pretrained',
                                            'model.ckpt')}
  pair = harness.LegacyPair(bert_legacy.model_fn, bert_legacy.input_fn,
                            bert_legacy.serving_input_receiver_fn)
  options = harness.Options(steps, FLAGS.batch_size, 4, params)
  path = os.path.join(workdir, f'b_{width}_{depth}_{steps}.npz')
  with golden.recording(path) as tape:
    results, bundle = harness.record_bundle(pair, bert_port.make_port(),
                                            workdir, [1, 2], options, tape)
    failed = [r.name for r in results if r.failed]
    if failed:
      raise SystemExit(f'error: the pair failed {failed} at {width}x{depth}')
    tape.finish(bundle)
  model = bert_port.build_model(params)
  parameters = sum(int(tf.size(v)) for v in model.trainable_variables)
  return parameters, os.path.getsize(path)


def main(argv) -> None:
  del argv
  devices.split_cpu(2)
  print('| encoder | parameters | checkpoint (weights + Adam slots) | '
        'steps | bundle | bundle / checkpoint | model-sized arrays |')
  print('| --- | --- | --- | --- | --- | --- | --- |')
  with tempfile.TemporaryDirectory() as workdir:
    for size in FLAGS.sizes:
      width, depth = (int(x) for x in size.split('x'))
      for steps in (int(s) for s in FLAGS.steps):
        started = time.monotonic()
        parameters, size_bytes = _record(width, depth, steps, workdir)
        checkpoint = 12 * parameters
        print(f'| {width} wide, {depth} deep | {parameters:,} | '
              f'{checkpoint / 1e6:.2f} MB | {steps} | {size_bytes / 1e6:.2f} MB'
              f' | {size_bytes / checkpoint:.1f}x | '
              f'{size_bytes / (4 * parameters):.1f} |', flush=True)
        print(f'  ({time.monotonic() - started:.0f} s)', file=sys.stderr)


if __name__ == '__main__':
  # Ends at once when done: no wait on tf.data's teardown (kit_core/process).
  process.run_command(lambda: app.run(main))
