"""Two real worker processes on 127.0.0.1 train together with
MultiWorkerMirroredStrategy and end with identical weights (on Keras 3, with
the custom loop; its fit refuses in one line, keras-team/keras#20585)."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import CATALOGUE, REPO, catalogue, last_line
from kit_core import keras_compat

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(('127.0.0.1', 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _start_workers(tmp_path, fake_data_dir, loop, train_steps, name='worker',
                   extra=()):
  """Two workers on free ports of 127.0.0.1; returns [(Popen, log path)]."""
  workers = [f'127.0.0.1:{port}' for port in _free_ports(2)]
  processes = []
  for index in range(2):
    tf_config = {'cluster': {'worker': workers},
                 'task': {'type': 'worker', 'index': index}}
    env = dict(os.environ, PYTHONPATH=REPO, TF_CONFIG=json.dumps(tf_config))
    path = tmp_path / f'{name}{index}.log'
    with open(path, 'w') as log:
      processes.append((subprocess.Popen(
          [sys.executable, '-m', 'migrate', '--strategy=multi_worker',
           f'--loop={loop}', f'--data_dir={fake_data_dir.data_dir}',
           f'--model_dir={tmp_path / "model"}', '--batch_size=64',
           f'--train_steps={train_steps}', '--steps_per_execution=4',
           '--checkpoint_steps=4', '--learning_rate=0.1',
           '--noenable_predict', *extra],
          cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), path))
  return processes


def _wait(processes, timeout=400):
  """Exit codes and logs of the workers; kills any still running."""
  try:
    codes = [p.wait(timeout=timeout) for p, _ in processes]
  finally:
    for process, _ in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  return codes, [path.read_text() for _, path in processes]


@pytest.mark.parametrize('loop', ['custom', catalogue('fit')])
def test_two_workers_train_in_step(tmp_path, fake_data_dir, loop):
  codes, logs = _wait(_start_workers(tmp_path, fake_data_dir, loop, 12))
  if loop == 'fit' and keras_compat.is_keras3():
    # keras-team/keras#20585: one line before training, nothing written.
    assert codes == [1, 1], logs[0][-3000:]
    for log in logs:
      assert last_line(log) == (
          'error: --loop=fit cannot train here: Keras 3\'s fit fails under '
          'MultiWorkerMirroredStrategy (keras-team/keras#20585); use '
          '--loop=custom, which trains the same model'), log[-3000:]
    assert not (tmp_path / 'model').exists()
    return
  assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
  for log in logs:
    assert ('MultiWorkerMirroredStrategy with 2 replicas; global batch 64 = 2 '
            'x 32 per replica') in log
  prints = [re.findall(r'Weights fingerprint at step (\d+): (\w+)', log)
            for log in logs]
  assert prints[0] == prints[1] == [('12', prints[0][0][1])]
  # Only the chief (worker 0) writes into model_dir.
  exports = os.listdir(tmp_path / 'model' / 'export')
  assert len(exports) == 1 and not exports[0].startswith('.tmp')
  assert 'SavedModel: ' in logs[0] and 'SavedModel: ' not in logs[1]


def test_jit_compile_on_two_cpu_workers_is_one_line(tmp_path, fake_data_dir):
  """XLA has no collectives on CPUs: both workers say so before training."""
  codes, logs = _wait(_start_workers(tmp_path, fake_data_dir, 'custom', 4,
                                     extra=('--jit_compile',)))
  assert codes == [1, 1], logs[0][-3000:] + logs[1][-3000:]
  for log in logs:
    assert last_line(log) == (
        'error: --jit_compile cannot compile a step of 2 replicas on CPUs '
        '(TensorFlow\'s XLA compiles for one CPU device and has no '
        'cross-replica sum there); use one replica (--num_cpu_devices=1, one '
        'worker) to run the step through XLA as a TPU core does, or drop '
        '--jit_compile'), log[-3000:]
  assert not (tmp_path / 'model').exists()


def _lone_worker(tmp_path, fake_data_dir, workers, *extra, tf_config=None):
  """Worker 0 of `workers` (or the task of tf_config), started alone."""
  tf_config = tf_config or {'cluster': {'worker': workers},
                            'task': {'type': 'worker', 'index': 0}}
  env = dict(os.environ, PYTHONPATH=REPO, TF_CONFIG=json.dumps(tf_config))
  return subprocess.run(
      [sys.executable, '-m', 'migrate', '--strategy=multi_worker',
       '--loop=custom', f'--data_dir={fake_data_dir.data_dir}',
       f'--model_dir={tmp_path / "model"}', '--batch_size=64',
       '--train_steps=4', '--steps_per_execution=2', '--checkpoint_steps=2',
       *extra],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
      check=False)


def test_a_worker_that_never_comes_ends_the_wait_in_one_line(tmp_path,
                                                             fake_data_dir):
  workers = [f'127.0.0.1:{port}' for port in _free_ports(2)]
  result = _lone_worker(tmp_path, fake_data_dir, workers,
                        '--worker_wait_seconds=3')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      f'error: worker 1 ({workers[1]}) did not come within 3 s '
      '(--worker_wait_seconds); start every task of TF_CONFIG, or check '
      'the addresses'), result.stderr[-2000:]
  assert not (tmp_path / 'model').exists()


HOST = '127.0.0.1'


@pytest.mark.parametrize('layout, task, message', [
    pytest.param({'chief': HOST, 'worker': HOST}, ('chief', 0),
                 r'worker 0 \(127.0.0.1:\d+\) did not come within 3 s',
                 id='chief, worker absent'),
    pytest.param({'chief': HOST, 'worker': HOST}, ('worker', 0),
                 r'chief 0 \(127.0.0.1:\d+\) did not come within 3 s',
                 id='worker, chief absent'),
    pytest.param({'worker': HOST, 'ps': HOST}, ('worker', 0),
                 r"TF_CONFIG names the job 'ps': MultiWorkerMirroredStrategy "
                 'trains on a chief and workers only', id='a ps job'),
    pytest.param({'worker': HOST, 'evaluator': HOST}, ('evaluator', 0),
                 r"TF_CONFIG names the job 'evaluator'", id='an evaluator'),
    pytest.param({'worker': HOST}, ('worker', '0'),
                 r"malformed TF_CONFIG: task.index must be a whole number, "
                 r"got '0' \(str\); write \"index\": 0", id='a string index'),
    pytest.param({'worker': 'nohost.invalid'}, ('worker', 0),
                 r"TF_CONFIG gives worker 0 the host 'nohost.invalid', which "
                 'does not resolve', id='an unresolvable host'),
])
def test_every_tf_config_trains_or_ends_in_one_line(tmp_path, fake_data_dir,
                                                    layout, task, message):
  """No layout hangs in TensorFlow's coordination service: each ends within
  --worker_wait_seconds, in one line."""
  ports = iter(_free_ports(len(layout)))
  cluster = {job: [f'{host}:{next(ports)}'] for job, host in layout.items()}
  tf_config = {'cluster': cluster, 'task': {'type': task[0], 'index': task[1]}}
  started = time.monotonic()
  result = _lone_worker(tmp_path, fake_data_dir, None,
                        '--worker_wait_seconds=3', tf_config=tf_config)
  assert result.returncode == 1, result.stderr[-2000:]
  assert re.search('^error: ' + message, last_line(result.stderr)), (
      result.stderr[-2000:])
  assert time.monotonic() - started < 60
  assert not (tmp_path / 'model').exists()


def test_sigterm_ends_the_wait_for_the_other_tasks_in_one_line(tmp_path,
                                                              fake_data_dir):
  workers = [f'127.0.0.1:{port}' for port in _free_ports(2)]
  tf_config = {'cluster': {'worker': workers},
               'task': {'type': 'worker', 'index': 0}}
  log = tmp_path / 'worker0.log'
  with open(log, 'w') as f:
    process = subprocess.Popen(
        [sys.executable, '-m', 'migrate', '--strategy=multi_worker',
         f'--data_dir={fake_data_dir.data_dir}',
         f'--model_dir={tmp_path / "model"}', '--worker_wait_seconds=300'],
        cwd=REPO, stderr=f, stdout=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=REPO, TF_CONFIG=json.dumps(tf_config)))
  try:
    deadline = time.monotonic() + 120
    while 'Waiting up to 300 s' not in log.read_text():
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143
  finally:
    process.kill()
  assert last_line(log.read_text()) == (
      'stopped: SIGTERM received: the wait for the other tasks of TF_CONFIG '
      'was stopped; nothing was trained')
  assert not (tmp_path / 'model').exists()


def test_a_port_in_use_is_one_line(tmp_path, fake_data_dir):
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    workers = [f'127.0.0.1:{port}', f'127.0.0.1:{_free_ports(1)[0]}']
    result = _lone_worker(tmp_path, fake_data_dir, workers)
  assert result.returncode == 1
  assert last_line(result.stderr).startswith(
      f'error: this worker (worker 0 in TF_CONFIG) cannot listen on '
      f'127.0.0.1:{port}: Address already in use; free the port'), (
          result.stderr[-2000:])
  assert not (tmp_path / 'model').exists()


@CATALOGUE
def test_sigterm_to_one_worker_saves_both_at_one_step_and_both_resume(
    tmp_path, fake_data_dir):
  processes = _start_workers(tmp_path, fake_data_dir, 'custom', 100000)
  deadline = time.monotonic() + 300
  chief_log = processes[0][1]
  while 'step 8/100000' not in chief_log.read_text():
    assert time.monotonic() < deadline and processes[0][0].poll() is None, (
        chief_log.read_text()[-3000:])
    time.sleep(0.5)
  # A preempted machine: only worker 1 is told.
  processes[1][0].send_signal(signal.SIGTERM)
  codes, logs = _wait(processes, timeout=300)
  assert codes == [143, 143], logs[0][-3000:] + logs[1][-3000:]
  stopped = re.search(r'stopped: SIGTERM received: checkpoint (\S+)/ckpt-(\d+) '
                      r'saved at step (\d+); run the same command again',
                      last_line(logs[0]))
  assert stopped, logs[0][-3000:]
  step = int(stopped.group(3))
  # Every execution saves here, so the step the workers agree on can be the
  # save the chief was seen to make (8), if worker 1 heard the signal before
  # its own check at that step.
  assert stopped.group(2) == str(step) and step >= 8
  # The worker keeps no checkpoint of its own, but saved at the same step.
  assert last_line(logs[1]) == (f'stopped: SIGTERM received: the chief '
                                f'worker saved the checkpoint at step {step}; '
                                'run the same command again to resume from it')
  codes, logs = _wait(_start_workers(tmp_path, fake_data_dir, 'custom',
                                     step + 8, name='resumed'))
  assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
  for log in logs:
    assert f'resuming at step {step} of {step + 8}' in log
  prints = [re.findall(r'Weights fingerprint at step (\d+): (\w+)', log)
            for log in logs]
  assert prints[0] == prints[1] == [(str(step + 8), prints[0][0][1])]
