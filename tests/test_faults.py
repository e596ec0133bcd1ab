"""Fault injection: bad input, kill -9, SIGTERM, full and read-only disks, cut
files. Each case ends with one line and a non-zero exit, nothing half-written,
or, for the interruptions, with the right result.

Bad inputs are a table; kills land at seeded random moments; disks that fill
up or refuse writes are small tmpfs mounts (root only: skipped, with the
reason, elsewhere).
"""
import http.server
import json
import os
import random
import re
import shutil
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import CATALOGUE, HAS_ESTIMATOR, REPO, TOOLS_PYTHONPATH
from conftest import catalogue, last_line
from conftest import estimator_checkpoint
from conftest import run_module
from conftest import tmpfs
import kit_bundle
from kit_core.errors import KitError
from mnist_common import prepare
from mnist_common import resources
from mnist_common import tfrecords
from mnist_common.errors import DataError

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

# TensorFlow's C++ log lines: a user's shell must not see them on bad input.
TF_CPP_LOG = re.compile(r'^(\d{4}-\d\d-\d\d \S+: [IWEF] |'
                        r'[IWEF]\d{4} \S+ +\d+ \S+\.(cc|h):\d+\])', re.M)
QUICK = ('--train_steps=2', '--batch_size=8', '--noenable_predict')


