r"""The tools at the size of the models teams have: the BERT-shaped test pair
(tests/user_code/bert_*.py) at growing sizes, up to BERT-base; and the
scanner on a large tree.

  python benchmarks/scale.py [--sizes=tiny,small,medium,base] [--work_dir=DIR]
      [--compare_steps=1,5] [--newest_python=.venv-newest/bin/python]
  python benchmarks/scale.py --sizes= --scan_tree=DIR

On the estimator profile (TF 2.15), for each size, each tool in its own
process, a line as each ends and the tables at the end:

- the conversion: trains the legacy model_fn one step with TPUEstimator (so
  the checkpoint holds the weights, Adam's two slots and the step, 12 bytes
  a parameter), then runs `migration-convert-checkpoint --verify` on it into
  the Keras port: wall time, peak resident memory (the process's own, from
  wait4 in _LAUNCHER) and that over the checkpoint's size;
- the comparison, at each of --compare_steps on one replica:
  `migration-compare` live, then with `--record_bundle`, and the bundle
  replayed (`--bundle`) by --newest_python's TensorFlow: wall time, peak
  resident memory, the bundle's size, each time over the legacy model_fn's
  own training time for as many steps (TPUEstimator, in this run), and
  where the time went (the report's phases, kit_core/timing.py).

A size is the encoder's hidden width, layers, heads, sequence length and
vocabulary; `base` is BERT-base's.

--scan_tree times `migration-scan` (text and SARIF) and `tf_upgrade_v2`
(its engine, as `--intree` runs it, but on past a file it cannot rewrite:
benchmarks/upgrade_tree.py; TF 2.15 has it) on the same tree, each in its
own process: files per second and peak resident memory. The tree is
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
import signal
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kit_core import checkpoint_files  # pylint: disable=g-import-not-at-top,wrong-import-position
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
flags.DEFINE_bool('convert', True, 'Measure the conversion; --noconvert: the '
                  'comparisons alone.')
flags.DEFINE_list('compare_steps', ['1', '5'], 'The steps of each '
                  'comparison; empty: no comparison.')
flags.DEFINE_list('compare_modes', ['live', 'record', 'replay'],
                  'The comparisons to run at each step count: live, record '
                  '(--record_bundle), replay (--bundle, with '
                  '--newest_python; it needs record).')
flags.DEFINE_integer('batch_size', 2, 'The global batch of the legacy '
                     'training and of the comparisons.', lower_bound=1)
flags.DEFINE_string('newest_python', None, 'A Python of the newest profile, '
                    'to replay the bundles with (--bundle); unset: not '
                    'replayed.')
FLAGS = flags.FLAGS

# The pair's sizes are its module's constants, set before its code runs.
_WRAPPER = '''import os
import bert_legacy
(bert_legacy.HIDDEN, bert_legacy.LAYERS, bert_legacy.HEADS, bert_legacy.SEQ,
 bert_legacy.VOCAB) = map(int, os.environ['KIT_SCALE_BERT'].split(','))
bert_legacy.INTERMEDIATE = 4 * bert_legacy.HIDDEN
from bert_legacy import input_fn, model_fn, serving_input_receiver_fn
from bert_legacy import write_data
from bert_port import make_port
'''


@dataclasses.dataclass(frozen=True)
class Row:
  size: str
  parameters: int
  checkpoint_bytes: int
  seconds: float
  peak_bytes: int


@dataclasses.dataclass(frozen=True)
class CompareRow:
  """One migration-compare run: mode is 'live', 'record' (--record_bundle)
  or 'replay' (--bundle, on the newest profile); legacy_seconds: the legacy
  model_fn's own training for as many steps; phases: the report's time;
  measuring: the seconds it spent measuring the port's own noise (its
  reordered steps) and the second state (beyond_init, device_drift)."""
  size: str
  steps: int
  mode: str
  seconds: float
  peak_bytes: int
  legacy_seconds: float
  bundle_bytes: int
  phases: dict
  measuring: float = 0.0
  # The seconds of the states made for coverage (_COVERAGE_CHECKS).
  coverage: float = 0.0


# The checks that measure the second state, and the phases of the port's
# noise steps and noise predictions: what the measured bars cost
# (docs/EQUIVALENCE.md, "Two verdicts on any device"). The noise
# predictions inside one of those checks (its noise's seconds) count once,
# in the check's seconds.
_MEASURING_CHECKS = ('beyond_init', 'device_drift')
_NOISE_PHASES = ('port noise steps', 'port noise predictions')


# The checks that make states of their own for what the recorded steps did
# not exercise (docs/EQUIVALENCE.md, "What a comparison exercised"): a clip
# that no recorded step engaged, and the schedule at global steps that no
# recorded step reached.
_COVERAGE_CHECKS = ('clipping', 'schedule')


def coverage_seconds(report: dict) -> float:
  """The seconds a report's comparison spent on states made for
  coverage."""
  return sum(c.get('seconds', 0.0) for c in report['checks']
             if c['name'].partition(' (')[0] in _COVERAGE_CHECKS)


def measuring_seconds(report: dict) -> float:
  """The seconds a report's comparison spent on its measured bars."""
  inside = sum((c.get('noise') or {}).get('seconds', 0.0)
               for c in report['checks'] if c['name'] in _MEASURING_CHECKS)
  return sum(report['time'].get(p, 0.0) for p in _NOISE_PHASES) - inside + (
      sum(c.get('seconds', 0.0) for c in report['checks']
          if c['name'] in _MEASURING_CHECKS))


