"""benchmarks/throughput_jax.py on the jax profile, and across_versions.py
putting it beside TPUEstimator on TF 2.15 (a few steps; no timing
asserted)."""
import json
import os
import subprocess
import sys

import jax as jax_lib
import pytest

from conftest import REPO, TF215_PYTHON

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

BENCHMARKS = os.path.join(REPO, 'benchmarks')
FEW = ('--batch_size=32', '--window_steps=4', '--windows=2',
       '--steps_per_execution=2', '--matmul_size=128')


def _run(script, *args):
  return subprocess.run([sys.executable, os.path.join(BENCHMARKS, script),
                         *args], cwd=REPO, capture_output=True, text=True,
                        timeout=900, check=False)


def test_the_jax_trainers_report_as_throughput_does(tmp_path, fake_data_dir):
  report = tmp_path / 'jax.json'
  result = _run('throughput_jax.py', f'--report={report}',
                f'--data_dir={fake_data_dir.data_dir}', '--num_cpu_devices=2',
                *FEW)
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  assert list(figures['trainers']) == ['jax_fit', 'jax_fit_bf16']
  assert figures['machine']['framework'].startswith('JAX ')
  assert figures['machine']['devices'] == 2
  for trainer in figures['trainers'].values():
    assert trainer['examples_per_second'] > 0
    assert len(trainer['window_rates']) == 2
    assert 0 < trainer['fraction_of_ceiling']
  assert set(figures['matmul_flops_per_second']) == {'float32', 'bfloat16'}


def test_a_tensorflow_trainer_is_refused_unless_skipped(tmp_path):
  result = _run('throughput_jax.py', '--trainers=estimator,jax_fit',
                f'--report={tmp_path}/r.json', *FEW)
  assert result.returncode == 1
  assert 'error: --trainers: estimator not run here' in result.stderr
  assert not os.path.exists(tmp_path / 'r.json')


@pytest.mark.tf215_python
def test_jax_beside_tpuestimator_in_one_table(tmp_path, fake_data_dir):
  report = tmp_path / 'across.json'
  result = _run('across_versions.py', f'--pythons={TF215_PYTHON},'
                f'{sys.executable}', f'--report={report}', '--',
                f'--data_dir={fake_data_dir.data_dir}', *FEW,
                '--trainers=estimator,custom_many,jax_fit,jax_fit_bf16')
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  legacy, jax = figures['runs']
  assert legacy['machine']['tensorflow'] == '2.15.1'
  assert list(legacy['trainers']) == ['estimator', 'custom_many']
  assert list(jax['trainers']) == ['jax_fit', 'jax_fit_bf16']
  rows = {row['trainer']: row for row in figures['rows']}
  baseline = legacy['trainers']['estimator']['examples_per_second']
  cell = rows['jax_fit']['cells'][1]
  assert cell['ratio_to_baseline'] == pytest.approx(
      jax['trainers']['jax_fit']['examples_per_second'] / baseline)
  assert rows['jax_fit']['cells'][0] is None
  assert result.stdout.splitlines()[0].startswith(
      '| trainer | TF 2.15.1 examples/s | vs TF 2.15.1 TPUEstimator |')
  assert f'| JAX {jax_lib.__version__} examples/s |' in result.stdout.splitlines()[0]