@pytest.fixture(scope='module')
def http_port():
  """A plain HTTP/1 server on 127.0.0.1: something that answers, but no TPU.
  Stopped with the module."""
  server = socketserver.TCPServer(('127.0.0.1', 0),
                                  http.server.BaseHTTPRequestHandler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield server.server_address[1]
  server.shutdown()
  server.server_close()


def _object_based_checkpoint(directory):
  """What migrate writes: a tf.train.Checkpoint, no global_step."""
  tf.train.Checkpoint(v=tf.Variable(1.0)).save(os.path.join(directory, 'ckpt'))
  return directory


def _name_based_checkpoint(directory, truncate=False, model=True):
  """A small Estimator-style checkpoint (of another model than the kit's:
  one variable of it); truncate: cut its data file; model=False: the global
  step alone."""
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    if model:
      tf.compat.v1.get_variable('conv1/kernel', [5, 5, 1, 32])
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      path = saver.save(session, os.path.join(directory, 'model.ckpt'),
                        global_step=1)
  if truncate:
    data = f'{path}.data-00000-of-00001'
    with open(data, 'r+b') as f:
      f.truncate(os.path.getsize(data) // 2)
  return directory


def _cut_bundle(path):
  """A bundle cut short, as a copy interrupted leaves it."""
  np.savez_compressed(path, weights=np.arange(10000.0))
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)
  return path


def _incomplete_bundle(path):
  """A manifest whose arrays are not in the file."""
  from migration_tools.compare import golden  # pylint: disable=g-import-not-at-top
  from migration_tools.pair import stored  # pylint: disable=g-import-not-at-top
  manifest = {'format': golden.FORMAT, 'versions': {}, 'options': {},
              'replica_counts': [1], 'serving': None, 'batches': [],
              'shards': {}, 'answers': {'x': {'__array__': 'a0', 'scalar':
                                              False}}}
  np.savez(path, **{stored.MANIFEST: np.array(json.dumps(manifest))})
  return path


def _npz_with_string_labels(directory):
  directory.mkdir()
  images = np.zeros((4, 28, 28), np.uint8)
  labels = np.array(list('0123'))
  np.savez(directory / 'mnist.npz', x_train=images, y_train=labels,
           x_test=images, y_test=labels)
  return directory


def _records_with_a_list_for_info(directory, data):
  shutil.copytree(data.data_dir, directory)
  (directory / 'dataset_info.json').write_text('[1, 2]')
  return directory


# (id, module, args, the last line, needs tf.estimator). In args: {data},
# {model} (must stay unwritten), {tmp}, {http} (a port), {migrate_ckpt},
# {estimator_ckpt}, {step_only_ckpt}, {corrupt_ckpt}, {a_file}, {a_link} (a
# symbolic link to it), {cut_bundle}, {incomplete_bundle}, {string_labels}
# (an npz folder), {info_list} (records, their dataset_info.json a list).
# {tmp} is on the PYTHONPATH, with exits_at_import.py in it.
BAD_INPUTS = [
    ('custom eval_steps beyond the test split', 'migrate',
     ('--loop=custom', '--eval_steps=1000'),
     r'^error: --eval_steps=1000 needs 8000 test examples at 8 per batch, but '
     r'the test split has \d+; use --eval_steps=\d+ or less', False),
    ('fit eval_steps beyond the test split', 'migrate',
     ('--loop=fit', '--steps_per_execution=1', '--checkpoint_steps=1',
      '--eval_steps=1000'), r'^error: --eval_steps=1000 needs 8000', False),
    ('estimator eval_steps beyond the test split', 'estimator_mnist',
     ('--eval_steps=1000',), r'^error: --eval_steps=1000 needs 8000', True),
    ('migrate batch larger than the split', 'migrate',
     ('--batch_size=100000',), r'^error: --batch_size=100000 is larger than '
     r'the train split \(\d+ examples\)', False),
    ('estimator batch larger than the split', 'estimator_mnist',
     ('--batch_size=100000',), r'^error: --batch_size=100000 is larger than '
     r'the train split', True),
    ('a thousand CPU devices', 'migrate', ('--num_cpu_devices=1000',),
     r'^error: --num_cpu_devices=1000: more than 64 logical CPU devices', False),
    ('migrate at a grpc address that is no TPU', 'migrate',
     ('--strategy=tpu', '--tpu=grpc://127.0.0.1:{http}'),
     r"^error: something answers at grpc://127.0.0.1:\d+, but not a TPU: it "
     r"does not speak gRPC \(it replied b'", False),
    ('estimator at a grpc address that is no TPU', 'estimator_mnist',
     ('--use_tpu', '--tpu=grpc://127.0.0.1:{http}'),
     r'^error: something answers at grpc://127.0.0.1:\d+, but not a TPU', True),
    ('estimator on a migrate model_dir', 'estimator_mnist',
     ('--model_dir={migrate_ckpt}',), r'^error: --model_dir \S+ holds a '
     r'checkpoint written by tf.train.Checkpoint \(migrate, Keras\), ckpt-1, '
     'not by an Estimator; use another --model_dir', True),
    ('converter output is a file', 'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output={a_file}'),
     r'^error: --output \S+ is a file; name a new folder', True),
    ('converter source cut short', 'migration_tools.checkpoint',
     ('--estimator_dir={corrupt_ckpt}', '--output={model}'),
     r'^error: checkpoint \S+model.ckpt-1 cannot be read \(', True),
    ('converter verifying with a non-callable model_fn',
     'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output={model}', '--verify',
      '--legacy_model_fn=estimator_mnist.model:LOG_EVERY_STEPS'),
     r'^error: --legacy_model_fn: estimator_mnist.model:LOG_EVERY_STEPS is a '
     'int, not a function', True),
    ('compare with a non-callable model_fn', 'migration_tools.compare',
     ('--legacy_model_fn=estimator_mnist.model:LOG_EVERY_STEPS',
      '--report={tmp}/report.json'), r'^error: --legacy_model_fn: '
     'estimator_mnist.model:LOG_EVERY_STEPS is a int, not a function', True),
    ('compare report in a missing folder', 'migration_tools.compare',
     ('--report={tmp}/missing/report.json',), r'^error: --report \S+: its '
     'folder does not exist; create it or choose another path', True),
    # Round two (issue 28).
    ('npz string labels', 'migrate', ('--data_dir={string_labels}',),
     r'^error: \S+mnist.npz \[train\]: labels are of dtype <U1; expected '
     'integers 0-9: convert them to integers', False),
    ('dataset_info.json a JSON list', 'migrate', ('--data_dir={info_list}',),
     r'^error: \S+dataset_info.json is not the record of the data the kit '
     r'wrote \(it holds a JSON list, not an object\); remove it', False),
    ('data_dir a file', 'migrate', ('--data_dir={a_file}',),
     r'^error: --data_dir \S+a_file is a file, not a folder', False),
    ('empty model_dir', 'migrate', ('--model_dir=',), r'^error: flag '
     r'--model_dir=: is empty \(an unset variable\?\); give a folder, or '
     'leave the flag out', False),
    ('estimator empty model_dir', 'estimator_mnist', ('--model_dir=',),
     r'^error: flag --model_dir=: is empty', True),
    ('non-UTF-8 model_dir', 'migrate', ('--model_dir={tmp}/bad\udcff',),
     r"^error: flag --model_dir=\S+: is not valid UTF-8 \(b'\S+bad\\xff'\)"
     ', and TensorFlow takes UTF-8 paths only', False),
    ('negative seed', 'migrate', ('--seed=-1',), r'^error: flag --seed=-1: '
     r'-1 is not an integer in the range \[0, 4294967295\]; see python -m '
     'migrate --help', False),
    ('estimator seed past 32 bits', 'estimator_mnist', ('--seed=1099511627776',),
     r'^error: flag --seed=1099511627776: 1099511627776 is not an integer in '
     'the range', True),
    ('train_steps past 10^12', 'migrate',
     ('--train_steps=99999999999999999999',), r'^error: flag --train_steps='
     r'99999999999999999999: \d+ is not an integer in the range \[1, '
     r'1000000000000\]', False),
    ('num_predictions beyond the test split', 'migrate',
     ('--enable_predict', '--num_predictions=100000'), r'^error: '
     r'--num_predictions=100000 is more than the test split holds \(\d+ '
     r'examples\); use --num_predictions=\d+ or less', False),
    ('estimator num_predictions beyond the test split', 'estimator_mnist',
     ('--enable_predict', '--num_predictions=100000'), r'^error: '
     '--num_predictions=100000 is more than the test split holds', True),
    ('a file where model_dir/export goes', 'migrate',
     ('--model_dir={tmp}/taken',), r'^error: --model_dir \S+taken holds a '
     'file named export where the trainer makes its folder export/; move it '
     'away', False),
    ('estimator on another TF 1 model\'s checkpoint', 'estimator_mnist',
     ('--model_dir={estimator_ckpt}',), r'^error: --model_dir \S+ holds a '
     r'checkpoint of another model \(model.ckpt-1: it lacks conv1/bias, '
     r'conv2/bias, conv2/kernel and 4 more\); use another --model_dir', True),
    ('estimator on a checkpoint of the global step alone', 'estimator_mnist',
     ('--model_dir={step_only_ckpt}',), r'^error: --model_dir \S+ holds a '
     r'checkpoint of another model \(model.ckpt-1: it lacks conv1/bias, '
     r'conv1/kernel, conv2/bias and 5 more\)', True),
    ('converter output empty', 'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output='),
     r'^error: --output is empty \(an unset variable\?\); give a path', False),
    ('converter output is its input', 'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output={estimator_ckpt}'),
     r'^error: --output \S+ would overwrite the input --estimator_dir', False),
    ('converter output a symbolic link', 'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output={a_link}'),
     r'^error: --output \S+ is a symbolic link; name a new path', False),
    ('converter port that exits at import', 'migration_tools.checkpoint',
     ('--estimator_dir={estimator_ckpt}', '--output={model}',
      '--port=exits_at_import:make_port'), r'^error: --port: importing '
     r'exits_at_import called sys.exit\(0\); a module the kit imports must '
     'not run a program at import', False),
    ('compare report and bundle one path', 'migration_tools.compare',
     ('--record_bundle={tmp}/x.npz', '--report={tmp}/x.npz'),
     r'^error: --record_bundle and --report are the same path, \S+x.npz; '
     'give each its own', False),
    ("compare report the port's own module", 'migration_tools.compare',
     ('--bundle={cut_bundle}', '--port=exits_at_import:make_port',
      '--report={tmp}/exits_at_import.py'), r'^error: --report '
     r'\S+exits_at_import.py would overwrite the module --port names '
     r'\S+exits_at_import.py; write the output elsewhere', False),
    ('compare report in the data folder', 'migration_tools.compare',
     ('--params={{"data_dir": "{tmp}/taken"}}', '--report={tmp}/taken/export'),
     r"^error: --report \S+taken/export would overwrite the data folder "
     r"params' data_dir names \S+taken; write the output elsewhere", False),
    ('compare report an existing folder', 'migration_tools.compare',
     ('--report={tmp}',), r'^error: --report \S+ is a folder; name a file',
     False),
    ('compare record_bundle an existing folder', 'migration_tools.compare',
     ('--record_bundle={tmp}', '--report={tmp}/r.json'),
     r'^error: --record_bundle \S+ is a folder; name a file', False),
    ('compare report a symbolic link', 'migration_tools.compare',
     ('--report={a_link}',), r'^error: --report \S+a_link is a symbolic link',
     False),
    ('compare report empty', 'migration_tools.compare', ('--report=',),
     r'^error: --report is empty', False),
    ('compare replicas with a bundle', 'migration_tools.compare',
     ('--bundle={cut_bundle}', '--replicas=a', '--report={tmp}/r.json'),
     r'^error: --replicas takes whole numbers, e\.g\. 1,2,4', False),
    ('compare steps with a bundle', 'migration_tools.compare',
     ('--bundle={cut_bundle}', '--steps=3', '--report={tmp}/r.json'),
     r'^error: --steps with --bundle: the bundle holds the values it was '
     'recorded with; leave them out', False),
    ('compare a bundle cut short', 'migration_tools.compare',
     ('--bundle={cut_bundle}', '--report={tmp}/r.json'),
     r'^error: cannot read the bundle \S+cut.npz \(BadZipFile: .*\); record '
     'it again', False),
    ('compare an incomplete bundle', 'migration_tools.compare',
     ('--bundle={incomplete_bundle}', '--report={tmp}/r.json'),
     r"^error: the bundle \S+incomplete.npz is incomplete \(KeyError: 'a0'\)"
     ': it was not written whole by this kit', False),
]


