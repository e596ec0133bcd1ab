"""migration-compare on the jax profile: ports on JAX checked from the golden
bundles TF 2.15 recorded (KIT_TF215_DIR), with no TensorFlow in the process:
of the kit's pair, its own Keras 3 port (the default --port there), a
plain-JAX port with optax and a deliberate bug; of the BERT-shaped pair, a
plain-JAX port and its six deliberate bugs, each failing as on TensorFlow."""
import json
import os

import pytest

from bert_bugs import BERT_BUGS
from conftest import TF215_DIR, catalogue, run_compare

pytestmark = [pytest.mark.e2e, pytest.mark.from_tf215]


def _bundle() -> str:
  return os.path.join(TF215_DIR, 'kit_pair.npz')


def _passed_but_dropout(checks: dict) -> None:
  for name, check in checks.items():
    if name.startswith('dropout'):
      assert check['status'] == 'skipped', check
      assert 'cannot be aligned with TF 1' in check['message']
    else:
      assert check['passed'], (name, check['message'])


def test_the_kits_jax_port_is_the_default_and_passes_every_check(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert 'Port: kit_pair.mnist_jax:make_port, on JAX 0.10.2, Keras 3.' in (
      result.stdout)
  assert {'inventory', 'optimizer', 'inputs', 'inference',
          'one_step (1 replica)', 'updates (2 replicas)',
          'stepwise (2 replicas)', 'evaluation', 'served_predictions',
          'tpu_ready', 'dropout (1 replica)'} <= set(checks)
  _passed_but_dropout(checks)
  report = json.loads((tmp_path / 'report.json').read_text())
  assert report['port_framework'].startswith('JAX 0.10.2')
  assert 'tensorflow' not in report  # None ran.


def test_a_plain_jax_port_with_optax_passes(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:make_port')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert 'on JAX 0.10.2, optax' in result.stdout
  # It gives no export and no input pipeline of its own.
  assert checks['inputs']['status'] == 'skipped'
  assert 'served_predictions' not in checks
  _passed_but_dropout({k: v for k, v in checks.items()
                       if not k.startswith('inputs')})


def test_a_loss_summed_over_the_batch_fails_one_step_with_its_factor(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:summed_loss')
  assert result.returncode == 1
  assert 'First to fix: one_step (1 replica)' in result.stdout
  assert '64x the legacy ones' in checks['one_step (1 replica)']['message']


def test_a_bundle_is_read_with_numpy_alone():
  code = ('import sys; from migration_tools.compare import golden; '
          f'bundle = golden.load({_bundle()!r}); '
          'print(len(bundle.tape), sorted(m for m in ("tensorflow", '
          '"jax", "keras") if m in sys.modules))')
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from conftest import REPO  # pylint: disable=g-import-not-at-top
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO, env={
      **os.environ, 'PYTHONPATH': REPO}, capture_output=True, text=True,
                          timeout=120, check=True)
  answers, frameworks = result.stdout.split(' ', 1)
  assert int(answers) > 100 and frameworks.strip() == '[]'


# The BERT-shaped pair: the bundle TF 2.15 recorded (6 steps, 1 and 2
# replicas, a warm start, its own optimizer, per-replica clipping), against
# the team's port in plain JAX (tests/user_code/bert_jax_port.py).
def test_the_bert_port_on_jax_passes_every_check(tmp_path):
  result, checks = run_compare(
      tmp_path / 'report.json', f'--bundle={TF215_DIR}/bert.npz',
      '--port=bert_jax_port:make_port')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert {'inputs (2 replicas)', 'updates (2 replicas)', 'served_predictions',
          'tpu_ready'} <= set(checks)
  _passed_but_dropout(checks)


@pytest.mark.parametrize('port, failing, cause', [
    bug if bug[0] == 'no_weight_decay' else catalogue(*bug)
    for bug in BERT_BUGS])
def test_each_bert_bug_fails_on_jax_as_on_tensorflow(port, failing, cause,
                                                     tmp_path):
  result, checks = run_compare(
      tmp_path / 'report.json', f'--bundle={TF215_DIR}/bert.npz',
      f'--port=bert_jax_port:{port}', '--replicas=1', '--notpu_ready')
  assert result.returncode == 1, result.stderr[-2000:]
  failed = [n for n, c in checks.items() if c['status'] in ('failed',
                                                            'error')]
  assert failed and failed[0] == failing, result.stdout
  assert cause in checks[failing]['message'], checks[failing]['message']
  assert f'First to fix: {failing}' in result.stdout
