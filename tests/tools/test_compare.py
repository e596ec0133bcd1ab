"""The equivalence harness on the kit's pair, on broken ports, and on legacy
code written as TPU-era repositories wrote it."""
import json
import os

import jsonschema
import pytest

from conftest import FAIL_FAST, REPO, catalogue, last_line, recorded_once
from conftest import run_compare

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

with open(os.path.join(REPO, 'migration_tools', 'compare',
                       'report.schema.json'), encoding='utf-8') as _f:
  _SCHEMA = json.load(_f)


def _compare(tmp_path, fake_data_dir, *args):
  params = json.dumps({'learning_rate': 0.05,
                       'data_dir': fake_data_dir.data_dir})
  return run_compare(tmp_path / 'report.json', f'--params={params}', *args)


def test_kit_pair_passes_bit_identical_on_one_replica(tmp_path,
                                                      digits_data_dir):
  # Batch 32 on real digits, where the multi-replica runs once parted from a
  # whole-batch legacy reference within these steps (rounding, amplified).
  result, checks = _compare(tmp_path, digits_data_dir, '--steps=30',
                            '--batch_size=32', '--replicas=1,2,4')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert len(checks) == 27 and all(c["passed"] for c in checks.values())
  assert checks['trajectory (1 replica)']['bit_identical']
  assert len(checks['trajectory (1 replica)']['port_losses']) == 30
  assert checks['dropout (1 replica)']['max_abs_diff'] == 0
  # Dropout really was on in one run and off in the other.
  assert (checks['dropout (1 replica)']['legacy_losses'][0] !=
          checks['trajectory (1 replica)']['legacy_losses'][0])
  assert checks['one_step (1 replica)']['max_abs_diff'] == 0
  assert checks['optimizer']['legacy'] == checks['optimizer']['port'] == 'SGD()'
  for name in ('one_step (2 replicas)', 'one_step (4 replicas)',
               'stepwise (2 replicas)', 'stepwise (4 replicas)'):
    assert checks[name]['max_abs_diff'] <= 1e-6
  assert len(checks['stepwise (4 replicas)']['per_step_max_diff']) == 30
  # The legacy steps taken as on 2 and 4 TPU cores: the replicas' sums are
  # grouped alike, so the free runs keep bit-identical weights.
  for name in ('trajectory (2 replicas)', 'trajectory (4 replicas)'):
    assert checks[name]['judged_each_step']
    assert checks[name]['final_weights_diff'] == 0
  evaluation = checks['evaluation']
  assert evaluation['legacy']['accuracy'] == evaluation['port']['accuracy'] > 0.1
  assert evaluation['examples'] == 480  # 497 test images, whole batches of 32.
  served = checks['served_predictions']
  # Raw uint8 images drawn for the receiver (the data holds scaled floats).
  assert served['inputs'] == {'image': [480, 28, 28, 1]}
  assert served['max_diff_by_output']['class_ids'] == 0
  assert served['max_abs_diff'] <= 1e-6
  plot = (tmp_path / 'report.png').read_bytes()
  assert plot.startswith(b'\x89PNG') and len(plot) > 10000


@pytest.fixture(scope='session')
def broken_ports_bundle(tmp_path_factory, fake_data_dir):
  """The kit's pair at 3 steps on 1 and 2 replicas, recorded once a run."""
  params = json.dumps({'learning_rate': 0.05,
                       'data_dir': fake_data_dir.data_dir})
  return recorded_once(tmp_path_factory, 'kit_pair_3_steps',
                       f'--params={params}', '--steps=3', '--replicas=1,2',
                       '--legacy_serving_input_fn=', '--notpu_ready')[0]