@pytest.mark.parametrize('module, args, message', [
    pytest.param(module, args, message, id=name,
                 marks=[pytest.mark.estimator] if estimator else [])
    for name, module, args, message, estimator in BAD_INPUTS])
def test_bad_input_is_one_line(tmp_path, fake_data_dir, http_port, module,
                               args, message):
  model = tmp_path / 'model'
  values = {'data': fake_data_dir.data_dir, 'model': model, 'tmp': tmp_path,
            'http': http_port, 'a_file': tmp_path / 'a_file',
            'a_link': tmp_path / 'a_link'}
  (tmp_path / 'a_file').write_text('not a folder')
  (tmp_path / 'a_link').symlink_to(tmp_path / 'a_file')
  (tmp_path / 'exits_at_import.py').write_text('import sys\nsys.exit(0)\n')
  (tmp_path / 'taken').mkdir()
  (tmp_path / 'taken' / 'export').write_text('a file')
  makers = {
      'step_only_ckpt': lambda: _name_based_checkpoint(tmp_path / 'step_only',
                                                       model=False),
      'cut_bundle': lambda: _cut_bundle(tmp_path / 'cut.npz'),
      'incomplete_bundle': lambda: _incomplete_bundle(
          tmp_path / 'incomplete.npz'),
      'string_labels': lambda: _npz_with_string_labels(tmp_path / 'strings'),
      'info_list': lambda: _records_with_a_list_for_info(
          tmp_path / 'info_list', fake_data_dir)}
  for key, make in makers.items():
    if any(f'{{{key}}}' in a for a in args):
      values[key] = make()
  if any('{migrate_ckpt}' in a for a in args):
    values['migrate_ckpt'] = _object_based_checkpoint(tmp_path / 'migrate')
  if any('{estimator_ckpt}' in a for a in args):
    values['estimator_ckpt'] = _name_based_checkpoint(tmp_path / 'estimator')
  if any('{corrupt_ckpt}' in a for a in args):
    values['corrupt_ckpt'] = _name_based_checkpoint(tmp_path / 'corrupt',
                                                    truncate=True)
  args = [a.format(**values) for a in args]
  if not module.startswith('migration_tools'):
    args = [f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model}',
            *QUICK, *args]
  result = run_module(module, *args, timeout=300, env={
      'PYTHONPATH': os.pathsep.join([TOOLS_PYTHONPATH, str(tmp_path)])})
  assert result.returncode == 1, result.stderr[-3000:]
  assert re.search(message, last_line(result.stderr)), result.stderr[-3000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert not TF_CPP_LOG.search(result.stderr), result.stderr[:2000]
  assert not model.exists()


@pytest.mark.skipif(HAS_ESTIMATOR, reason='the newest profile\'s case: '
                    'this TensorFlow has tf.estimator')
@pytest.mark.parametrize('module, args, message', [
    # A flag names the legacy side: a live comparison, refused. (With none,
    # the kit's own bundle is checked: test_across_versions.py.)
    ('migration_tools.compare', ('--report={tmp}/r.json',
                                 '--legacy_model_fn=estimator_mnist.model:'
                                 'model_fn'),
     r'^error: migration-compare runs your model_fn as TPUEstimator did, and '
     r'TensorFlow 2\.\d+\.\d+ has no tf.estimator \(removed in 2.16\): install '
     r'the estimator profile \(TF 2.15; README, Set-up\), or check the port '
     r'against a bundle recorded there \(--bundle=FILE\)'),
    ('migration_tools.checkpoint', ('--estimator_dir={tmp}/ckpt',
                                    '--output={tmp}/out', '--verify'),
     r'^error: --verify and --legacy_model_fn run your model_fn as '
     'TPUEstimator did, and TensorFlow .* or convert here without them'),
])
def test_the_live_legacy_side_on_the_newest_tensorflow_is_one_line(
    tmp_path, module, args, message):
  _name_based_checkpoint(tmp_path / 'ckpt')
  result = run_module(module, *[a.format(tmp=tmp_path) for a in args],
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert result.returncode == 1, result.stderr[-3000:]
  assert re.search(message, last_line(result.stderr)), result.stderr[-3000:]
  assert not (tmp_path / 'out').exists()
  # The report migration-compare was asked for holds the error alone.
  if module == 'migration_tools.compare':
    report = json.loads((tmp_path / 'r.json').read_text())
    assert report['passed'] is False and report['checks'] == []
    assert report['error'] == last_line(result.stderr).removeprefix(
        'error: ')


@pytest.mark.parametrize('module, args', [
    pytest.param('migrate', ('--loop=custom',), id='migrate custom'),
    pytest.param('migrate', ('--loop=fit', '--steps_per_execution=1',
                             '--checkpoint_steps=1'), id='migrate fit'),
    pytest.param('estimator_mnist', (), id='estimator',
                 marks=pytest.mark.estimator),
])
def test_full_disk_is_one_line_and_leaves_no_temporary_folder(
    tmp_path, fake_data_dir, module, args):
  with tmpfs(tmp_path / 'disk', '1m') as disk:
    model = disk / 'model'
    result = run_module(module, f'--data_dir={fake_data_dir.data_dir}',
                        f'--model_dir={model}', *QUICK, '--eval_steps=0',
                        *args, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r'^error: cannot write /\S+: no space left on device; '
                     r'free space there, or point --model_dir',
                     last_line(result.stderr)), result.stderr[-3000:]
    assert 'Traceback' not in result.stderr
    left = os.listdir(model) if model.exists() else []
    assert not [name for name in left if name.endswith('_temp')], left


def test_read_only_data_dir_is_one_line(tmp_path):
  with tmpfs(tmp_path / 'data', '20m') as data:
    subprocess.run(['mount', '-o', 'remount,ro', str(data)], check=True)
    result = run_module('migrate', f'--data_dir={data}', '--data_source=fake',
                        f'--model_dir={tmp_path / "model"}', *QUICK,
                        timeout=300)
  assert result.returncode == 1, result.stderr[-3000:]
  assert re.search(r'^error: cannot write /\S+: read-only file system; point '
                   r'--model_dir \(or --data_dir, --output\) at a folder you '
                   'can write', last_line(result.stderr)), result.stderr[-3000:]
  assert not (tmp_path / 'model').exists()


def _start(module, log, *args, env=None):
  with open(log, 'w') as f:
    return subprocess.Popen(
        [sys.executable, '-m', module, *args], cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO, **(env or {})),
        stdout=subprocess.DEVNULL, stderr=f)


def _start_held(hold, main, log, *args, env=None):
  """`main` (a module with run()) with args, after the code `hold`."""
  code = (f'{hold}\nimport sys\nsys.argv = ["{main}", *{list(args)!r}]\n'
          f'from {main} import run\nrun()\n')
  with open(log, 'w') as f:
    return subprocess.Popen(
        [sys.executable, '-c', code], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=f, env=dict(os.environ, PYTHONPATH=TOOLS_PYTHONPATH,
                           **(env or {})))


def _wait_for(process, log, pattern, timeout=300):
  """The first match of pattern in the log, once the process wrote it."""
  deadline = time.monotonic() + timeout
  while not (match := re.search(pattern, log.read_text())):
    assert process.poll() is None and time.monotonic() < deadline, (
        log.read_text()[-3000:])
    time.sleep(0.2)
  return match


# Prints each step the migrate loops reach (they log only when they save),
# so that a test can signal at a step no periodic save covers.
_REPORT_MIGRATE_STEPS = """
import sys
from migrate import cadence
real = cadence.Cadence.after_execution
def after_execution(self, step, *args, **kwargs):
  print(f'REACHED {step}', file=sys.stderr, flush=True)
  return real(self, step, *args, **kwargs)
cadence.Cadence.after_execution = after_execution
"""


@pytest.mark.parametrize('module, args, reached, stop, named', [
    pytest.param('migrate', ('--loop=custom',), r'REACHED (1\d)\b',
                 signal.SIGTERM, False, id='custom, default model_dir'),
    pytest.param('migrate', ('--loop=custom',), r'REACHED (1\d)\b',
                 signal.SIGINT, True, id='custom, Ctrl-C'),
    catalogue('migrate', ('--loop=custom', '--num_cpu_devices=2'),
              r'REACHED (1\d)\b', signal.SIGTERM, True,
              id='custom, 2 replicas'),
    catalogue('migrate', ('--loop=fit',), r'REACHED (1\d)\b', signal.SIGTERM,
              True, id='fit'),
    catalogue('migrate', ('--loop=fit',), r'REACHED (1\d)\b', signal.SIGINT,
              True, id='fit, Ctrl-C'),
    # The model_fn's LoggingTensorHook logs every 100 steps.
    pytest.param('estimator_mnist', (), r', step = ([1-9]\d\d+)\b',
                 signal.SIGTERM, False, id='estimator, default model_dir',
                 marks=pytest.mark.estimator),
    pytest.param('estimator_mnist', (), r', step = ([1-9]\d\d+)\b',
                 signal.SIGINT, True, id='estimator, Ctrl-C',
                 marks=pytest.mark.estimator),
])
def test_sigterm_saves_the_step_reached_and_a_rerun_resumes_there(
    tmp_path, fake_data_dir, module, args, reached, stop, named):
  """And Ctrl-C (SIGINT) as SIGTERM does, exit 130.

  Periodic saves are far apart (every 100,000 steps), so the checkpoint the
  stop names can only be the one saved for the signal, at a step at least the
  one the run was seen to reach before it. Without --model_dir (named False)
  the run trains in a new temporary folder, and the line names it: the same
  command would make another.
  """
  model = tmp_path / 'model'
  common = [f'--data_dir={fake_data_dir.data_dir}', '--batch_size=8',
            '--noenable_predict', '--eval_steps=0', *args]
  if module == 'migrate':
    common += ['--checkpoint_steps=100000', '--steps_per_execution=5']
  else:
    common += ['--save_checkpoints_steps=100000']
  log = tmp_path / 'first.log'
  first = [*common, '--train_steps=1000000'] + (
      [f'--model_dir={model}'] if named else [])
  # The default folder is made in TMPDIR: here, so that the test removes it.
  env = {'TMPDIR': str(tmp_path)}
  process = (
      _start_held(_REPORT_MIGRATE_STEPS, 'migrate.main', log, *first, env=env)
      if module == 'migrate' else _start(module, log, *first, env=env))
  try:
    seen = int(_wait_for(process, log, reached).group(1))
    process.send_signal(stop)
    assert process.wait(timeout=120) == 128 + stop, log.read_text()[-3000:]
  finally:
    process.kill()
  again = (r'run the same command again' if named else
           r'run again with --model_dir=(?P<folder>\S+)')
  stopped = re.fullmatch(
      rf'stopped: {stop.name} received: checkpoint (\S+) saved at step (\d+); '
      rf'{again} to resume from it', last_line(log.read_text()))
  assert stopped, log.read_text()[-3000:]
  if not named:
    model = Path(stopped.group('folder'))
    assert model.parent == tmp_path and model.is_dir()
  step = int(stopped.group(2))
  assert step >= seen > 0 and stopped.group(1).endswith(f'-{step}')
  assert tf.train.latest_checkpoint(str(model)) == stopped.group(1)
  result = run_module(module, *common, f'--model_dir={model}',
                      f'--train_steps={step + 5}', timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  resumed = (f'resuming at step {step} of {step + 5}' if module == 'migrate'
             else f'Restoring parameters from {stopped.group(1)}')
  assert resumed in result.stderr


@pytest.mark.parametrize('module, args, started', [
    pytest.param('migrate', ('--loop=custom', '--checkpoint_steps=10',
                             '--steps_per_execution=5'), r'step 10/',
                 id='migrate'),
    pytest.param('estimator_mnist', ('--save_checkpoints_steps=10',),
                 r'Saving checkpoints for 10 ', id='estimator',
                 marks=pytest.mark.estimator),
])
def test_a_second_trainer_on_a_model_dir_in_use_stops_in_one_line(
    tmp_path, fake_data_dir, module, args, started):
  """And the lock dies with its holder: after a kill -9 the model_dir is
  free again."""
  model = tmp_path / 'model'
  common = [f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model}',
            '--batch_size=8', '--noenable_predict', '--eval_steps=0', *args]
  log = tmp_path / 'first.log'
  first = _start(module, log, *common, '--train_steps=1000000')
  try:
    _wait_for(first, log, started)
    second = run_module(module, *common, '--train_steps=20', timeout=300)
    assert second.returncode == 1, second.stderr[-3000:]
    assert re.fullmatch(
        rf'error: --model_dir {model} is in use by another trainer \(pid '
        rf'{first.pid}\); wait for it to end, or use another --model_dir',
        last_line(second.stderr)), second.stderr[-3000:]
    assert 'Traceback' not in second.stderr
    assert first.poll() is None
  finally:
    first.kill()
    first.wait(timeout=60)
  saved = tf.train.latest_checkpoint(str(model))
  step = int(saved.rsplit('-', 1)[1])
  again = run_module(module, *common, f'--train_steps={step + 5}', timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]


# Code run before a command's main, to hold it at a known moment: prints
# HELD, then sleeps where the signal is to land.
_HOLD_MIGRATE_EXPORT = """
import sys, time, tensorflow as tf
real = tf.saved_model.save
def save(obj, folder, **kwargs):
  real(obj, folder, **kwargs)  # Written, not yet renamed into place.
  print('HELD', file=sys.stderr, flush=True)
  time.sleep(60)
tf.saved_model.save = save
"""
_HOLD_ESTIMATOR_EXPORT = """
import sys, time
from tensorflow.python.saved_model import builder_impl
real = builder_impl._SavedModelBuilder.save
def save(self, *args, **kwargs):  # Variables written into export/temp-N.
  print('HELD', file=sys.stderr, flush=True)
  time.sleep(60)
  return real(self, *args, **kwargs)
builder_impl._SavedModelBuilder.save = save
"""
_HOLD_VERIFY = """
import sys, time
from migration_tools.checkpoint import verify
def held(*args, **kwargs):
  print('HELD', file=sys.stderr, flush=True)
  time.sleep(60)
verify.verify = held
"""


def _unfinished(folder):
  return [n for n in os.listdir(folder) if n.startswith(('.tmp-', 'temp-'))]


@pytest.mark.parametrize('main, hold', [
    pytest.param('migrate.main', _HOLD_MIGRATE_EXPORT, id='migrate'),
    pytest.param('estimator_mnist.main', _HOLD_ESTIMATOR_EXPORT,
                 id='estimator', marks=pytest.mark.estimator),
])
@pytest.mark.parametrize('stop', [signal.SIGTERM, signal.SIGINT],
                         ids=['SIGTERM', 'SIGINT'])
def test_a_signal_during_export_leaves_nothing_half_written(
    tmp_path, fake_data_dir, main, hold, stop):
  model = tmp_path / 'model'
  args = [f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model}',
          *QUICK, '--eval_steps=0']
  log = tmp_path / 'run.log'
  process = _start_held(hold, main, log, *args)
  try:
    _wait_for(process, log, r'(?m)^HELD$')
    assert _unfinished(model / 'export'), 'the export was not under way'
    process.send_signal(stop)
    assert process.wait(timeout=120) == 128 + stop, log.read_text()[-3000:]
  finally:
    process.kill()
  assert re.fullmatch(
      rf'stopped: {stop.name} received: training is saved in \S+-2, nothing '
      'was exported; run the same command again to evaluate and export',
      last_line(log.read_text())), log.read_text()[-3000:]
  assert os.listdir(model / 'export') == []
  again = run_module(main.split('.')[0], *args, timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]
  assert len(os.listdir(model / 'export')) == 1