# A child's peak resident memory as wait4 gives it is at least its parent's
# when it forked (Linux carries the forked copy's high-water mark across
# exec): started from this process, hundreds of MB once TensorFlow is
# loaded, every command would weigh that much. So each command is started by
# this small Python, which writes the command's own peak (kB) to the pipe
# it is given and exits with the command's exit code.
_LAUNCHER = """import os, signal, sys
pid = os.fork()
if pid == 0:
  try:
    os.execvp(sys.argv[2], sys.argv[2:])
  except OSError as e:
    print(f'cannot run {sys.argv[2]}: {e.strerror}', file=sys.stderr)
    os._exit(127)
_, status, usage = os.wait4(pid, 0)
os.write(int(sys.argv[1]), str(usage.ru_maxrss).encode())
code = os.waitstatus_to_exitcode(status)
sys.exit(128 - code if code < 0 else code)
"""


def _run(args: list[str], env: dict, allowed: tuple = (0,),
         python: str = sys.executable) -> tuple[float, int, str]:
  """(seconds, peak resident bytes, output) of python (this Python unless
  given) with args; exits on an exit code not allowed, with its last
  lines."""
  start = time.monotonic()
  command = [python, *args]
  read, write = os.pipe()
  # A session of its own: on a signal, the launcher and the command go.
  process = subprocess.Popen(
      [sys.executable, '-S', '-c', _LAUNCHER, str(write), *command],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, pass_fds=(write,), start_new_session=True)
  os.close(write)
  lines = []
  try:
    for line in process.stdout:  # Read as it comes: no pipe fills up.
      lines.append(line)
    process.wait()
    with os.fdopen(read, 'rb') as peak:
      peak_kb = int(peak.read() or 0)
  except BaseException:  # A signal (exits.Interrupted): the command goes too.
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    raise
  seconds = time.monotonic() - start
  if process.returncode not in allowed or not peak_kb:
    sys.exit(f'{" ".join(args[:3])} failed ({process.returncode}):\n' +
             ''.join(lines[-20:]))
  return seconds, peak_kb * 1024, ''.join(lines)


def _parameters(prefix: str) -> int:
  """The model's parameters in the checkpoint: all but slots and step."""
  shapes = tensor_bundle.BundleReader(prefix).shapes
  return sum(int(np.prod(shape)) for name, shape in
             shapes.items() if name != 'global_step' and
             not name.endswith(('/adam_m', '/adam_v')))


def _env(size: str, work_dir: str) -> dict:
  return {**os.environ, 'KIT_SCALE_BERT': ','.join(map(str, SIZES[size])),
          'PYTHONPATH': os.pathsep.join([work_dir, REPO,
                                         os.path.join(REPO, 'tests'),
                                         os.path.join(REPO, 'tests',
                                                      'user_code')]),
          'TF_CPP_MIN_LOG_LEVEL': '2'}


