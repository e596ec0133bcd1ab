"""`python -m migrate` end to end: logs, kill and resume, bad input, boundary."""
import ast
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from conftest import REPO, last_line, run_module
from kit_core import checkpoint_files

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

FLAG_NAMES = ('tpu', 'tpu_zone', 'gcp_project', 'data_dir', 'data_source',
              'data_url', 'model_dir', 'batch_size', 'train_steps',
              'eval_steps', 'learning_rate', 'use_tpu', 'enable_predict',
              'num_predictions', 'seed', 'strategy', 'num_cpu_devices',
              'steps_per_execution', 'loop', 'checkpoint_steps', 'precision',
              'jit_compile')


def _common(fake_data_dir, model_dir, *extra):
  return (f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model_dir}',
          '--batch_size=64', '--learning_rate=0.1', '--steps_per_execution=5',
          *extra)


def test_custom_loop_on_two_cpu_replicas_logs_its_strategy(tmp_path,
                                                           fake_data_dir):
  result = run_module('migrate', *_common(
      fake_data_dir, tmp_path / 'model', '--loop=custom', '--num_cpu_devices=2',
      '--train_steps=20', '--checkpoint_steps=10'))
  assert result.returncode == 0, result.stderr[-3000:]
  assert ('Strategy: MirroredStrategy with 2 replicas; global batch 64 = 2 x '
          '32 per replica') in result.stderr
  assert re.search(r'step 20/20: loss [\d.]+, accuracy [\d.]+', result.stderr)
  assert re.search(r'Eval accuracy: [\d.]+ on 512 test images', result.stdout)
  assert len(re.findall(r'Prediction is "\d"', result.stdout)) == 10
  assert os.listdir(tmp_path / 'model' / 'train')  # TensorBoard events.


@pytest.mark.parametrize('loop', ['custom', 'fit'])
def test_jit_compile_trains_through_xla(tmp_path, fake_data_dir, loop):
  result = run_module('migrate', *_common(
      fake_data_dir, tmp_path / 'model', f'--loop={loop}', '--jit_compile',
      '--train_steps=10', '--checkpoint_steps=10', '--noenable_predict'))
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'loop={loop}, precision=float32, steps compiled with XLA' in (
      result.stderr)
  assert re.search(r'Eval accuracy: [\d.]+ on 512 test images', result.stdout)


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path, fake_data_dir):
  model_dir = tmp_path / 'model'
  args = [sys.executable, '-m', 'migrate', *_common(
      fake_data_dir, model_dir, '--loop=fit', '--train_steps=100000',
      '--checkpoint_steps=10')]
  env = dict(os.environ, PYTHONPATH=REPO)
  process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 300
    while tf.train.latest_checkpoint(str(model_dir)) is None:
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.5)
  finally:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
  # By its files: the kill may land between a checkpoint's files and the
  # state file naming it, and the restart resumes from the newest by files.
  killed_at = int(checkpoint_files.latest(str(model_dir)).rsplit('-', 1)[1])
  assert killed_at >= 10
  result = run_module('migrate', *_common(
      fake_data_dir, model_dir, '--loop=fit', f'--train_steps={killed_at + 10}',
      '--checkpoint_steps=10'))
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'resuming at step {killed_at} of {killed_at + 10}' in result.stderr
  assert f'step {killed_at + 10})' in result.stdout


def test_helpfull_documents_every_flag():
  result = run_module('migrate', '--helpfull')
  for name in FLAG_NAMES:
    block = re.search(rf'--(\[no\])?{name}:(.*)', result.stdout)
    assert block and block.group(2).strip(), f'--{name} is not documented'


# A line of TensorFlow's C++ logging, as TF 2.15 and TF 2.21 print them
# (absl's Python log lines name a .py file instead).
TF_CPP_LOG = re.compile(r'^(\d{4}-\d\d-\d\d \S+: [IWEF] |'
                        r'[IWEF]\d{4} \S+ +\d+ \S+\.(cc|h):\d+\])', re.M)


def _assert_clean_failure(result, message, model_dir=None):
  assert result.returncode != 0
  assert re.search(message, last_line(result.stderr)), result.stderr[-2000:]
  assert not TF_CPP_LOG.search(result.stderr), result.stderr[:2000]
  if model_dir:
    assert not os.path.exists(model_dir)


@pytest.mark.parametrize('args, message', [
    (('--num_cpu_devices=0',), r'^error: --num_cpu_devices=0: need at least 1'),
    (('--num_cpu_devices=3',), r'^error: --batch_size=64 is not divisible by '
     r'the number of replicas=3'),
    (('--strategy=tpu',), r'^error: no TPU found on this machine'),
    (('--use_tpu', '--strategy=mirrored'), r'^error: --use_tpu contradicts '
     r'--strategy=mirrored'),
    (('--strategy=multi_worker',), r'^error: --strategy=multi_worker needs '
     'TF_CONFIG'),
    (('--loop=fit', '--checkpoint_steps=7'), r'^error: --checkpoint_steps=7 '
     r'is not a multiple of --steps_per_execution=5: --loop=fit can save only '
     'between executions'),
])
def test_bad_input_fails_cleanly(tmp_path, fake_data_dir, args, message):
  model_dir = tmp_path / 'model'
  start = time.monotonic()
  result = run_module('migrate', *_common(fake_data_dir, model_dir, *args),
                      timeout=120)
  assert time.monotonic() - start < 60
  _assert_clean_failure(result, message, model_dir)


