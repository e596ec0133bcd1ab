"""`python -m migrate_jax` end to end, on the jax profile: the global batch
over several devices, exact resume, SIGTERM's save, the divergence guard,
an export that serves, bad input; and its batches directly."""
import ast
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from conftest import REPO, last_line, run_module
from jax import export as jax_export
from kit_core import exits
from kit_core.errors import KitError
from migrate_jax import checkpoints as checkpoints_lib
from migrate_jax import data as data_lib
from migrate_jax import export as export_lib

# Commands in subprocesses and training jobs: apart from the fast tier.
E2E = pytest.mark.e2e


def _common(data, model_dir, *extra):
  return (f'--data_dir={data.data_dir}', f'--model_dir={model_dir}',
          '--batch_size=32', '--learning_rate=0.1', '--steps_per_execution=5',
          '--checkpoint_steps=10', *extra)


def _fingerprint(stderr: str) -> str:
  return re.search(r'Weights fingerprint at step \d+: (\w+)', stderr).group(1)


def _step_losses(stderr: str) -> dict[int, float]:
  return {int(step): float(loss) for step, loss in re.findall(
      r'step (\d+)/\d+: loss ([\d.]+)', stderr)}


@E2E
def test_trains_on_two_devices_and_its_export_serves(tmp_path,
                                                     fake_data_dir):
  result = run_module('migrate_jax', *_common(
      fake_data_dir, tmp_path / 'model', '--num_cpu_devices=2',
      '--train_steps=20', '--num_predictions=4'))
  assert result.returncode == 0, result.stderr[-3000:]
  assert ('DataParallel over 2 CPU device(s): global batch 32, 16 per '
          'replica') in result.stderr
  assert re.search(r'Eval accuracy: [\d.]+ on 512 test images \(loss [\d.]+, '
                   r'step 20\)', result.stdout)
  printed = [int(c) for c in re.findall(r'Prediction is "(\d)"',
                                        result.stdout)]
  assert len(printed) == 4
  folder = re.search(r'Exported program: (\S+)', result.stdout).group(1)
  assert os.path.dirname(folder) == str(tmp_path / 'model' / 'export')
  from mnist_common import tfrecords  # pylint: disable=g-import-not-at-top
  images, _ = tfrecords.read_split(fake_data_dir.path('test'))
  served = export_lib.load(folder)(images[:4])
  # The export serves what the trained model predicted, with no model code.
  assert served['class_ids'].tolist() == printed
  np.testing.assert_allclose(served['probabilities'].sum(axis=1), 1,
                             rtol=1e-5)
  assert served['probabilities'].shape == (4, 10)
  assert served['class_ids'].tolist() == (
      served['probabilities'].argmax(axis=1).tolist())
  # Lowered for this CPU and for every accelerator: served on a GPU or TPU.
  with open(os.path.join(folder, export_lib.PROGRAM), 'rb') as f:
    program = jax_export.deserialize(bytearray(f.read()))
  assert program.platforms == ('cpu', 'cuda', 'rocm', 'tpu')
  with open(os.path.join(folder, export_lib.SIGNATURE), encoding='utf-8') as f:
    assert json.load(f)['platforms'] == list(program.platforms)


@E2E
def test_the_global_batch_is_split_over_the_devices(tmp_path, fake_data_dir):
  """1 and 2 devices take the same steps on the same global batches: the
  loss logged at each checkpoint agrees to rounding."""
  losses = []
  for devices in (1, 2):
    result = run_module('migrate_jax', *_common(
        fake_data_dir, tmp_path / str(devices), f'--num_cpu_devices={devices}',
        '--train_steps=20', '--eval_steps=0', '--noenable_predict'))
    assert result.returncode == 0, result.stderr[-3000:]
    losses.append(_step_losses(result.stderr))
  assert sorted(losses[0]) == [10, 20]
  for step, loss in losses[0].items():
    assert losses[1][step] == pytest.approx(loss, rel=1e-3)


@E2E
def test_a_resumed_run_ends_as_the_whole_run(tmp_path, fake_data_dir):
  args = ('--num_cpu_devices=2', '--eval_steps=0', '--noenable_predict')
  whole = run_module('migrate_jax', *_common(
      fake_data_dir, tmp_path / 'whole', *args, '--train_steps=40'))
  halves = [run_module('migrate_jax', *_common(
      fake_data_dir, tmp_path / 'halves', *args, f'--train_steps={steps}'))
            for steps in (20, 40)]
  for result in (whole, *halves):
    assert result.returncode == 0, result.stderr[-3000:]
  assert 'resuming at step 20 of 40' in halves[1].stderr
  # Weights, dropout's random state and the data's position all resumed.
  assert _fingerprint(halves[1].stderr) == _fingerprint(whole.stderr)
  assert sorted(os.listdir(tmp_path / 'halves')) == [
      'ckpt-10.npz', 'ckpt-20.npz', 'ckpt-30.npz', 'ckpt-40.npz', 'export']


