"""migration-compare on the jax profile: ports on JAX checked from golden
bundles TF 2.15 recorded, with no TensorFlow in the process: of the kit's
pair (its own bundle, kit_pair/golden_bundle.npz, the default there), its own
Keras 3 port (the default --port there), a plain-JAX port with optax and a
deliberate bug; of the BERT-shaped pair (KIT_TF215_DIR), a plain-JAX port and
its seven deliberate bugs, each failing as on TensorFlow; of the ALBERT-style
pair, a plain-JAX port with the classifier's dropout and its two dropout
bugs."""
import json
import os
import subprocess
import sys

import jax
import pytest

import kit_bundle
from bert_bugs import BERT_BUGS
from conftest import REPO, TF215_DIR, TOOLS_PYTHONPATH, catalogue, run_compare
from conftest import FAIL_FAST, failed_first

pytestmark = pytest.mark.e2e
from_tf215 = pytest.mark.from_tf215


def _bundle() -> str:
  return kit_bundle.BUNDLE


def _passed_but_dropout(checks: dict) -> None:
  """Every check passed, dropout too: the port made with its dropout on,
  each of its bernoulli draws given the legacy step's mask."""
  for name, check in checks.items():
    assert check['passed'], (name, check['message'])
  assert checks['dropout (1 replica)']['masks'] == (
      "the legacy step's, handed to the port's dropout calls")


def test_the_kits_jax_port_is_the_default_and_passes_every_check(tmp_path):
  # As a new user runs it: no flag names the bundle or the port; both are
  # the kit's own on this profile.
  result, checks = run_compare(tmp_path / 'report.json')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert (f'Bundle: {kit_bundle.BUNDLE} (the kit\'s own pair: no --bundle '
          'was given') in result.stdout
  assert (f'Port: kit_pair.mnist_jax:make_port, on JAX {jax.__version__}, '
          'Keras 3.') in result.stdout
  # Where it ran, in one line and in the report: the CPU, split into the
  # bundle's largest replica count, the precision read from the compiled step.
  assert ('Ran on: cpu (cpu), 2 devices; jax ' f'{jax.__version__}, jaxlib '
          ) in result.stdout
  assert ('matmul float32, convolution float32 (the lowered HLO of the '
          "port's programs)") in result.stdout
  # float32 on the CPU: nothing drifts, and the check is left out.
  assert 'device_drift' not in checks
  assert {'inventory', 'optimizer', 'inputs', 'inference',
          'one_step (1 replica)', 'updates (2 replicas)',
          'stepwise (2 replicas)', 'evaluation', 'served_predictions',
          'tpu_ready', 'dropout (1 replica)'} <= set(checks)
  _passed_but_dropout(checks)
  report = json.loads((tmp_path / 'report.json').read_text())
  assert report['port_framework'].startswith(f'JAX {jax.__version__}')
  assert 'tensorflow' not in report  # None ran.
  ran_on = report['port_ran_on']
  assert (ran_on['platform'], ran_on['devices']) == ('cpu', 2)
  assert ran_on['replicas'] == {'1 replica': 'cpu (cpu) x1',
                                '2 replicas': 'cpu (cpu) x2'}
  assert ran_on['versions']['jax'] == jax.__version__
  assert ran_on['precision'] == {'matmul': 'float32',
                                 'convolution': 'float32'}
  assert report['replicas_skipped'] == {}


# What a machine with one accelerator does with a bundle of 1 and 2
# replicas: JAX's default backend made to show one device, the host CPU two.
_ONE_DEFAULT_DEVICE = '''
import jax
everything = jax.devices
jax.devices = lambda backend=None: (everything(backend) if backend else
                                    everything()[:1])
from migration_tools.compare import command
command.run()
'''