# Held at the Checkpoint: line, between the conversion and its
# verification, where a SIGTERM once took the default action: no stopped:
# line, and the unverified checkpoint left under its final name.
_HOLD_AT_THE_CHECKPOINT_LINE = """
import sys, time
from migration_tools.checkpoint import command
_printable = command.printable
def held(text):
  if text.startswith('Checkpoint:'):
    print('HELD', file=sys.stderr, flush=True)
    time.sleep(60)
  return _printable(text)
command.printable = held
"""


@pytest.mark.estimator
@pytest.mark.parametrize('hold', [_HOLD_VERIFY, _HOLD_AT_THE_CHECKPOINT_LINE],
                         ids=['verifying', 'at the Checkpoint line'])
def test_a_signal_during_verify_removes_the_unverified_output(tmp_path, hold):
  source = tmp_path / 'estimator'
  estimator_checkpoint(source)
  output = tmp_path / 'converted'
  log = tmp_path / 'convert.log'
  process = _start_held(hold, 'migration_tools.checkpoint.command',
                        log, f'--estimator_dir={source}', f'--output={output}',
                        '--verify')
  try:
    _wait_for(process, log, r'(?m)^HELD$')
    assert output.exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 143, log.read_text()[-3000:]
  finally:
    process.kill()
  assert last_line(log.read_text()) == (
      f'stopped: SIGTERM received: the verification was stopped and {output} '
      'was removed; run the same command again'), log.read_text()[-3000:]
  assert not output.exists()
  assert not [n for n in os.listdir(tmp_path) if n.startswith('.tmp-')]