def _params(size: str, work_dir: str) -> str:
  # No warmup: with one, the rate is 0 at the first step, which then moves
  # no weight for the updates check to judge at --compare_steps=1.
  return json.dumps({'data_dir': os.path.join(work_dir, size, 'data'),
                     'learning_rate': 1e-3, 'num_train_steps': 20,
                     'num_warmup_steps': 0})


def _write_data(size: str, work_dir: str, progress) -> None:
  progress.now(f'{size}: writing the data')
  data_dir = os.path.join(work_dir, size, 'data')
  os.makedirs(data_dir, exist_ok=True)
  _run(['-c', 'import sys, scaled_bert; scaled_bert.write_data(sys.argv[1], '
        'examples=128, pretrained=False)', data_dir], _env(size, work_dir))


def _train(size: str, steps: int, work_dir: str, progress) -> float:
  """Trains the legacy model_fn with TPUEstimator for steps, from scratch,
  into WORK/SIZE/estimator-STEPS; returns the seconds it took."""
  progress.now(f'{size}: {steps} TPUEstimator step(s)')
  estimator_dir = os.path.join(work_dir, size, f'estimator-{steps}')
  shutil.rmtree(estimator_dir, ignore_errors=True)
  seconds, _, _ = _run(
      [os.path.join(REPO, 'tests', 'user_code', 'estimator_train.py'),
       '--pair_module=scaled_bert', f'--estimator_dir={estimator_dir}',
       f'--pair_params={_params(size, work_dir)}', f'--train_steps={steps}',
       f'--global_batch={FLAGS.batch_size}'], _env(size, work_dir))
  return seconds


def _compare(size: str, steps: int, legacy_seconds: float, work_dir: str,
             progress) -> list[CompareRow]:
  """migration-compare live, recording, and replayed, at steps."""
  folder = os.path.join(work_dir, size, f'compare-{steps}')
  os.makedirs(folder, exist_ok=True)
  bundle = os.path.join(folder, 'bundle.npz')
  live = ['-m', 'migration_tools.compare',
          '--legacy_model_fn=scaled_bert:model_fn',
          '--legacy_input_fn=scaled_bert:input_fn',
          '--legacy_serving_input_fn=scaled_bert:serving_input_receiver_fn',
          f'--params={_params(size, work_dir)}', f'--steps={steps}',
          f'--batch_size={FLAGS.batch_size}']
  runs = [('live', live, sys.executable),
          ('record', [*live, f'--record_bundle={bundle}'], sys.executable)]
  if FLAGS.newest_python:
    runs.append(('replay', ['-m', 'migration_tools.compare',
                            f'--bundle={bundle}'], FLAGS.newest_python))
  runs = [run for run in runs if run[0] in FLAGS.compare_modes]
  rows = []
  for mode, args, python in runs:
    progress.now(f'{size}: migration-compare {mode}, --steps={steps}')
    report = os.path.join(folder, f'{mode}.json')
    seconds, peak, _ = _run(
        [*args, '--port=scaled_bert:make_port', '--replicas=1',
         f'--report={report}'], _env(size, work_dir), python=python)
    with open(report, encoding='utf-8') as f:
      written = json.load(f)
    rows.append(CompareRow(
        size, steps, mode, seconds, peak, legacy_seconds,
        os.path.getsize(bundle) if mode != 'live' else 0, written['time'],
        measuring_seconds(written), coverage_seconds(written)))
    print(f'{size}: compare {mode} --steps={steps} in {seconds:.0f} s '
          f'({seconds / legacy_seconds:.1f}x the legacy training), peak '
          f'{room.size_text(peak)}', flush=True)
  return rows


