"""benchmarks/throughput.py and kernels.py run end to end (a few steps; no
timing asserted), and the kernels the kit's trainers run are the fast ones,
on TF 2.15 and (without the TPUEstimator baseline) on the newest."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import CATALOGUE, HAS_ESTIMATOR, REPO, last_line

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

BENCHMARKS = os.path.join(REPO, 'benchmarks')


def _run(*args, script='throughput.py'):
  # oneDNN on, as TF 2.15 has it by default on x86 Linux: the kernel names
  # the tests look for are oneDNN's.
  return subprocess.run([sys.executable, os.path.join(BENCHMARKS, script),
                         *args], cwd=REPO,
                        env={**os.environ, 'PYTHONPATH': REPO,
                             'TF_ENABLE_ONEDNN_OPTS': '1'},
                        capture_output=True, text=True, timeout=600,
                        check=False)


@pytest.mark.estimator
@CATALOGUE
def test_throughput_smoke_run_writes_table_and_json(tmp_path, fake_data_dir):
  report = tmp_path / 'throughput.json'
  result = _run(f'--data_dir={fake_data_dir.data_dir}', '--batch_size=32',
                '--window_steps=4', '--windows=2', '--steps_per_execution=2',
                '--matmul_size=128', f'--report={report}')
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  trainers = figures['trainers']
  assert [t['label'] for t in trainers.values()] == [
      'estimator (TPUEstimator, CPU)',
      "estimator, with the kit's divergence guard (estimator_mnist)",
      'fit, steps_per_execution=1',
      'fit, steps_per_execution=2', 'custom, 1 step per call',
      'custom, 2 steps per call', 'fit, 2 replicas, steps_per_execution=2',
      'custom, 2 replicas, 2 steps per call',
      "fit, steps_per_execution=2, GradientTape (Keras's own train_step)",
      'custom, 2 steps per call, GradientTape',
      'fit, steps_per_execution=2, jit_compile',
      'custom, 2 steps per call, jit_compile',
      'fit, steps_per_execution=2, mixed_bfloat16',
      'custom, 2 steps per call, mixed_bfloat16']
  ceilings = figures['matmul_flops_per_second']
  assert set(ceilings) == {'float32', 'bfloat16'}
  per_example = figures['flops_per_example']['training']
  for name, trainer in trainers.items():
    assert len(trainer['window_rates']) == 2, name
    assert trainer['examples_per_second'] > 0, name
    # Each trainer is held to the ceiling of its own precision.
    dtype = 'bfloat16' if name.endswith('_bf16') else 'float32'
    assert trainer['precision'] == (
        'mixed_bfloat16' if dtype == 'bfloat16' else 'float32'), name
    assert trainer['fraction_of_ceiling'] == pytest.approx(
        trainer['examples_per_second'] * per_example / ceilings[dtype]), name
    # And to what its precision's kernels allow, each timed alone.
    alone = figures['kernels_alone'][trainer['precision']]
    assert trainer['fraction_of_kernels_alone'] == pytest.approx(
        trainer['examples_per_second'] / alone['examples_per_second']), name
  assert trainers['estimator']['ratio_to_estimator'] == 1
  cpu_flags = figures['machine']['cpu_flags']
  assert {'avx512f', 'avx512_bf16', 'amx_bf16'} <= set(cpu_flags)
  with open('/proc/cpuinfo') as f:
    has_avx2 = ' avx2' in f.read()
  assert cpu_flags['avx2'] is has_avx2
  assert len(figures['input_pipelines']) == 2
  # 2 x (28*28*32*25 + 14*14*64*25*32 + 3136*128 + 128*10) forward; training
  # three times that, less the first layer's input gradient.
  assert figures['flops_per_example']['forward'] == 22_130_176
  assert figures['flops_per_example']['training'] == 3 * 22_130_176 - 1_254_400
  assert figures['machine']['tensorflow'] == '2.15.1'
  assert '| estimator (TPUEstimator, CPU) |' in result.stdout
  assert 'of its ceiling | of its kernels alone |' in result.stdout
  assert "The model's kernels alone (benchmarks/ceilings.py)" in result.stdout
  assert 'GFLOP/s float32' in result.stdout
  assert 'GFLOP/s bfloat16' in result.stdout


def test_window_not_a_multiple_of_the_execution_fails_in_one_line(
    tmp_path, fake_data_dir):
  report = tmp_path / 'throughput.json'
  result = _run(f'--data_dir={fake_data_dir.data_dir}', '--window_steps=5',
                '--steps_per_execution=2', f'--report={report}')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      'error: --window_steps=5 must be a multiple of --steps_per_execution=2')
  assert not report.exists()


def test_ceilings_time_each_kernel_of_the_step_alone(tmp_path):
  report = tmp_path / 'ceilings.json'
  result = _run('--batch_size=8', '--matmul_size=64', '--repeats=2',
                f'--report={report}', script='ceilings.py')
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(report.read_text())
  assert list(figures['precisions']) == ['float32', 'mixed_bfloat16']
  for precision, dtype in (('float32', 'float32'),
                           ('mixed_bfloat16', 'bfloat16')):
    alone = figures['precisions'][precision]['kernels_alone']
    kernels = alone['kernels']
    # Forward, weight and input gradients of the 4 layers, less the first
    # layer's input gradient, as training_flops_per_example counts them.
    assert [(k['layer'], k['part']) for k in kernels] == [
        (layer, part) for layer in ('conv1', 'conv2', 'dense', 'logits')
        for part in ('forward', 'weight gradient', 'input gradient')
        if (layer, part) != ('conv1', 'input gradient')]
    # The logits stay float32 under mixed_bfloat16 (migrate/model.py).
    assert [k['dtype'] for k in kernels] == [dtype] * 8 + ['float32'] * 3
    assert alone['seconds_per_step'] == pytest.approx(
        sum(k['seconds'] for k in kernels))
    assert alone['examples_per_second'] == pytest.approx(
        8 / alone['seconds_per_step'])
    # Every kernel's FLOPs add up to the step's (3 x 22,130,176 - 1,254,400
    # per example).
    step_flops = sum(k['flops_per_second'] * k['seconds'] for k in kernels)
    assert step_flops == pytest.approx(8 * (3 * 22_130_176 - 1_254_400))
    assert alone['flops_per_second'] == pytest.approx(
        step_flops / alone['seconds_per_step'])
  assert '| conv2 | weight gradient | bfloat16 |' in result.stdout
  assert "mixed_bfloat16: the model's kernels alone take" in result.stdout


def _kernels(rows):
  return {(row['op'], row['kernel']) for row in rows}


def _in_layer(layer: str, op: str) -> bool:
  # Keras 3 names a layer's ops "conv1_1/..." when the model is built twice.
  return re.search(rf'/{layer}(_\d+)?/', op) is not None


@CATALOGUE
def test_kit_trainers_run_no_fused_filter_and_bias_gradient(tmp_path,
                                                           fake_data_dir):
  """The tape's gradients make oneDNN fuse each convolution's weight and bias
  gradients into a slower kernel; model_lib.gradients must not, in either
  trainer, on one replica or two, under Keras 2 or 3; and the first
  convolution's input gradient must not be computed at all."""
  report = tmp_path / 'kernels.json'
  fast = ['custom_many', 'fit_many', 'custom_2_replicas'] + (
      ['estimator'] if HAS_ESTIMATOR else [])
  result = _run(f'--data_dir={fake_data_dir.data_dir}', '--batch_size=32',
                '--steps=2', '--steps_per_execution=2', '--top=5',
                f'--trainers=custom_tape,fit_tape,{",".join(fast)}',
                f'--report={report}', script='kernels.py')
  assert result.returncode == 0, result.stderr[-3000:]
  assert '| ms/step | calls/step | kernel | op |' in result.stdout
  profiles = json.loads(report.read_text())
  fused = '_MklNativeConv2DBackpropFilterWithBias'
  for key in ('custom_tape', 'fit_tape'):
    # The check below can fail: the tape's graph does get the fused kernel.
    assert sum(kernel == fused for _, kernel in _kernels(profiles[key])) == 2
  for key in fast:
    kernels = _kernels(profiles[key])
    assert not [k for k in kernels if k[1] == fused], key
    filters = {op for op, kernel in kernels
               if kernel == '_MklNativeConv2DBackpropFilter'}
    for layer in ('conv1', 'conv2'):
      assert any(_in_layer(layer, op) for op in filters), (key, layer, filters)
    inputs = [op for op, _ in kernels if 'Conv2DBackpropInput' in op]
    assert any(_in_layer('conv2', op) for op in inputs), (key, inputs)
    assert not [op for op in inputs if _in_layer('conv1', op)], key
    for row in profiles[key]:
      assert row['calls_per_step'] > 0 and row['ms_per_step'] >= 0


