"""The equivalence harness on the kit's pair, and on broken ports."""
import json
import os

import pytest

from conftest import REPO, last_line, run_module

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
  assert len(checks) == 17 and all(c['passed'] for c in checks.values())
  for name in ('trajectory (1 replica)', 'dropout (1 replica)'):
    assert checks[name]['bit_identical'], name
    assert len(checks[name]['port_losses']) == 20
  # Dropout really was on in one run and off in the other.
  assert (checks['dropout (1 replica)']['legacy_losses'][0] !=
          checks['trajectory (1 replica)']['legacy_losses'][0])
  assert checks['one_step (1 replica)']['max_abs_diff'] == 0
  for name in ('one_step (2 replicas)', 'one_step (4 replicas)',
               'stepwise (2 replicas)', 'stepwise (4 replicas)'):
    assert checks[name]['max_abs_diff'] <= 1e-6
  assert len(checks['stepwise (4 replicas)']['per_step_max_diff']) == 20
  evaluation = checks['evaluation']
  assert evaluation['legacy_accuracy'] == evaluation['port_accuracy'] > 0.1
  assert evaluation['examples'] == 512
  served = checks['served_predictions']
  assert served['images'] == 512 and served['different_classes'] == 0
  assert served['max_abs_diff'] <= 1e-6
  plot = (tmp_path / 'report.png').read_bytes()
  assert plot.startswith(b'\x89PNG') and len(plot) > 10000


# Each broken port must fail the check named for its bug. Ports that train
# correctly with dropout off must fail nothing else.
@pytest.mark.parametrize('port, failing, cause, only', [
    ('loss_averaged_per_replica', 'one_step (2 replicas)',
     r'2x the legacy ones: is the loss averaged per replica', False),
    ('global_batch_per_replica', 'one_step (2 replicas)', 'one step differs',
     False),
    ('lr_per_replica', 'learning_rate (2 replicas)',
     'not per replica, not per epoch', False),
    ('lr_per_epoch', 'learning_rate (1 replica)',
     'not per replica, not per epoch', False),
    ('pixels_zero_to_one', 'inputs', 'compare the pixel scaling', False),
    ('missing_relu', 'inference', 'a missing or misplaced ReLU', False),
    ('relu_on_logits', 'inference', 'a missing or misplaced ReLU', False),
    ('wrong_dropout_rate', 'dropout (1 replica)', 'compare the dropout rate',
     True),
    ('sparse_labels_as_one_hot', 'one_step (1 replica)', 'sparse vs one-hot',
     False),
    ('transposed_kernel', 'inference', 'a transposed or swapped kernel',
     False),
    ('mis_mapped_kernels', 'inventory', 'the port\'s variable map', True),
])
def test_broken_port_fails_the_check_named_for_its_bug(
    tmp_path, fake_data_dir, port, failing, cause, only):
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=3',
                            '--replicas=1,2', '--legacy_serving_input_fn=',
                            f'--port=broken_ports:{port}')
  assert result.returncode == 1, result.stderr[-2000:]
  assert not checks[failing]['passed']
  assert cause in checks[failing]['message'], checks[failing]['message']
  assert f'FAIL {failing}' in result.stdout
  if only:
    assert [n for n, c in checks.items() if not c['passed']] == [failing]


def test_mis_mapped_kernels_are_listed(tmp_path, fake_data_dir):
  _, checks = _compare(tmp_path, fake_data_dir, '--steps=1', '--replicas=1',
                       '--port=broken_ports:mis_mapped_kernels')
  assert checks['inventory']['wrong_shape'] == ['dense/kernel',
                                                'logits/kernel']


def test_bad_flags_fail_in_one_line(tmp_path, fake_data_dir):
  for args, message in [
      (('--replicas=2',), '--replicas must start with 1'),
      (('--port=no_such_module:Port',), 'cannot load no_such_module:Port'),
      (('--batch_size=63', '--replicas=1,2'), 'divisible'),
  ]:
    result, _ = _compare(tmp_path, fake_data_dir, *args)
    assert result.returncode == 1, args
    assert last_line(result.stderr).startswith('error: '), result.stderr[-500:]
    assert message in last_line(result.stderr), last_line(result.stderr)
    assert not (tmp_path / 'report.json').exists()