def _convert(size: str, work_dir: str, progress) -> Row:
  """The conversion (and --verify) of the one-step checkpoint."""
  estimator_dir = os.path.join(work_dir, size, 'estimator-1')
  output = os.path.join(work_dir, size, 'converted')
  shutil.rmtree(output, ignore_errors=True)
  progress.now(f'{size}: migration-convert-checkpoint'
               f'{" --verify" if FLAGS.verify else ""}')
  seconds, peak, printed = _run(
      ['-m', 'migration_tools.checkpoint', f'--estimator_dir={estimator_dir}',
       f'--output={output}', '--legacy_model_fn=scaled_bert:model_fn',
       '--legacy_input_fn=scaled_bert:input_fn',
       '--port=scaled_bert:make_port', f'--params={_params(size, work_dir)}',
       *([f'--verify_examples={FLAGS.verify_examples}', '--verify']
         if FLAGS.verify else [])], _env(size, work_dir))
  if FLAGS.verify and 'every output agrees' not in printed:
    sys.exit(f'{size}: the conversion did not verify:\n{printed[-2000:]}')
  prefix = checkpoint_files.latest(estimator_dir)
  size_bytes = room.files_size([prefix + '.index'] + [
      os.path.join(estimator_dir, p) for p in os.listdir(estimator_dir)
      if p.startswith(os.path.basename(prefix) + '.data-')])
  row = Row(size, _parameters(prefix), size_bytes, seconds, peak)
  print(f'{size}: {row.parameters:,} parameters, checkpoint '
        f'{room.size_text(row.checkpoint_bytes)}, converted'
        f'{" and verified" if FLAGS.verify else ""} in {row.seconds:.0f} '
        f's, peak {room.size_text(row.peak_bytes)}', flush=True)
  return row


def _measure(size: str, steps: list[int], work_dir: str, progress
             ) -> tuple[Row | None, list[CompareRow]]:
  """Everything measured at one size."""
  _write_data(size, work_dir, progress)
  trained = {1: _train(size, 1, work_dir, progress)}
  row = _convert(size, work_dir, progress) if FLAGS.convert else None
  compared = []
  for count in steps:
    if count not in trained:
      trained[count] = _train(size, count, work_dir, progress)
    compared += _compare(size, count, trained[count], work_dir, progress)
  return row, compared


def _scan(tree: str, work_dir: str, progress) -> str:
  """The scanner (text, SARIF) and tf_upgrade_v2 on tree: a table."""
  python = sum(name.endswith('.py') for _, _, names in os.walk(tree)
               for name in names)
  env = {**os.environ, 'PYTHONPATH': REPO}
  # The scanner exits 1 when it finds something: not a failure here.
  runs = [('migration-scan, text', ['-m', 'migration_tools.scanner', tree,
                                    f'--output={work_dir}/scan.txt'], (0, 1)),
          ('migration-scan, SARIF', ['-m', 'migration_tools.scanner', tree,
                                     '--format=sarif',
                                     f'--output={work_dir}/scan.sarif'],
           (0, 1)),
          ('tf_upgrade_v2 (its engine on each file, as --intree)',
           [os.path.join(REPO, 'benchmarks', 'upgrade_tree.py'), tree,
            f'{work_dir}/upgraded'], (0,))]
  lines = [f'{python:,} Python files in {tree}; the fastest of '
           f'{FLAGS.scan_runs} runs each', '',
           '| tool | seconds | Python files / s | peak resident memory |',
           '| --- | ---: | ---: | ---: |']
  for label, args, allowed in runs:
    times, peaks = [], []
    for attempt in range(FLAGS.scan_runs):
      progress.now(f'scan: {label}, run {attempt + 1} of {FLAGS.scan_runs}')
      shutil.rmtree(f'{work_dir}/upgraded', ignore_errors=True)
      seconds, peak, output = _run(args, env, allowed=allowed)
      times.append(seconds)
      peaks.append(peak)
    seconds, peak = min(times), max(peaks)  # The fastest; the largest.
    lines.append(f'| {label} | {seconds:.1f} | {python / seconds:,.0f} | '
                 f'{room.size_text(peak)} |')
  # upgrade_tree.py's line: the files it rewrote and stopped on.
  lines += ['', 'tf_upgrade_v2: ' + [
      line for line in output.splitlines() if 'Python files:' in line][-1]]
  return '\n'.join(lines)


def _added(row: CompareRow, seconds: float | None = None) -> float:
  """What the measured bars (or seconds, of what else) add to the
  comparison without them."""
  seconds = row.measuring if seconds is None else seconds
  rest = row.seconds - seconds
  return seconds / rest if rest > 0 else float('inf')


