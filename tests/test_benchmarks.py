"""benchmarks/throughput.py runs end to end (a few steps; no timing asserted)."""
import json
import os
import subprocess
import sys

from conftest import REPO, last_line

SCRIPT = os.path.join(REPO, 'benchmarks', 'throughput.py')


def _run(*args):
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO,
                        env={**os.environ, 'PYTHONPATH': REPO},
                        capture_output=True, text=True, timeout=600,
                        check=False)


def test_throughput_smoke_run_writes_table_and_json(tmp_path, fake_data_dir):
  report = tmp_path / 'throughput.json'
  result = _run(f'--data_dir={fake_data_dir.data_dir}', '--batch_size=32',
                '--window_steps=4', '--windows=2', '--steps_per_execution=2',
                '--matmul_size=128', f'--report={report}')
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  trainers = figures['trainers']
  assert [t['label'] for t in trainers.values()] == [
      'estimator (TPUEstimator, CPU)', 'fit, steps_per_execution=1',
      'fit, steps_per_execution=2', 'custom, 1 step per call',
      'custom, 2 steps per call', 'fit, 2 replicas, steps_per_execution=2',
      'custom, 2 replicas, 2 steps per call']
  for name, trainer in trainers.items():
    assert len(trainer['window_rates']) == 2, name
    assert trainer['examples_per_second'] > 0, name
    assert trainer['fraction_of_ceiling'] > 0, name
  assert trainers['estimator']['ratio_to_estimator'] == 1
  assert len(figures['input_pipelines']) == 2
  # 2 x (28*28*32*25 + 14*14*64*25*32 + 3136*128 + 128*10) forward; training
  # three times that, less the first layer's input gradient.
  assert figures['flops_per_example']['forward'] == 22_130_176
  assert figures['flops_per_example']['training'] == 3 * 22_130_176 - 1_254_400
  assert figures['machine']['tensorflow'] == '2.15.1'
  assert '| estimator (TPUEstimator, CPU) |' in result.stdout
  assert 'of matmul ceiling' in result.stdout


def test_window_not_a_multiple_of_the_execution_fails_in_one_line(
    tmp_path, fake_data_dir):
  report = tmp_path / 'throughput.json'
  result = _run(f'--data_dir={fake_data_dir.data_dir}', '--window_steps=5',
                '--steps_per_execution=2', f'--report={report}')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      'error: --window_steps=5 must be a multiple of --steps_per_execution=2')
  assert not report.exists()