# Each broken port must fail the check named for its bug. Ports that train
# correctly with dropout off must fail nothing else.
@pytest.mark.parametrize('port, failing, cause, only', [
    ('loss_averaged_per_replica', 'one_step (2 replicas)',
     'gradients are 2x the legacy ones (e.g. a loss averaged over each '
     'replica', False),
    catalogue('global_batch_per_replica', 'inputs (2 replicas)',
              'gives 128 examples per step where the legacy input_fn gives '
              '64', True),
    # Its schedule has no get_config: the optimizer is read by its
    # attributes, and only the rate differs.
    catalogue('lr_per_replica', 'learning_rate (2 replicas)',
              'not per replica, not per epoch', True),
    catalogue('lr_per_epoch', 'learning_rate (1 replica)',
              'not per replica, not per epoch', False),
    catalogue('pixels_zero_to_one', 'inputs',
              'legacy range [-0.5, 0.5], port range [0, 1]', False),
    catalogue('missing_relu', 'inference', 'before any training step', False),
    catalogue('relu_on_logits', 'inference', 'before any training step',
              False),
    catalogue('wrong_dropout_rate', 'dropout (1 replica)',
              'compare the dropout rate', True),
    catalogue('sparse_labels_as_one_hot', 'one_step (1 replica)',
              'sparse vs one-hot', False),
    ('transposed_kernel', 'inference', 'a kernel read in another layout',
     False),
    ('mis_mapped_kernels', 'inventory', 'of another shape: dense/kernel '
     '(legacy [', True),
])
def test_broken_port_fails_the_check_named_for_its_bug(
    tmp_path, broken_ports_bundle, port, failing, cause, only):
  # Against the legacy side recorded once (its live run: the correct port,
  # passing); --notpu_ready: these bugs are numeric, tpu_ready has tests of
  # its own.
  # Where only the first failure is asserted, the comparison ends there.
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={broken_ports_bundle}',
                               f'--port=broken_ports:{port}', '--notpu_ready',
                               *([] if only else [FAIL_FAST]))
  assert result.returncode == 1, result.stderr[-2000:]
  assert not checks[failing]['passed']
  assert cause in checks[failing]['message'], checks[failing]['message']
  assert f'FAIL {failing}' in result.stdout
  assert f'First to fix: {next(n for n, c in checks.items() if not c["passed"])}' in result.stdout
  if only:
    assert [n for n, c in checks.items()
            if c['status'] in ('failed', 'error')] == [failing]
  if port == 'mis_mapped_kernels':  # Each kernel of the wrong shape, listed.
    assert checks['inventory']['wrong_shape'] == ['dense/kernel',
                                                  'logits/kernel']


def test_a_plain_comparison_prints_the_kits_lines_and_logs_the_rest(
    tmp_path, fake_data_dir):
  # TensorFlow's own notices about the legacy code (96 lines here on TF
  # 2.15) go to a log beside the report; the kit's lines stand alone.
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=1',
                            '--replicas=1')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  lines = (result.stdout + result.stderr).splitlines()
  assert len(lines) <= 30, '\n'.join(lines)
  assert sum(line.startswith('PASS ') for line in lines) == len(checks)
  assert not [line for line in lines if 'tensorflow' in line.lower() and
              'deprecated' in line]
  assert 'is deprecated' in (tmp_path / 'report.log').read_text()
  # XLA's native lines on its first compile (tpu_ready) are held back too.
  assert not [line for line in lines if 'absl::InitializeLog' in line or
              'Compiled cluster' in line], '\n'.join(lines)
  # The report holds to its documented, versioned schema.
  report = json.loads((tmp_path / 'report.json').read_text())
  jsonschema.validate(report, _SCHEMA)
  assert report['schema_version'] == 3 and report['passed']
  assert report['verdict'] == 'pass' and result.returncode == 0
  assert result.stdout.splitlines()[-2] == 'Verdict: pass (exit code 0)'


def test_a_port_that_cannot_load_still_gets_its_report(tmp_path,
                                                       fake_data_dir):
  result, _ = _compare(tmp_path, fake_data_dir, '--steps=1', '--replicas=1',
                       '--port=no_such_port:make_port')
  assert result.returncode == 1
  assert last_line(result.stderr).startswith(
      'error: --port: cannot import no_such_port')
  _assert_error_report(tmp_path, result)
  report = json.loads((tmp_path / 'report.json').read_text())
  assert report['port'] == 'no_such_port:make_port'


def test_bad_flags_fail_in_one_line(tmp_path, fake_data_dir):
  for args, message in [
      (('--replicas=2',), '--replicas must start with 1'),
      (('--port=no_such_module:Port',), '--port: cannot import no_such_module'),
      (('--port=broken_ports:not_a_port',), 'returned a dict, not a '
       'migration_tools.pair.port.Port'),
      (('--batch_size=63', '--replicas=1,2'), 'divisible'),
  ]:
    result, _ = _compare(tmp_path, fake_data_dir, *args)
    assert result.returncode == 1, args
    assert last_line(result.stderr).startswith('error: '), result.stderr[-500:]
    assert message in last_line(result.stderr), last_line(result.stderr)
    _assert_error_report(tmp_path, result)


def test_fail_fast_is_refused_with_a_recording_in_one_line(tmp_path,
                                                           fake_data_dir):
  # A bundle keeps every check's answers: a recording runs them all.
  bundle = tmp_path / 'bundle.npz'
  result, _ = _compare(tmp_path, fake_data_dir, FAIL_FAST,
                       f'--record_bundle={bundle}')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      'error: --fail_fast with --record_bundle: a bundle keeps every '
      'check\'s answers, so its recording runs them all; leave --fail_fast '
      'out'), result.stderr[-500:]
  assert not bundle.exists() and not (tmp_path / 'report.json').exists()