def _compare_table(rows: list[CompareRow]) -> str:
  """The comparisons: a row each, and the memory of the most steps over
  that of the fewest, by mode and size."""
  lines = ['| size | steps | migration-compare | wall | / legacy training | '
           'peak resident memory | bundle | measured bars: noise, second '
           'state | coverage: states made | where the time went |',
           '| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | '
           '--- |']
  for row in rows:
    phases = {k: v for k, v in row.phases.items() if k != 'total'}
    went = ', '.join(f'{k} {v:.0f} s' for k, v in sorted(
        phases.items(), key=lambda kv: -kv[1])[:4])
    lines.append(
        f'| {row.size} | {row.steps} | {row.mode} | {row.seconds:.0f} s | '
        f'{row.seconds / row.legacy_seconds:.1f}x | '
        f'{room.size_text(row.peak_bytes)} | '
        f'{room.size_text(row.bundle_bytes) if row.bundle_bytes else "-"} | '
        f'{row.measuring:.0f} s, +{_added(row):.0%} | '
        f'{row.coverage:.0f} s, +{_added(row, row.coverage):.0%} | {went} |')
  growth = []
  for size in dict.fromkeys(r.size for r in rows):
    for mode in dict.fromkeys(r.mode for r in rows):
      runs = sorted((r for r in rows if r.size == size and r.mode == mode),
                    key=lambda r: r.steps)
      if len(runs) > 1:
        ratio = runs[-1].peak_bytes / runs[0].peak_bytes
        growth.append(f'{size} {mode}: {ratio:.2f}x at {runs[-1].steps} '
                      f'steps over {runs[0].steps}')
  if growth:
    lines += ['', 'Peak memory: ' + '; '.join(growth) + '.']
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


def _steps() -> list[int]:
  try:
    steps = sorted({int(v) for v in FLAGS.compare_steps})
  except ValueError:
    steps = [0]
  if any(v < 1 for v in steps):
    sys.exit(f'--compare_steps takes whole numbers from 1, e.g. 1,5 (not '
             f'{",".join(FLAGS.compare_steps)})')
  return steps


def _main() -> None:
  unknown = [s for s in FLAGS.sizes if s not in SIZES]
  if unknown:
    sys.exit(f'--sizes: unknown {", ".join(unknown)}; give some of '
             f'{", ".join(SIZES)}')
  if FLAGS.scan_tree and not os.path.isdir(FLAGS.scan_tree):
    sys.exit(f'--scan_tree {FLAGS.scan_tree} is not a folder; give the tree '
             'to scan')
  if FLAGS.newest_python and not os.access(FLAGS.newest_python, os.X_OK):
    sys.exit(f'--newest_python {FLAGS.newest_python} is not a program; give '
             'the newest profile\'s Python (.venv-newest/bin/python)')
  steps = _steps()
  modes = {'live', 'record', 'replay'}
  if not set(FLAGS.compare_modes) <= modes or (
      'replay' in FLAGS.compare_modes and 'record' not in FLAGS.compare_modes):
    sys.exit(f'--compare_modes takes some of live, record, replay (replay '
             f'with record), not {",".join(FLAGS.compare_modes)}')
  with tempfile.TemporaryDirectory() as temporary:
    work_dir = FLAGS.work_dir or temporary
    os.makedirs(work_dir, exist_ok=True)
    with open(os.path.join(work_dir, 'scaled_bert.py'), 'w',
              encoding='utf-8') as f:
      f.write(_WRAPPER)
    rows, compared = [], []
    progress = progress_lib.Progress()
    for size in FLAGS.sizes:
      with progress.heartbeat(), exits.interruptible(
          f'the measurement of {size} was stopped; its table rows are not '
          'printed'):
        row, runs = _measure(size, steps, work_dir, progress)
      rows += [row] if row else []
      compared += runs
    if FLAGS.scan_tree:
      with progress.heartbeat(), exits.interruptible(
          'the scan timing was stopped'):
        scans = _scan(os.path.abspath(FLAGS.scan_tree), work_dir, progress)
  if rows:
    print(_table(rows))
  if compared:
    print(_compare_table(compared))
  if FLAGS.scan_tree:
    print(scans)


if __name__ == '__main__':
  app.run(main)