def test_replicas_beyond_the_default_devices_run_on_host_cpus(tmp_path):
  report = tmp_path / 'report.json'
  result = subprocess.run(
      [sys.executable, '-c', _ONE_DEFAULT_DEVICE, f'--bundle={_bundle()}',
       f'--report={report}', '--notpu_ready'], cwd=REPO,
      env={**os.environ, 'PYTHONPATH': TOOLS_PYTHONPATH,
           'XLA_FLAGS': '--xla_force_host_platform_device_count=2'},
      capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  notes = [line for line in result.stdout.splitlines()
           if 'host CPU devices' in line]
  assert notes == ["2 replicas: JAX's cpu has 1 device: run on 2 host CPU "
                   'devices']
  assert 'ERROR' not in result.stdout
  checks = {c['name']: c for c in json.loads(report.read_text())['checks']}
  _passed_but_dropout(checks)
  assert 'updates (2 replicas)' in checks


# On a device emulated (--emulate_precision): the port's math is checked at
# the highest precision, its outputs as deployed against those.
def test_a_plain_jax_port_with_optax_passes_on_an_emulated_gpu(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:make_port',
                               '--emulate_precision=tf32')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert f'on JAX {jax.__version__}, optax' in result.stdout
  assert ('as deployed, its dots\' operands rounded to tf32 (emulated)'
          in result.stdout)
  # It gives no export and no input pipeline of its own.
  assert checks['inputs']['status'] == 'skipped'
  assert 'served_predictions' not in checks
  _passed_but_dropout({k: v for k, v in checks.items()
                       if not k.startswith('inputs')})
  drift = checks['device_drift']
  assert drift['rounding'] == 'tf32' and drift['ratio_to_bar'] < 1
  report = json.loads((tmp_path / 'report.json').read_text())
  assert report['port_ran_on']['emulated'] == 'tf32'
  assert report['port'] == 'mnist_optax_port:make_port'
  # The port's own rounding noise, measured and shown with its multiple.
  noise = checks['one_step (2 replicas)']['noise']
  assert noise['multiple'] == 4 and 0 < noise['largest']['gradients'] < 1e-6


def test_the_kits_jax_port_passes_on_an_emulated_tpu(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}', '--replicas=1',
                               '--notpu_ready', '--emulate_precision=bf16')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert checks['device_drift']['rounding'] == 'bf16'
  # Its probabilities drift at bfloat16 about as its kernels rounded to it
  # move them (measured 0.24x the bar, 4x that movement).
  assert 0.05 < checks['device_drift']['ratio_to_bar'] < 0.5
  _passed_but_dropout(checks)


def test_a_loss_summed_over_the_batch_fails_one_step_with_its_factor(tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:summed_loss',
                               '--emulate_precision=bf16')
  assert result.returncode == 1
  assert 'First to fix: one_step (1 replica)' in result.stdout
  assert '64x the legacy ones' in checks['one_step (1 replica)']['message']
  assert checks['device_drift']['passed']


# Each hidden from every other check, which build the port with its
# dropout off: the dropout check builds it on, hands its bernoulli draws the
# legacy step's masks, and reads its draws at inference.
@pytest.mark.parametrize('port, said', [
    ('dropout_at_inference', "the port's predict draws dropout (at "
     'mnist_optax_port.py:'),
    ('dropout_left_out', "the port's step made 0 dropout calls where the "
     'legacy step drew 1 mask; none took dropout/'),
    # A draw that takes no mask is named where it is, with what to do.
    ('dropout_by_uniform', 'the step also drew with jax.random.uniform at '
     'mnist_optax_port.py:'),
])
def test_a_dropout_bug_of_a_jax_port_fails_dropout_naming_it(tmp_path, port,
                                                             said):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               f'--port=mnist_optax_port:{port}',
                               '--replicas=1', '--notpu_ready')
  failed_first(result, checks, 'dropout (1 replica)', said)


# Bugs behind a port that differs from itself (weights jittered at every
# other step; a predict on jittered weights): named, and no bar widened.
@pytest.mark.parametrize('port, first, said', [
    ('weight_decay_behind_a_jitter', 'one_step (1 replica)',
     "in the port's step, taken twice from the same state"),
    ('logits_scaled_behind_a_jitter', 'inference',
     "in the port's outputs, asked twice at the same weights"),
])
def test_a_jax_port_cannot_widen_its_own_bars(tmp_path, port, first, said):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               f'--port=mnist_optax_port:{port}',
                               '--replicas=1', '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, first, 'the port is not deterministic: '
               + said)


def test_a_jax_step_that_draws_anew_is_named_by_one_step(tmp_path):
  # Noise drawn whatever the dropout flag asks: a step the kit cannot take
  # at identical state, named rather than failed under one_step's hint.
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:noise_always_on',
                               '--replicas=1', '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, 'one_step (1 replica)', 'cannot put at their '
               'expectation: jax.random.normal at mnist_optax_port.py:')
  assert checks['one_step (1 replica)']['port_draws']['left']