def test_legacy_module_with_the_common_absl_flags_compares(tmp_path,
                                                          fake_data_dir):
  """Its flags (data_dir, batch_size, ...) clash with none of the harness's;
  its model_fn reads FLAGS.use_tpu, set through --legacy_flags."""
  result, checks = _compare(
      tmp_path, fake_data_dir, '--steps=3', '--replicas=1,2',
      '--legacy_model_fn=flagged_legacy:model_fn',
      '--legacy_input_fn=flagged_legacy:eval_input_fn',
      '--legacy_serving_input_fn=flagged_legacy:serving_input_receiver_fn',
      '--legacy_flags=--nouse_tpu --data_dir=/not/read')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert len(checks) == 21
  assert [n for n, c in checks.items() if not c['passed']] == []


def test_bad_legacy_flags_fail_in_one_line(tmp_path, fake_data_dir):
  result, _ = _compare(tmp_path, fake_data_dir,
                       '--legacy_model_fn=flagged_legacy:model_fn',
                       '--legacy_flags=--no_such_flag=1')
  assert result.returncode == 1
  assert last_line(result.stderr).startswith('error: --legacy_flags: '), (
      result.stderr[-1000:])
  _assert_error_report(tmp_path, result)


def _assert_error_report(tmp_path, result):
  """The report --report asked for: the error's line, no checks, not
  passed, to its schema."""
  report = json.loads((tmp_path / 'report.json').read_text())
  jsonschema.validate(report, _SCHEMA)
  assert report['passed'] is False and report['checks'] == []
  assert report['error'] == last_line(result.stderr).removeprefix('error: ')


def test_a_check_that_raises_fails_alone_and_the_report_lists_all(
    tmp_path, fake_data_dir):
  result, checks = _compare(
      tmp_path, fake_data_dir, '--steps=3', '--replicas=1,2',
      '--port=broken_ports:raises_in_evaluation',
      '--legacy_serving_input_fn=broken_ports:serving_fn_returning_dict')
  assert result.returncode == 1, result.stderr[-2000:]
  assert len(checks) == 21
  evaluation = checks['evaluation']
  assert evaluation['status'] == 'error'
  # The cause, and where in the user's code it was raised.
  assert evaluation['message'].startswith(
      'RuntimeError: eval_steps broke on purpose (at ')
  assert 'broken_ports.py:' in evaluation['message']
  assert checks['served_predictions']['status'] == 'error'
  assert checks['served_predictions']['message']
  assert [n for n, c in checks.items() if not c['passed']] == [
      'evaluation', 'served_predictions']
  assert 'ERROR evaluation: RuntimeError: eval_steps broke on purpose' in (
      result.stdout)
  assert (tmp_path / 'report.png').read_bytes().startswith(b'\x89PNG')


def test_a_port_with_keras_default_layer_names_gets_one_line(tmp_path,
                                                            fake_data_dir):
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=2',
                            '--replicas=1',
                            '--port=broken_ports:auto_named_layers')
  assert result.returncode == 1, result.stderr[-2000:]
  inventory = checks['inventory']
  assert inventory['status'] == 'error'
  assert ("which the port's model does not have (it has conv2d/kernel" in
          inventory['message'])
  assert 'give each Keras layer a fixed name' in inventory['message']
  # Every planned check; host_call, device_drift and clipping among them,
  # as whether they apply is known only when their turn comes.
  assert len(checks) == 18 and {'host_call', 'device_drift',
                                'clipping (1 replica)'} <= set(checks)
  assert {c['status'] for n, c in checks.items() if n != 'inventory'} == {
      'not run'}


def test_speed_times_the_port_against_its_model_fn(tmp_path, fake_data_dir):
  """A correct port: its rate, the legacy one and the kernel table, on each
  replica count. A port that does four times the work: the same numbers in
  every check, and its speed is for review, with the exit still 0."""
  result, checks = _compare(tmp_path, fake_data_dir, '--steps=2',
                            '--replicas=1,2', '--eval_batches=2', '--speed',
                            '--speed_windows=2')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  for label in ('1 replica', '2 replicas'):
    speed = checks[f'speed ({label})']
    assert speed['status'] in ('passed', 'review'), speed
    assert len(speed['port']['window_rates']) == 2
    assert speed['legacy']['examples_per_s'] > 0 and speed['ratio'] > 0
    # The convolutions' kernels run on both sides.
    assert any('Conv2D' in row['kernel'] for row in speed['kernels'])
  slow, checks = _compare(tmp_path, fake_data_dir, '--steps=2',
                          '--replicas=1', '--eval_batches=2', '--speed',
                          '--speed_windows=2',
                          '--port=broken_ports:four_times_the_work')
  assert slow.returncode == 0, slow.stdout + slow.stderr[-2000:]
  speed = checks['speed (1 replica)']
  assert speed['status'] == 'review' and speed['ratio'] < 0.9, speed
  assert 'REVIEW speed (1 replica): the port trains at' in slow.stdout
  assert [n for n, c in checks.items() if c['status'] not in (
      'passed', 'review')] == []
