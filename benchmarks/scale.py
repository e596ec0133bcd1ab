r"""The tools at the size of the models teams have: the BERT-shaped test pair
(tests/user_code/bert_*.py) at growing sizes, up to BERT-base; and the
scanner on a large tree.

  python benchmarks/scale.py [--sizes=tiny,small,medium,base] [--work_dir=DIR]
  python benchmarks/scale.py --sizes= --scan_tree=DIR

On the estimator profile (TF 2.15), for each size: trains the legacy
model_fn one step with TPUEstimator (so the checkpoint holds the weights,
Adam's two slots and the step, 12 bytes a parameter), then runs
`migration-convert-checkpoint --verify` on it into the Keras port, each in
its own process, and prints a line per size as it ends and the table at the
end: parameters, the checkpoint's size, the conversion's wall time, its peak
resident memory (the process's own, from wait4) and that over the
checkpoint's size. A size is the encoder's hidden width, layers, heads,
sequence length and vocabulary; `base` is BERT-base's.

--scan_tree times `migration-scan` (text and SARIF) and `tf_upgrade_v2`
(the estimator profile has it beside its Python) on the same tree, each in
its own process: files per second and peak resident memory. The tree is
the user's (benchmarks/README.md says which public trees, at which commits,
and how they were fetched); nothing of it is committed.

The sizes reach the pair's code through the environment
(KIT_SCALE_BERT=hidden,layers,heads,seq,vocab), read by a two-line module
this script writes into its work folder, as a team would wrap its model.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kit_core import exits  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import progress as progress_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import room  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core import tensor_bundle  # pylint: disable=g-import-not-at-top,wrong-import-position

# hidden, layers, heads, sequence, vocabulary.
SIZES = {'tiny': (16, 2, 2, 8, 40), 'small': (128, 2, 2, 32, 1000),
         'medium': (256, 4, 4, 64, 8000), 'base': (768, 12, 12, 128, 30522)}
flags.DEFINE_list('sizes', list(SIZES), f'Sizes, of {", ".join(SIZES)}.')
flags.DEFINE_string('work_dir', None, 'Where the checkpoints go; unset: a '
                    'new temporary folder, removed at the end.')
flags.DEFINE_integer('verify_examples', 64, 'Examples --verify predicts.')
flags.DEFINE_string('scan_tree', None, 'Also time the scanner and '
                    'tf_upgrade_v2 on this tree.')
flags.DEFINE_integer('scan_runs', 3, 'Runs of each tool on --scan_tree; '
                     'the fastest counts (the first reads a cold disk).',
                     lower_bound=1)
flags.DEFINE_bool('verify', True, 'Convert with --verify; --noverify: the '
                  'conversion alone.')
FLAGS = flags.FLAGS

# The pair's sizes are its module's constants, set before its code runs.
_WRAPPER = '''import os
import bert_legacy
(bert_legacy.HIDDEN, bert_legacy.LAYERS, bert_legacy.HEADS, bert_legacy.SEQ,
 bert_legacy.VOCAB) = map(int, os.environ['KIT_SCALE_BERT'].split(','))
bert_legacy.INTERMEDIATE = 4 * bert_legacy.HIDDEN
from bert_legacy import input_fn, model_fn, write_data
from bert_port import make_port
'''


@dataclasses.dataclass(frozen=True)
class Row:
  size: str
  parameters: int
  checkpoint_bytes: int
  seconds: float
  peak_bytes: int


def _run(args: list[str], env: dict, allowed: tuple = (0,),
         python: bool = True) -> tuple[float, int, str]:
  """(seconds, peak resident bytes, output) of one command: this Python's
  with args, or (python=False) args itself; exits on an exit code not
  allowed, with its last lines."""
  start = time.monotonic()
  command = [sys.executable, *args] if python else args
  process = subprocess.Popen(command, cwd=REPO, env=env,
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  lines = []
  try:
    for line in process.stdout:  # Read as it comes: no pipe fills up.
      lines.append(line)
    _, status, usage = os.wait4(process.pid, 0)
  except BaseException:  # A signal (exits.Interrupted): the child goes too.
    process.kill()
    process.wait()
    raise
  process.returncode = os.waitstatus_to_exitcode(status)
  seconds = time.monotonic() - start
  if process.returncode not in allowed:
    sys.exit(f'{" ".join(args[:3])} failed ({process.returncode}):\n' +
             ''.join(lines[-20:]))
  return seconds, usage.ru_maxrss * 1024, ''.join(lines)


def _parameters(prefix: str) -> int:
  """The model's parameters in the checkpoint: all but slots and step."""
  shapes = tensor_bundle.BundleReader(prefix).shapes
  return sum(int(np.prod(shape)) for name, shape in
             shapes.items() if name != 'global_step' and
             not name.endswith(('/adam_m', '/adam_v')))


