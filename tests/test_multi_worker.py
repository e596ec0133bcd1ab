"""Two real worker processes on 127.0.0.1 train together with
MultiWorkerMirroredStrategy and end with identical weights (on Keras 3, with
the custom loop; its fit refuses in one line, keras-team/keras#20585)."""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import REPO, last_line
from mnist_common import keras_compat


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(('127.0.0.1', 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


@pytest.mark.parametrize('loop', ['custom', 'fit'])
def test_two_workers_train_in_step(tmp_path, fake_data_dir, loop):
  workers = [f'127.0.0.1:{port}' for port in _free_ports(2)]
  processes = []
  for index in range(2):
    tf_config = {'cluster': {'worker': workers},
                 'task': {'type': 'worker', 'index': index}}
    env = dict(os.environ, PYTHONPATH=REPO, TF_CONFIG=json.dumps(tf_config))
    log = open(tmp_path / f'worker{index}.log', 'w')  # pylint: disable=consider-using-with
    processes.append((subprocess.Popen(
        [sys.executable, '-m', 'migrate', '--strategy=multi_worker',
         f'--loop={loop}', f'--data_dir={fake_data_dir.data_dir}',
         f'--model_dir={tmp_path / "model"}', '--batch_size=64',
         '--train_steps=12', '--steps_per_execution=4',
         '--checkpoint_steps=4', '--learning_rate=0.1', '--noenable_predict'],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log))
  try:
    codes = [p.wait(timeout=400) for p, _ in processes]
  finally:
    for process, log in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
      log.close()
  logs = [(tmp_path / f'worker{i}.log').read_text() for i in range(2)]
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