@pytest.mark.estimator
def test_a_sigkill_during_verify_leaves_an_output_the_rerun_names(tmp_path):
  # Nothing runs after a SIGKILL: the unverified checkpoint stays, and the
  # rerun says so, where it once said only "exists and is not empty".
  source = tmp_path / 'estimator'
  estimator_checkpoint(source)
  output = tmp_path / 'converted'
  args = (f'--estimator_dir={source}', f'--output={output}', '--verify')
  log = tmp_path / 'convert.log'
  process = _start_held(_HOLD_VERIFY, 'migration_tools.checkpoint.command',
                        log, *args)
  try:
    _wait_for(process, log, r'(?m)^HELD$')
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
  finally:
    process.kill()
  again = run_module('migration_tools.checkpoint', *args)
  assert again.returncode == 1, again.stderr[-3000:]
  assert last_line(again.stderr) == (
      f'error: --output {output} holds a checkpoint a --verify run converted '
      'and never verified (that run was killed before it ended): remove '
      f'{output}, then run the same command again')
  shutil.rmtree(output)
  done = run_module('migration_tools.checkpoint', *args)
  assert done.returncode == 0, done.stderr[-3000:]
  assert sorted(os.listdir(output)) == ['checkpoint', *sorted(
      n for n in os.listdir(output) if n.startswith('ckpt'))]