def _measure(size: str, work_dir: str, progress) -> Row:
  env = {**os.environ, 'KIT_SCALE_BERT': ','.join(map(str, SIZES[size])),
         'PYTHONPATH': os.pathsep.join([work_dir, REPO,
                                        os.path.join(REPO, 'tests'),
                                        os.path.join(REPO, 'tests',
                                                     'user_code')]),
         'TF_CPP_MIN_LOG_LEVEL': '2'}
  data_dir = os.path.join(work_dir, size, 'data')
  estimator_dir = os.path.join(work_dir, size, 'estimator')
  params = json.dumps({'data_dir': data_dir, 'learning_rate': 1e-3,
                       'num_train_steps': 20, 'num_warmup_steps': 2})
  progress.now(f'{size}: writing the data')
  os.makedirs(data_dir, exist_ok=True)
  _run(['-c', 'import sys, scaled_bert; scaled_bert.write_data(sys.argv[1], '
        'examples=128, pretrained=False)', data_dir], env)
  progress.now(f'{size}: one TPUEstimator step, for the checkpoint')
  _run([os.path.join(REPO, 'tests', 'user_code', 'estimator_train.py'),
        '--pair_module=scaled_bert', f'--estimator_dir={estimator_dir}',
        f'--pair_params={params}', '--train_steps=1', '--global_batch=2'],
       env)
  progress.now(f'{size}: migration-convert-checkpoint'
               f'{" --verify" if FLAGS.verify else ""}')
  seconds, peak, output = _run(
      ['-m', 'migration_tools.checkpoint', f'--estimator_dir={estimator_dir}',
       f'--output={os.path.join(work_dir, size, "converted")}',
       '--legacy_model_fn=scaled_bert:model_fn',
       '--legacy_input_fn=scaled_bert:input_fn',
       '--port=scaled_bert:make_port', f'--params={params}',
       *([f'--verify_examples={FLAGS.verify_examples}', '--verify']
         if FLAGS.verify else [])], env)
  if FLAGS.verify and 'every output agrees' not in output:
    sys.exit(f'{size}: the conversion did not verify:\n{output[-2000:]}')
  prefix = os.path.join(estimator_dir, 'model.ckpt-1')
  size_bytes = room.files_size([prefix + '.index'] + [
      os.path.join(estimator_dir, p) for p in os.listdir(estimator_dir)
      if p.startswith('model.ckpt-1.data-')])
  return Row(size, _parameters(prefix), size_bytes, seconds, peak)