@pytest.mark.catalogue
def test_a_predict_nan_every_other_call_is_named_and_widens_no_bar(tmp_path):
  # Behind it, a softmax of the logits x 1.01 that fails inference alone:
  # the NaN of the forward noise's second call once made its bar infinite.
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:nan_every_other_predict',
                               '--replicas=1', '--notpu_ready')
  failed_first(result, checks, 'inference',
               'the port is not deterministic: probabilities holds NaN')


def test_a_port_that_amplifies_its_devices_rounding_fails_device_drift(
    tmp_path):
  # Right in its math (every other check passes at the highest precision),
  # its first convolution a difference of large terms.
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=mnist_optax_port:offset_input',
                               '--emulate_precision=bf16', '--replicas=1',
                               '--notpu_ready')
  failed_first(result, checks, 'device_drift',
               'amplifies its device\'s rounding')
  assert checks['inference']['passed'] and checks['one_step (1 replica)'][
      'passed']
  assert checks['device_drift']['ratio_to_bar'] > 2


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
  assert int(answers) > 50 and frameworks.strip() == "[]"


# The BERT-shaped pair: the bundle TF 2.15 recorded (6 steps, 1 and 2
# replicas, a warm start, its own optimizer, per-replica clipping), against
# the team's port in plain JAX (tests/user_code/bert_jax_port.py).
@from_tf215
def test_the_bert_port_on_jax_passes_every_check(tmp_path):
  result, checks = run_compare(
      tmp_path / 'report.json', f'--bundle={TF215_DIR}/bert.npz',
      '--port=bert_jax_port:make_port', '--emulate_precision=bf16')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert {'inputs (2 replicas)', 'updates (2 replicas)', 'served_predictions',
          'tpu_ready', 'device_drift'} <= set(checks)
  _passed_but_dropout(checks)


# Each on an emulated device, TF32 and bfloat16 in turn: its math still
# fails.
@from_tf215
@pytest.mark.parametrize('port, failing, cause', [
    bug if bug[0] == 'no_weight_decay' else catalogue(*bug)
    for bug in BERT_BUGS])
def test_each_bert_bug_fails_on_jax_as_on_tensorflow(port, failing, cause,
                                                     tmp_path):
  result, checks = run_compare(
      tmp_path / 'report.json', f'--bundle={TF215_DIR}/bert.npz',
      f'--port=bert_jax_port:{port}', '--replicas=1', '--notpu_ready',
      f'--emulate_precision={"bf16" if len(port) % 2 else "tf32"}', FAIL_FAST)
  failed_first(result, checks, failing, cause)
  # The emulated rounding explains the outputs' drift, wherever it ran (not
  # after a bug that fails before it: erf GELU fails beyond_init).
  names = list(checks)
  if names.index(failing) > names.index('device_drift'):
    assert checks['device_drift']['passed']


# The ALBERT-style pair at its defaults (the bundle TF 2.15 recorded: the
# classifier's dropout masks, LAMB, clipping), against the team's port in
# plain JAX (tests/user_code/albert_jax_port.py), on one replica: the
# dropout check's is one replica's, and the PyTorch port's test covers 2.
@from_tf215
@pytest.mark.parametrize('port, said', [
    ('make_port', ''),
    # Each passes every check taken with dropout off.
    ('dropout_at_inference', "the port's predict draws dropout (at "),
    ('classifier_dropout_left_out', "the port's step made 0 dropout calls "
     'where the legacy step drew 1 mask; none took dropout/random_uniform/'),
])
def test_the_albert_port_on_jax_and_its_dropout_bugs(tmp_path, port, said):
  result, checks = run_compare(
      tmp_path / 'report.json', f'--bundle={TF215_DIR}/albert.npz',
      f'--port=albert_jax_port:{port}', '--replicas=1', '--notpu_ready')
  if port == 'make_port':
    assert result.returncode == 0, result.stdout[-3000:]
    _passed_but_dropout(checks)
    assert checks['clipping (1 replica)']['state'] == 'made'
    assert checks['dropout (1 replica)']['mask_ops'] == [
        'dropout/random_uniform/RandomUniform']
  else:
    # Every check before it passed: dropout is the last.
    failed_first(result, checks, 'dropout (1 replica)', said)
    assert list(checks)[-1] == 'dropout (1 replica)'