def _start_compare(data, report, log, *args):
  """migration-compare on the kit's pair at one replica, started with its
  output to log; a progress line every half second."""
  params = json.dumps({'learning_rate': 0.05, 'data_dir': data.data_dir})
  with open(log, 'w') as f:
    return subprocess.Popen(
        [sys.executable, '-m', 'migration_tools.compare', *args,
         '--replicas=1', '--eval_batches=1', '--notpu_ready',
         f'--params={params}', f'--report={report}'], cwd=REPO,
        env=dict(os.environ, PYTHONPATH=TOOLS_PYTHONPATH,
                 KIT_PROGRESS_SECONDS='0.5'),
        stdout=f, stderr=subprocess.STDOUT)


@pytest.mark.estimator
def test_a_signal_in_the_middle_of_a_check_stops_the_comparison(
    tmp_path, fake_data_dir):
  # Never a check's ERROR, with the comparison running on: the command ends
  # within seconds, in one line, and writes no report.
  report = tmp_path / 'report.json'
  log = tmp_path / 'compare.log'
  process = _start_compare(fake_data_dir, report, log, '--steps=500')
  try:
    # The trajectory check is under way, a step in.
    _wait_for(process, log, r'(?m)^\.\.\. trajectory \(1 replica\): step \d+')
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143, log.read_text()[-3000:]
    took = time.monotonic() - sent
  finally:
    process.kill()
  text = log.read_text()
  assert took < 10, f'{took:.1f} s'
  assert last_line(text) == (
      'stopped: SIGTERM received: the comparison was stopped, no report was '
      'written; run the same command again'), text[-3000:]
  assert not report.exists()
  assert not re.search(r'(?m)^(ERROR|NOT RUN) ', text), text[-3000:]
  assert 'Report:' not in text and 'First to fix' not in text