def test_kernels_bad_trainer_fails_in_one_line(tmp_path):
  report = tmp_path / 'kernels.json'
  result = _run('--trainers=custom_many,nope', f'--report={report}',
                script='kernels.py')
  assert result.returncode == 1
  assert last_line(result.stderr).startswith(
      "error: --trainers: unknown ['nope']; known: [")
  assert not report.exists()


@pytest.mark.estimator
def test_scale_converts_verifies_and_times_the_scanner(tmp_path):
  # The smallest size and the test corpus: the table's rows, no timing.
  result = _run('--sizes=tiny', f'--work_dir={tmp_path}', '--scan_runs=1',
                '--compare_steps=1',
                f'--scan_tree={os.path.join(REPO, "tests", "legacy_sources")}',
                script='scale.py')
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert re.search(r'^tiny: 7,715 parameters, checkpoint 96\.\d kB, '
                   r'converted and verified in \d+ s', result.stdout, re.M)
  assert re.search(r'^\| tiny \(16, 2, 2, 8, 40\) \| 7,715 \|', result.stdout,
                   re.M), result.stdout
  peaks = {}
  for tool in ('migration-scan, text', 'migration-scan, SARIF',
               'tf_upgrade_v2 (its engine on each file, as --intree)'):
    found = re.search(rf'^\| {re.escape(tool)} \| [\d.]+ \| [\d,]+ \| '
                      r'([\d.]+) ([kMG])B \|$', result.stdout, re.M)
    assert found, result.stdout
    peaks[tool] = float(found[1]) * {'k': 1e3, 'M': 1e6, 'G': 1e9}[found[2]]
  # Each command's own peak: the scanner imports no TensorFlow (about 45 MB),
  # though this benchmark, which started it, has TensorFlow loaded.
  assert peaks['migration-scan, text'] < 200e6, peaks
  corpus = sum(n.endswith('.py') for _, _, names in os.walk(
      os.path.join(REPO, 'tests', 'legacy_sources')) for n in names)
  assert re.search(rf'^tf_upgrade_v2: {corpus} Python files: \d+ rewritten, ',
                   result.stdout, re.M), result.stdout
  assert (tmp_path / 'scan.sarif').exists()
  # The comparison, live and recording a bundle, over the legacy training,
  # what its measured bars and its coverage cost, and where its time went
  # (its four largest phases: which four depends on the machine's load).
  for mode, bundle in (('live', '-'), ('record', r'[\d.]+ kB')):
    assert re.search(rf'^\| tiny \| 1 \| {mode} \| \d+ s \| [\d.]+x \| '
                     rf'[\d.]+ [MG]B \| {bundle} \| \d+ s, \+\d+% \| '
                     r'\d+ s, \+\d+% \| (?:[^|,]+ \d+ s, ){3}[^|,]+ \d+ s \|$',
                     result.stdout, re.M), result.stdout
  assert (tmp_path / 'tiny' / 'compare-1' / 'bundle.npz').exists()