def _scan(tree: str, work_dir: str, progress) -> str:
  """The scanner (text, SARIF) and tf_upgrade_v2 on tree: a table."""
  python = sum(name.endswith('.py') for _, _, names in os.walk(tree)
               for name in names)
  upgrade = os.path.join(os.path.dirname(sys.executable), 'tf_upgrade_v2')
  env = {**os.environ, 'PYTHONPATH': REPO}
  runs = [('migration-scan, text', ['-m', 'migration_tools.scanner', tree,
                                    f'--output={work_dir}/scan.txt']),
          ('migration-scan, SARIF', ['-m', 'migration_tools.scanner', tree,
                                     '--format=sarif',
                                     f'--output={work_dir}/scan.sarif']),
          ('tf_upgrade_v2', [upgrade, '--intree', tree, '--outtree',
                             f'{work_dir}/upgraded', '--reportfile',
                             f'{work_dir}/upgrade.txt'])]
  lines = [f'{python:,} Python files in {tree}; the fastest of '
           f'{FLAGS.scan_runs} runs each', '',
           '| tool | seconds | Python files / s | peak resident memory |',
           '| --- | ---: | ---: | ---: |']
  for label, args in runs:
    times, peaks = [], []
    for attempt in range(FLAGS.scan_runs):
      progress.now(f'scan: {label}, run {attempt + 1} of {FLAGS.scan_runs}')
      shutil.rmtree(f'{work_dir}/upgraded', ignore_errors=True)
      # The scanner exits 1 when it finds something: not a failure here.
      seconds, peak, _ = _run(args, env, allowed=(0, 1),
                              python=args[0] != upgrade)
      times.append(seconds)
      peaks.append(peak)
    seconds, peak = min(times), max(peaks)  # The fastest; the largest.
    lines.append(f'| {label} | {seconds:.1f} | {python / seconds:,.0f} | '
                 f'{room.size_text(peak)} |')
  return '\n'.join(lines)


def _table(rows: list[Row]) -> str:
  """The table; the smallest size's peak stands for the process's own
  (TensorFlow loaded, the graphs built), which the others' growth is over."""
  base = min(rows, key=lambda r: r.checkpoint_bytes)
  lines = ['| size | parameters | checkpoint (weights + Adam slots) | '
           f'convert{" --verify" if FLAGS.verify else ""} | peak resident '
           'memory | peak / checkpoint | '
           f'growth over {base.size}\'s peak / checkpoint |',
           '| --- | ---: | ---: | ---: | ---: | ---: | ---: |']
  for row in rows:
    growth = (row.peak_bytes - base.peak_bytes) / row.checkpoint_bytes
    lines.append(f'| {row.size} {SIZES[row.size]} | {row.parameters:,} | '
                 f'{room.size_text(row.checkpoint_bytes)} | '
                 f'{row.seconds:.0f} s | {room.size_text(row.peak_bytes)} | '
                 f'{row.peak_bytes / row.checkpoint_bytes:.2f}x | '
                 f'{"-" if row is base else f"{growth:.2f}x"} |')
  return '\n'.join(lines)


def main(argv):
  del argv
  exits.exit_with_one_line(_main)


def _main() -> None:
  unknown = [s for s in FLAGS.sizes if s not in SIZES]
  if unknown:
    sys.exit(f'--sizes: unknown {", ".join(unknown)}; give some of '
             f'{", ".join(SIZES)}')
  if FLAGS.scan_tree and not os.path.isdir(FLAGS.scan_tree):
    sys.exit(f'--scan_tree {FLAGS.scan_tree} is not a folder; give the tree '
             'to scan')
  with tempfile.TemporaryDirectory() as temporary:
    work_dir = FLAGS.work_dir or temporary
    os.makedirs(work_dir, exist_ok=True)
    with open(os.path.join(work_dir, 'scaled_bert.py'), 'w',
              encoding='utf-8') as f:
      f.write(_WRAPPER)
    rows = []
    progress = progress_lib.Progress()
    for size in FLAGS.sizes:
      with progress.heartbeat(), exits.interruptible(
          f'the measurement of {size} was stopped; nothing was printed for '
          'it'):
        row = _measure(size, work_dir, progress)
      rows.append(row)
      print(f'{size}: {row.parameters:,} parameters, checkpoint '
            f'{room.size_text(row.checkpoint_bytes)}, converted'
            f'{" and verified" if FLAGS.verify else ""} in {row.seconds:.0f} '
            f's, peak {room.size_text(row.peak_bytes)}',
            flush=True)
    if FLAGS.scan_tree:
      with progress.heartbeat(), exits.interruptible(
          'the scan timing was stopped'):
        scans = _scan(os.path.abspath(FLAGS.scan_tree), work_dir, progress)
  if rows:
    print(_table(rows))
  if FLAGS.scan_tree:
    print(scans)


if __name__ == '__main__':
  app.run(main)
