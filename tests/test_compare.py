"""The equivalence harness on the kit's pair, and on broken ports."""
import json
import os

import pytest

from conftest import REPO, run_module

TESTS = os.path.dirname(os.path.abspath(__file__))


def _compare(tmp_path, fake_data_dir, *args):
  report = tmp_path / 'report.json'
  result = run_module(
      'migrate.compare', f'--data_dir={fake_data_dir.data_dir}',
      f'--report={report}', *args,
      env={'PYTHONPATH': f'{REPO}{os.pathsep}{TESTS}'})
  checks = {}
  if report.exists():
    checks = {c['name']: c for c in json.loads(report.read_text())['checks']}
  return result, checks


def test_kit_pair_passes_bit_identical_on_one_replica(tmp_path, fake_data_dir):
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=20',
                            '--replicas=1,2,4')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert all(c['passed'] for c in checks.values())
  assert checks['trajectory (1 replica)']['bit_identical']
  assert checks['one_step (1 replica)']['max_abs_diff'] == 0
  for name in ('one_step (2 replicas)', 'one_step (4 replicas)'):
    assert checks[name]['max_abs_diff'] <= 1e-6


@pytest.mark.parametrize('port, failing, cause', [
    ('loss_averaged_per_replica', 'one_step (2 replicas)',
     r'2x the legacy ones: is the loss averaged per replica'),
    ('global_batch_per_replica', 'one_step (2 replicas)', 'one step differs'),
    ('pixels_zero_to_one', 'inputs', 'compare the pixel scaling'),
    ('missing_relu', 'inference', 'a missing or misplaced ReLU'),
])
def test_broken_port_fails_the_check_named_for_its_bug(tmp_path, fake_data_dir,
                                                       port, failing, cause):
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=3',
                            '--replicas=1,2', f'--port=broken_ports:{port}')
  assert result.returncode == 1, result.stderr[-2000:]
  assert not checks[failing]['passed']
  assert cause in checks[failing]['message'], checks[failing]['message']
  assert f'FAIL {failing}' in result.stdout