def test_tensorflow_start_up_logs_only_when_asked(tmp_path):
  quiet = run_module('migrate', '--train_steps=0')
  loud = run_module('migrate', '--train_steps=0', '-v', '1')
  assert quiet.returncode != 0 and loud.returncode != 0
  assert quiet.stderr == ('error: flag --train_steps=0: 0 is not an integer '
                          'in the range [1, 1000000000000]; see python -m '
                          'migrate --help\n'), quiet.stderr[:1000]
  assert TF_CPP_LOG.search(loud.stderr), loud.stderr[:1000]


@pytest.mark.parametrize('value', ['nan', 'inf'])
def test_non_finite_learning_rate_is_refused(tmp_path, fake_data_dir, value):
  model_dir = tmp_path / 'model'
  result = run_module('migrate', *_common(fake_data_dir, model_dir,
                                          f'--learning_rate={value}'))
  assert result.returncode != 0
  assert (f'flag --learning_rate={value}: must be a finite number' in
          result.stderr), result.stderr[-1000:]
  assert not os.path.exists(model_dir)


@pytest.mark.parametrize('tf_config, message', [
    ('{not json', r'malformed TF_CONFIG \(JSONDecodeError'),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}}', r"malformed TF_CONFIG "
     r"\(KeyError: 'task'\)"),
    ('{"cluster": {"worker": "127.0.0.1:1"}, "task": {"type": "worker", '
     '"index": 0}}', 'malformed TF_CONFIG: cluster.worker must be a non-empty '
     'list'),
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", '
     '"index": 3}}', r'malformed TF_CONFIG: task worker:3 is not in the '
     'cluster'),
])
def test_malformed_tf_config(tmp_path, fake_data_dir, tf_config, message):
  model_dir = tmp_path / 'model'
  result = run_module('migrate', *_common(fake_data_dir, model_dir,
                                          '--strategy=multi_worker'),
                      env={'TF_CONFIG': tf_config}, timeout=120)
  _assert_clean_failure(result, r'^error: ' + message, model_dir)


def test_empty_data_dir(tmp_path):
  (tmp_path / 'empty').mkdir()
  result = run_module('migrate', f'--data_dir={tmp_path / "empty"}',
                      f'--model_dir={tmp_path / "model"}')
  _assert_clean_failure(result, r'^error: --data_dir .*/empty holds no MNIST '
                        'data', tmp_path / 'model')


def test_migrate_imports_no_estimator_code():
  """Statically: no module of migrate (nor of the tools) imports the legacy
  stack or the tools; migration_tools/pair/legacy.py alone touches
  tf.compat.v1.estimator, to run a model_fn loaded by name."""
  for path in pathlib.Path(REPO, 'migrate').rglob('*.py'):
    assert 'migration_tools' not in path.read_text(), path
  for path in [*pathlib.Path(REPO, 'migrate').rglob('*.py'),
               *pathlib.Path(REPO, 'migration_tools').rglob('*.py')]:
    for node in ast.walk(ast.parse(path.read_text())):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import)
               else [node.module or ''] if isinstance(node, ast.ImportFrom)
               else [])
      for name in names:
        assert not name.startswith(('tensorflow_estimator', 'estimator_mnist')), (
            f'{path}:{node.lineno} imports {name}')
      if isinstance(node, ast.Attribute) and path.name != 'legacy.py':
        assert node.attr != 'estimator', f'{path}:{node.lineno} uses .estimator'


# Makes the legacy packages look deleted: found with no origin (as TensorFlow's
# own probe for tensorflow_estimator sees a missing package), and failing if
# anything imports them.
_BLOCKER = '''
import importlib.abc, importlib.machinery, sys
class Deleted(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  def find_spec(self, name, path=None, target=None):
    if name.split('.')[0] in ('tensorflow_estimator', 'estimator_mnist'):
      return importlib.machinery.ModuleSpec(name, self)
  def create_module(self, spec):
    raise ImportError(f'{spec.name} is deleted in this test')
  def exec_module(self, module):
    pass
sys.meta_path.insert(0, Deleted())
sys.argv = ['migrate'] + sys.argv[1:]
from migrate import main
main.run()
'''


def test_migrate_runs_with_the_legacy_half_deleted(tmp_path, fake_data_dir):
  """At run time: train and export with the Estimator made unimportable."""
  env = dict(os.environ, PYTHONPATH=REPO)
  result = subprocess.run(
      [sys.executable, '-c', _BLOCKER, *_common(
          fake_data_dir, tmp_path / 'model', '--train_steps=5')],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
      check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'SavedModel: ' in result.stdout
  assert 'is deleted in this test' not in result.stderr