def _stopped(process, log, when) -> str:
  """The process's log once a SIGTERM sent when when() returns ended it
  with exit code 143."""
  try:
    when()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143, log.read_text()[-3000:]
  finally:
    process.kill()
  return log.read_text()


# Held at the Checks: line, once the comparison has ended, where a SIGTERM
# once took the default action: no stopped: line, a report with no plot.
_HOLD_AT_THE_CHECKS_LINE = """
import sys, time
from migration_tools.compare import command
_counts = command._counts
def held(results):
  print('HELD', flush=True)
  time.sleep(5)
  return _counts(results)
command._counts = held
"""


def test_a_signal_once_the_comparison_ended_waits_for_its_report(tmp_path):
  report = tmp_path / 'report.json'
  log = tmp_path / 'compare.log'
  with open(log, 'w') as f:
    process = subprocess.Popen(
        [sys.executable, '-c', _HOLD_AT_THE_CHECKS_LINE +
         'sys.argv = ["migration-compare", "--port=kit_pair.mnist:make_port",'
         f' "--bundle={kit_bundle.BUNDLE}", "--replicas=1", "--notpu_ready",'
         f' "--report={report}"]\n'
         'command.run()\n'], cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONPATH=TOOLS_PYTHONPATH))
  text = _stopped(process, log, lambda: _wait_for(process, log,
                                                  r'(?m)^HELD$'))
  assert last_line(text) == (
      'stopped: SIGTERM received: the comparison had ended: its lines above '
      'and its report are whole'), text[-3000:]
  assert f'Report: {report}, plot: {tmp_path / "report.png"}' in text
  assert json.loads(report.read_text())['checks']
  assert (tmp_path / 'report.png').stat().st_size > 0


@pytest.mark.estimator
@pytest.mark.parametrize('delay', [2.0, catalogue(0.5), catalogue(5.0)])
def test_a_signal_while_recording_a_bundle_leaves_no_bundle(
    tmp_path, fake_data_dir, delay):
  """GB20/GB25: a SIGTERM at any moment of --record_bundle (graph building,
  AutoGraph, a weakref callback, a check) stops it in one line, exit 143:
  no bundle under the final name, no temporary one, no report."""
  report, bundle = tmp_path / 'report.json', tmp_path / 'golden.npz'
  log = tmp_path / 'record.log'
  process = _start_compare(fake_data_dir, report, log, '--steps=3',
                           f'--record_bundle={bundle}')
  def when():
    _wait_for(process, log, r'(?m)^Recording a bundle')
    time.sleep(delay)
    if process.poll() is not None:
      pytest.fail(f'recorded in under {delay} s: no moment to stop it')
  text = _stopped(process, log, when)
  assert last_line(text) == (
      'stopped: SIGTERM received: the comparison was stopped, no report was '
      'written; run the same command again'), text[-3000:]
  # The run's own log of TensorFlow's lines (cli.run) may stay: a log.
  assert set(os.listdir(tmp_path)) - {'report.log'} == {'record.log'}
  assert not re.search(r'(?m)^(ERROR|NOT RUN) ', text), text[-3000:]


def _fingerprint(text):
  found = re.findall(r'Weights fingerprint at step (\d+): (\w+)', text)
  assert found, text[-3000:]
  return found[-1]


