"""benchmarks/across_versions.py: the trainers under two TensorFlows, one
table (a few steps; no timing asserted)."""
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import HAS_ESTIMATOR, REPO, TF215_PYTHON, last_line

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

SCRIPT = os.path.join(REPO, 'benchmarks', 'across_versions.py')
THROUGHPUT = os.path.join(REPO, 'benchmarks', 'throughput.py')


def _run(*args):
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO,
                        capture_output=True, text=True, timeout=900,
                        check=False)


@pytest.mark.tf215_python
def test_two_tensorflows_in_one_table(tmp_path, fake_data_dir):
  report = tmp_path / 'across.json'
  result = _run(f'--pythons={TF215_PYTHON},{sys.executable}',
                f'--report={report}', '--', f'--data_dir={fake_data_dir.data_dir}',
                '--batch_size=32', '--window_steps=4', '--windows=2',
                '--steps_per_execution=2', '--matmul_size=128',
                '--trainers=estimator,fit_1,custom_many,custom_bf16')
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  legacy, this = figures['runs']
  assert legacy['machine']['tensorflow'] == '2.15.1'
  assert this['machine']['tensorflow'] == tf.__version__
  # Each run in its own process, one after the other, progress on stderr.
  assert result.stderr.index('[1/2]') < result.stderr.index('[2/2]')
  rows = {row['trainer']: row for row in figures['rows']}
  assert list(rows) == ['estimator', 'fit_1', 'custom_many', 'custom_bf16']
  baseline = legacy['trainers']['estimator']['examples_per_second']
  has_estimator = 'estimator' in this['trainers']
  assert (rows['estimator']['cells'][1] is not None) is has_estimator
  for key in ('fit_1', 'custom_many', 'custom_bf16'):
    first, second = rows[key]['cells']
    rate = this['trainers'][key]['examples_per_second']
    assert second['examples_per_second'] == rate
    assert second['ratio_to_baseline'] == pytest.approx(rate / baseline)
    assert second['ratio_to_first'] == pytest.approx(
        rate / first['examples_per_second'])
  bf16 = this['trainers']['custom_bf16']
  assert bf16['precision'] == 'mixed_bfloat16'
  assert rows['custom_bf16']['cells'][1]['fraction_of_ceiling'] == (
      bf16['fraction_of_ceiling'])
  assert rows['custom_bf16']['cells'][1]['fraction_of_kernels_alone'] == (
      bf16['fraction_of_kernels_alone'])
  header = result.stdout.splitlines()[0]
  assert header.startswith('| trainer | TF 2.15.1 examples/s | vs TF 2.15.1 '
                           'TPUEstimator | of its ceiling | of its kernels '
                           'alone |')
  if not has_estimator:
    estimator = next(line for line in result.stdout.splitlines()
                     if line.startswith('| estimator (TPUEstimator, CPU) |'))
    assert estimator.endswith('| not run | - | - | - | - |'), estimator
  assert "the model's kernels alone" in result.stdout
  assert 'ceilings' in result.stdout and 'GFLOP/s bfloat16' in result.stdout


def test_a_missing_python_is_one_line_and_writes_nothing(tmp_path):
  report = tmp_path / 'across.json'
  result = _run(f'--pythons={tmp_path}/nope/bin/python', f'--report={report}')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      f'error: --pythons: {tmp_path}/nope/bin/python is not an executable '
      'Python; create that install profile (README, "Set-up") or name '
      'another with --pythons')
  assert not report.exists()


def test_a_failing_run_is_one_line_and_writes_nothing(tmp_path):
  report = tmp_path / 'across.json'
  result = _run(f'--pythons={sys.executable}', f'--report={report}', '--',
                '--window_steps=5', '--steps_per_execution=2')
  assert result.returncode == 1
  assert ('error: --window_steps=5 must be a multiple of '
          '--steps_per_execution=2') in result.stderr
  assert last_line(result.stderr) == (
      f'error: benchmarks/throughput.py under {sys.executable} exited with 1 '
      '(its output is above); nothing was written')
  assert not report.exists()


@pytest.mark.skipif(HAS_ESTIMATOR, reason='this TensorFlow has tf.estimator: '
                    'its TPUEstimator baseline runs')
@pytest.mark.parametrize('extra, message', [
    ([], 'error: --trainers: estimator needs tf.estimator, which TensorFlow '
         '{version} does not have; run it on TF 2.15 (the estimator profile)'),
    (['--skip_unavailable'],
     'error: --trainers: none of them runs on TensorFlow {version}'),
])
def test_the_baseline_without_tf_estimator_is_one_line(
    tmp_path, fake_data_dir, extra, message):
  report = tmp_path / 'throughput.json'
  result = subprocess.run(
      [sys.executable, THROUGHPUT, '--trainers=estimator', *extra,
       f'--data_dir={fake_data_dir.data_dir}', f'--report={report}'], cwd=REPO, env={**os.environ, 'PYTHONPATH': REPO},
      capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 1
  assert last_line(result.stderr) == message.format(version=tf.__version__)
  assert not report.exists()