@E2E
@pytest.mark.parametrize('signum, code', [(signal.SIGTERM, 143),
                                          (signal.SIGINT, 130)])
def test_a_signal_saves_and_stops_in_one_line(tmp_path, fake_data_dir,
                                              signum, code):
  model_dir = tmp_path / 'model'
  args = [sys.executable, '-m', 'migrate_jax', *_common(
      fake_data_dir, model_dir, '--train_steps=100000', '--eval_steps=0')]
  process = subprocess.Popen(args, cwd=REPO, env=dict(
      os.environ, PYTHONPATH=REPO), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 300
    while not os.path.exists(model_dir / 'ckpt-10.npz'):
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == code, stderr[-3000:]
  name = signal.Signals(signum).name
  match = re.fullmatch(rf'stopped: {name} received: checkpoint (\S+)/ckpt-'
                       r'(\d+)\.npz saved at step (\d+); run the same command '
                       'again to resume from it', last_line(stderr))
  assert match, last_line(stderr)
  assert match.group(1) == str(model_dir)
  assert match.group(2) == match.group(3) and int(match.group(2)) >= 10
  assert 'Traceback' not in stderr
  assert not os.path.exists(model_dir / 'export')
  resumed = run_module('migrate_jax', *_common(
      fake_data_dir, model_dir, f'--train_steps={int(match.group(2)) + 5}',
      '--eval_steps=0', '--noenable_predict'))
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f'resuming at step {match.group(2)}' in resumed.stderr


@E2E
def test_a_diverged_run_stops_before_saving_or_exporting(tmp_path,
                                                         fake_data_dir):
  model_dir = tmp_path / 'model'
  result = run_module('migrate_jax', *_common(
      fake_data_dir, model_dir, '--learning_rate=1e30', '--train_steps=20'))
  assert result.returncode == 1
  assert re.fullmatch(
      r'error: (the weights became non-finite \(.*\)( and )?)?(the training '
      r'loss became (nan|inf))? by step 5: training stopped, no checkpoint '
      r'was saved, nothing was exported; lower --learning_rate or check the '
      r'data', last_line(result.stderr)), last_line(result.stderr)
  assert os.listdir(model_dir) == []


@E2E
@pytest.mark.parametrize('args, message', [
    (('--checkpoint_steps=7',), r'--checkpoint_steps=7 is not a multiple of '
     r'--steps_per_execution=5'),
    (('--batch_size=33', '--num_cpu_devices=2'), r'--batch_size=33 is not '
     r'divisible by the number of devices=2'),
    (('--tpu=my-tpu',), r'--tpu, --tpu_zone and --gcp_project name a TPU '
     'node'),
    (('--use_tpu',), r'--use_tpu: JAX finds no TPU here \(its devices are '
     r'CPU\)'),
])
def test_bad_input_fails_in_one_line(tmp_path, fake_data_dir, args, message):
  result = run_module('migrate_jax', *_common(
      fake_data_dir, tmp_path / 'model', '--train_steps=10', *args))
  assert result.returncode == 1
  assert re.match(rf'error: {message}', last_line(result.stderr)), (
      last_line(result.stderr))
  assert not os.path.exists(tmp_path / 'model' / 'export')


@E2E
def test_a_checkpoint_of_another_model_is_refused(tmp_path, fake_data_dir):
  model_dir = tmp_path / 'model'
  model_dir.mkdir()
  np.savez(model_dir / 'ckpt-10.npz', **{'model/conv1/kernel': np.zeros(3)})
  result = run_module('migrate_jax', *_common(
      fake_data_dir, model_dir, '--train_steps=20'))
  assert result.returncode == 1
  assert re.match(r'error: checkpoint \S+ckpt-10\.npz is not this model\'s: '
                  r'it lacks ', last_line(result.stderr)), last_line(
                      result.stderr)


def test_batches_depend_on_the_step_alone():
  images = np.arange(10, dtype=np.float32).reshape(10, 1)
  labels = np.arange(10, dtype=np.int32)
  batches = data_lib.TrainingBatches(images, labels, batch_size=4, seed=3)
  first_pass = np.concatenate([batches.batch(s)[1] for s in range(5)])
  # Each pass is a permutation of the split; batches run across passes.
  assert sorted(first_pass[:10]) == list(range(10))
  assert sorted(first_pass[10:20]) == list(range(10))
  assert first_pass[:10].tolist() != first_pass[10:20].tolist()
  fresh = data_lib.TrainingBatches(images, labels, batch_size=4, seed=3)
  for step in (4, 2, 0):  # In any order, from a fresh reader: a resume.
    np.testing.assert_array_equal(fresh.batch(step)[1],
                                  first_pass[4 * step:4 * step + 4])
  other = data_lib.TrainingBatches(images, labels, batch_size=4, seed=4)
  assert other.batch(0)[1].tolist() != first_pass[:4].tolist()


def test_migrate_jax_imports_no_tensorflow():
  """The example on JAX stands on the jax profile, which has none."""
  folder = os.path.join(REPO, 'migrate_jax')
  for name in os.listdir(folder):
    if name.endswith('.py'):
      with open(os.path.join(folder, name), encoding='utf-8') as f:
        tree = ast.parse(f.read())
      imported = {alias.name.split('.')[0] for node in ast.walk(tree)
                  if isinstance(node, ast.Import) for alias in node.names}
      imported |= {node.module.split('.')[0] for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module}
      assert not imported & {'tensorflow', 'migrate', 'estimator_mnist'}, name


def _small_model():
  import keras  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  optimizer = keras.optimizers.SGD(0.1)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def _damaged_checkpoints(model_dir, arrays):
  """ckpt-1.npz whole, then one ckpt-2.npz per kind of damage: each must be
  refused in one line, nothing restored."""
  good = checkpoints_lib.save(str(model_dir), 1, arrays, keep=10)
  data = open(good, 'rb').read()
  flipped = bytearray(data)
  flipped[len(data) // 2] ^= 0x40
  kernel = 'model/' + next(k for k in arrays if 'kernel' in k)[6:]
  yield 'truncated', data[:len(data) // 2], 'is damaged or not an .npz'
  yield 'a bit flipped', bytes(flipped), 'is damaged'
  yield 'random bytes', os.urandom(len(data)), 'is damaged or not an .npz'
  for label, change, message in (
      ('NaN', lambda a: a.astype(np.float32) * np.nan,
       f'holds non-finite values (NaN or Inf) in {kernel}'),
      ('float64', lambda a: a.astype(np.float64),
       f'holds {kernel} as float64, the model\'s is float32'),
      ('int8', lambda a: a.astype(np.int8),
       f'holds {kernel} as int8, the model\'s is float32')):
    path = checkpoints_lib.save(str(model_dir), 3, {
        **arrays, kernel: change(arrays[kernel])}, keep=10)
    changed = open(path, 'rb').read()
    os.remove(path)
    yield label, changed, message


def test_a_damaged_or_foreign_checkpoint_is_refused_in_one_line(tmp_path):
  """Never a traceback, never a NaN checkpoint restored: each ends in one
  KitError that names the file and says what to do."""
  model, optimizer = _small_model()
  arrays = checkpoints_lib.state(model, optimizer)
  for label, data, message in list(_damaged_checkpoints(tmp_path, arrays)):
    (tmp_path / 'ckpt-2.npz').write_bytes(data)
    before = [np.array(v.value) for v in model.variables]
    with pytest.raises(KitError) as raised:
      checkpoints_lib.restore(str(tmp_path), model, optimizer)
    text = str(raised.value)
    assert message in text and 'ckpt-2.npz' in text, (label, text)
    assert text.endswith('remove it to resume from the one before, or use '
                         'another --model_dir'), (label, text)
    assert all(np.array_equal(b, np.array(v.value))
               for b, v in zip(before, model.variables)), label
  # The one before, whole, restores.
  os.remove(tmp_path / 'ckpt-2.npz')
  assert checkpoints_lib.restore(str(tmp_path), model, optimizer).endswith(
      'ckpt-1.npz')


def test_a_checkpoint_declaring_a_huge_array_or_a_fifo_is_refused(tmp_path):
  model, optimizer = _small_model()
  path = tmp_path / 'ckpt-4.npz'
  with zipfile.ZipFile(path, 'w') as archive:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_2_0(buffer, {
        'descr': '<f4', 'fortran_order': False, 'shape': (2**40,)})
    archive.writestr('model/dense/kernel.npy', buffer.getvalue())
  with pytest.raises(KitError, match='declares 4398046511104 bytes'):
    checkpoints_lib.restore(str(tmp_path), model, optimizer)
  path.unlink()
  os.mkfifo(tmp_path / 'ckpt-9.npz')
  with pytest.raises(KitError, match=r'ckpt-9.npz is not a regular file'):
    checkpoints_lib.restore(str(tmp_path), model, optimizer)


def test_a_checkpoint_the_disk_refuses_is_named_in_the_line(tmp_path,
                                                            monkeypatch):
  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, 'No space left on device')
  monkeypatch.setattr(np, 'savez', full)
  with pytest.raises(OSError) as raised:
    checkpoints_lib.save(str(tmp_path), 7, {'model/w': np.zeros(2)}, keep=3)
  line = exits.storage_error(raised.value)
  assert str(line).startswith(
      f'cannot write {tmp_path / "ckpt-7.npz"}: no space left on device;')
  assert os.listdir(tmp_path) == []