@CATALOGUE
def test_ten_seeded_kill9_cycles_end_bit_identical_to_an_uninterrupted_run(
    tmp_path, fake_data_dir):
  """The custom loop on 2 replicas, killed at ten seeded moments (twice the
  kill is made to look as if it came during a checkpoint write: the latest
  checkpoint cut short, an unfinished folder beside it)."""
  # 600 steps: the ten cycles reach about 200 (20 a cycle, at least the 10
  # to their first save, on 2 cores), so each kill lands mid-run, asserted
  # below; the steps beyond are the uninterrupted run's and the last one's.
  total = 600
  args = [f'--data_dir={fake_data_dir.data_dir}', '--loop=custom',
          '--num_cpu_devices=2', '--batch_size=16', f'--train_steps={total}',
          '--checkpoint_steps=10', '--steps_per_execution=5',
          '--noenable_predict', '--eval_steps=0']
  whole = run_module('migrate', *args, f'--model_dir={tmp_path / "whole"}',
                     timeout=300)
  assert whole.returncode == 0, whole.stderr[-3000:]
  model = tmp_path / 'interrupted'
  rng = random.Random(16)
  starts = []
  for cycle in range(10):
    log = tmp_path / f'cycle{cycle}.log'
    process = _start('migrate', log, *args, f'--model_dir={model}')
    try:
      # Once this run has saved a checkpoint of its own: every cycle moves
      # the run on, however slow the machine.
      _wait_for(process, log, rf'step \d+/{total}: ')
      time.sleep(rng.uniform(0.0, 0.5))
    finally:
      process.send_signal(signal.SIGKILL)
      process.wait(timeout=60)
    starts.append(int(re.search(r'(?:starting|resuming) at step (\d+)',
                                log.read_text()).group(1)))
    latest = tf.train.latest_checkpoint(str(model))
    if cycle in (3, 7) and latest:
      data = f'{latest}.data-00000-of-00001'
      with open(data, 'r+b') as f:
        f.truncate(os.path.getsize(data) // 2)
      os.makedirs(f'{latest}0_temp', exist_ok=True)
  print(f'the ten runs started at steps {starts}')
  last = run_module('migrate', *args, f'--model_dir={model}', timeout=300)
  assert last.returncode == 0, last.stderr[-3000:]
  assert _fingerprint(last.stderr) == _fingerprint(whole.stderr)
  # The kills landed at different steps, mid-run: a real test of resuming.
  # Each run started where the last one's newest readable checkpoint was:
  # ten moments of kill, not ten restarts from the beginning.
  assert len({s for s in starts if s > 0}) >= 5, starts
  assert max(starts) < total - 10, starts  # The tenth still had steps to go.
  assert not [n for n in os.listdir(model) if n.endswith('_temp')]


def test_fit_resumes_with_a_new_pass_over_the_data(tmp_path, fake_data_dir):
  """What the README says of fit: a resumed run starts a new pass, so it is
  repeatable but not the uninterrupted run (the check above can tell)."""
  args = [f'--data_dir={fake_data_dir.data_dir}', '--loop=fit',
          '--batch_size=16', '--checkpoint_steps=10',
          '--steps_per_execution=5', '--noenable_predict', '--eval_steps=0']
  whole = run_module('migrate', *args, '--train_steps=40',
                     f'--model_dir={tmp_path / "whole"}')
  run_module('migrate', *args, '--train_steps=20',
             f'--model_dir={tmp_path / "halves"}')
  halves = run_module('migrate', *args, '--train_steps=40',
                      f'--model_dir={tmp_path / "halves"}')
  assert 'resuming at step 20 of 40' in halves.stderr
  assert _fingerprint(halves.stderr) != _fingerprint(whole.stderr)


def test_a_tfrecord_cut_at_any_byte_is_refused(tmp_path):
  images = np.arange(3 * 784, dtype=np.uint8).reshape(3, 28, 28, 1)
  whole = tmp_path / 'whole.tfrecords'
  tfrecords.write_records(str(whole), images, np.arange(3))
  data = whole.read_bytes()
  cut = tmp_path / 'cut.tfrecords'
  boundaries = []
  for size in range(1, len(data)):
    cut.write_bytes(data[:size])
    try:
      boundaries.append((size, tfrecords.count_records(str(cut))))
    except DataError:
      pass
  # Only a cut between two records reads as a shorter file...
  record = len(data) // 3
  assert boundaries == [(record, 1), (2 * record, 2)]
  # ... which the counts written with the data catch.
  prepare.prepare(str(tmp_path / 'data'), 'fake')
  train = tmp_path / 'data' / 'train.tfrecords'
  train.write_bytes(train.read_bytes()[:record * 5])
  with pytest.raises(DataError, match=r'train.tfrecords holds 5 records but '
                     r'dataset_info.json says \d+ were written'):
    prepare.prepare(str(tmp_path / 'data'))


@pytest.mark.parametrize('batch, fits', [(1024, True), (100000, False)])
def test_memory_estimate_from_the_model_shapes(batch, fits):
  from migrate import model  # pylint: disable=g-import-not-at-top
  check = lambda: resources.check_memory(model.forward_bytes(), batch,
                                         available=24 * 2**30)
  if fits:
    check()
  else:
    with pytest.raises(KitError, match=r'^--batch_size=100000 needs about '
                       r'\d+\.\d GiB of memory by the model\'s shapes, and '
                       r'24.0 GiB is available; use --batch_size=\d+ or less, '
                       'or pass --skip_resource_checks'):
      check()
