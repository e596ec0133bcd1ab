"""The harness and the converter on four legacy model_fn / port pairs unlike
the kit's (tests/user_code/): a CNN with absl flags and /255 in the model_fn,
a small ResNet with batch norm and momentum, a non-image model with
embeddings, a multi-label head and Adam, and a BERT-shaped classifier (its
own tf.compat.v1.train.Optimizer with weight decay and warmup, gradients
clipped in the model_fn, a scaffold_fn warm start, labels inside int32 dict
features), and an EfficientNet-style classifier (a moving average of its
weights evaluated and exported in their place, TF 1's RMSProp, a host_call,
a JPEG-bytes receiver). Each correct port passes on 1, 2 and 4 replicas and
converts with --verify; each deliberate bug fails the check named for its
cause, first."""
import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_bugs import BERT_BUGS
from conftest import CATALOGUE, REPO, TESTS, catalogue, run_module
from conftest import FAIL_FAST, failed_first, made_once, recorded_once
from migration_tools import cli

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

USER_CODE = os.path.join(TESTS, 'user_code')
ENV = {'PYTHONPATH': os.pathsep.join([REPO, TESTS, USER_CODE])}


@dataclasses.dataclass(frozen=True)
class Pair:
  legacy: str
  port: str
  serving: bool
  params: dict
  legacy_flags: str = ''
  map_file: bool = False
  serving_inputs: str = ''
  # The legacy model_fn gives a host_call: the host_call check applies.
  host_call: bool = False
  # The legacy model_fn clips its gradients: the clipping check applies (on
  # each replica count).
  clips: bool = False

  def args(self, data_dir: str, port: str = 'make_port') -> list[str]:
    params = self.params_in(data_dir)
    args = [f'--legacy_model_fn={self.legacy}:model_fn',
            f'--legacy_input_fn={self.legacy}:input_fn',
            f'--port={self.port}:{port}', f'--params={json.dumps(params)}']
    if self.legacy_flags:
      args.append(f'--legacy_flags={self.legacy_flags} --data_dir={data_dir}')
    if self.map_file:
      args.append(f'--variable_map={os.path.join(data_dir, "map.json")}')
    return args


  def params_in(self, data_dir: str) -> dict:
    """The params, '{data_dir}' in a value replaced by data_dir."""
    if not self.params:
      return {}
    return {'data_dir': data_dir, **{
        k: v.format(data_dir=data_dir) if isinstance(v, str) else v
        for k, v in self.params.items()}}


PAIRS = {
    'cnn': Pair('cnn_legacy', 'cnn_port', False, {}, '--nouse_tpu'),
    'resnet': Pair('resnet_legacy', 'resnet_port', True,
                   {'learning_rate': 0.1, 'momentum': 0.9}),
    'tabular': Pair('tabular_legacy', 'tabular_port', True,
                    {'learning_rate': 0.01, 'decay_steps': 30},
                    map_file=True),
    'bert': Pair('bert_legacy', 'bert_port', True,
                 {'learning_rate': 1e-3, 'num_train_steps': 20,
                  'num_warmup_steps': 2,
                  'init_checkpoint': '{data_dir}/pretrained/model.ckpt'},
                 clips=True),
    'effnet': Pair('effnet_legacy', 'effnet_port', True,
                   {'learning_rate': 0.05, 'warmup_steps': 2,
                    'decay_steps': 2}, serving_inputs='serving_examples',
                   host_call=True),
    'albert': Pair('albert_legacy', 'albert_port', True,
                   {'learning_rate': 1e-3, 'num_train_steps': 20,
                    'num_warmup_steps': 2}, clips=True),
}


def _python(code: str) -> None:
  result = subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, env={**os.environ, **ENV}, check=False,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]


@pytest.fixture(scope='session')
def data_dirs(tmp_path_factory):
  """Each pair's own files, written as its team's data script would, once
  a run (made_once: shared by the workers of pytest-xdist)."""
  def write(folder):  # In one process: TensorFlow imported once.
    _python('import importlib, json, os\n' + ''.join(
        f'os.makedirs({str(folder / name)!r})\n'
        f'importlib.import_module({pair.legacy!r}).write_data('
        f'{str(folder / name)!r})\n'
        f'json.dump(getattr(importlib.import_module({pair.port!r}), '
        f'"VARIABLE_MAP", {{}}), open({str(folder / name / "map.json")!r}, '
        '"w"))\n' for name, pair in PAIRS.items()))
  folder = made_once(tmp_path_factory, 'pair_data', write)
  return {name: str(folder / name) for name in PAIRS}


def _live_args(name, data_dirs, port='make_port') -> list[str]:
  """The flags of a live comparison of the pair, its port's function port."""
  pair = PAIRS[name]
  serving = ([f'--legacy_serving_input_fn={pair.legacy}:'
              'serving_input_receiver_fn'] if pair.serving else
             ['--legacy_serving_input_fn='])
  if pair.serving_inputs:
    serving.append(f'--legacy_serving_inputs={pair.legacy}:'
                   f'{pair.serving_inputs}')
  return [*pair.args(data_dirs[name], port), *serving, '--batch_size=32']


def _run(tmp_path, *args):
  report = tmp_path / 'report.json'
  result = run_module('migration_tools.compare', f'--report={report}', *args,
                      env=ENV)
  checks = {}
  if report.exists():
    checks = {c['name']: c for c in json.loads(report.read_text())['checks']}
  return result, checks


def _compare(name, data_dirs, tmp_path, *args, port='make_port'):
  return _run(tmp_path, *_live_args(name, data_dirs, port), *args)


def _replay(name, bundle, data_dirs, tmp_path, port, *args):
  """The pair's port function port against a recording of its legacy side
  (_recorded), as a team checks its port against its bundle."""
  pair = PAIRS[name]
  mapped = ([f'--variable_map={os.path.join(data_dirs[name], "map.json")}']
            if pair.map_file else [])
  return _run(tmp_path, f'--bundle={bundle}', f'--port={pair.port}:{port}',
              *mapped, *args)


@pytest.fixture(scope='session')
def recorded(tmp_path_factory, data_dirs):
  """recorded(name, *options): the pair's legacy side at those options,
  recorded once a run by a live comparison of its correct port (which must
  pass): what the tests of its deliberate bugs replay, each against its
  port, as the legacy side is the same whatever the port."""
  def record(name, *options, params=None):
    args = _live_args(name, data_dirs)
    if params is not None:
      args = [a for a in args if not a.startswith('--params=')]
      args.append(f'--params={json.dumps(params)}')
    key = '_'.join([name, *(o.strip('-').replace('=', '') for o in options),
                    *([] if params is None else ['params'])])
    return recorded_once(tmp_path_factory, f'pair_{key}', *args, *options,
                         env=ENV)[0]
  return record


@pytest.mark.parametrize('name', [
    name if name in ('resnet', 'bert', 'effnet') else catalogue(name)
    for name in PAIRS])
def test_the_correct_port_passes_on_1_2_and_4_replicas(name, data_dirs,
                                                       tmp_path):
  result, checks = _compare(name, data_dirs, tmp_path, '--steps=10',
                            '--replicas=1,2,4')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert all(c['passed'] for c in checks.values()), result.stdout
  assert len(checks) == (26 + PAIRS[name].serving + PAIRS[name].host_call +
                         3 * PAIRS[name].clips)
  for label in ('1 replica', '2 replicas', '4 replicas'):
    assert checks[f'updates ({label})']['max_abs_diff'] <= 5e-5
    assert checks[f'one_step ({label})']['legacy_reference'] == (
        'on the whole batch' if label == '1 replica' else
        f'as on {label.split()[0]} TPU cores')
  if name == 'bert':
    _assert_bert_run(checks, result.stdout)
  if name == 'effnet':
    _assert_effnet_run(checks)
  one_step = checks['one_step (1 replica)']
  if name == 'cnn':
    # Same kernels, same order of operations: exact to the bit.
    assert one_step['max_abs_diff'] == 0
    assert checks['trajectory (1 replica)']['bit_identical']
    # Its layers are named otherwise: the map was inferred, and reported.
    assert 'conv2d/kernel -> features_a/kernel' in (
        checks['inventory']['paired_by_order'])
  else:
    # Within the one-step bar: Keras moves batch-norm statistics and applies
    # Adam with other (equivalent) arithmetic than TF 1's fused ops.
    assert one_step['max_abs_diff'] <= 1e-6
  if name == 'resnet':
    assert one_step['worst_other_state'].endswith(
        ('moving_mean', 'moving_variance'))
    assert one_step['worst_slot'].endswith('/momentum')
    assert checks['optimizer']['legacy'] == 'Momentum(momentum=0.9, ' \
        'nesterov=False)'
  if name == 'tabular':
    assert one_step['worst_slot'].endswith(('/m', '/v'))
    rates = checks['learning_rate (1 replica)']
    assert rates['legacy'] == rates['port'] < 0.01  # The decay was followed.
    assert set(checks['served_predictions']['max_diff_by_output']) == {
        'probabilities', 'logits', 'top_label'}
  if name == 'resnet':
    assert checks['served_predictions']['inputs'] == {
        'image': [384, 8, 8, 3], 'gain': [384]}  # The data's 12 batches.
    assert set(checks['evaluation']['legacy']) == {
        'loss', 'top_1_accuracy', 'top_5_accuracy'}
  for label in ('1 replica', '2 replicas', '4 replicas'):
    assert checks[f'stepwise ({label})']['max_abs_diff'] <= 1e-6


@pytest.mark.parametrize('name, port, failing, cause', [
    catalogue('cnn', 'without_scaling', 'inference',
              'before any training step'),
    catalogue('cnn', 'loss_averaged_per_replica', 'one_step (2 replicas)',
              'gradients are 2x the legacy ones'),
    ('resnet', 'keras_bn_momentum', 'one_step (1 replica)',
     'moving_variance differs'),
    catalogue('resnet', 'keras_bn_epsilon', 'inference',
              'batch-norm epsilon'),
    catalogue('resnet', 'top_5_with_k_1', 'evaluation',
              'top_5_accuracy differs'),
    catalogue('resnet', 'nesterov_momentum', 'optimizer',
              'nesterov is False in the legacy Momentum and True in the port'),
    ('tabular', 'keras_adam_epsilon', 'optimizer',
     'epsilon is 1e-08 in the legacy Adam and 1e-07 in the port'),
    catalogue('tabular', 'scaled_embedding', 'inference',
              'before any training step'),
    catalogue('tabular', 'precision_on_logits', 'evaluation',
              'precision differs'),
])
def test_each_deliberate_bug_fails_the_check_named_for_it_first(
    name, port, failing, cause, data_dirs, recorded, tmp_path):
  # --notpu_ready: these bugs are numeric; tpu_ready has tests of its own.
  options = ('--steps=3', '--replicas=1,2', '--notpu_ready')
  result, checks = _replay(name, recorded(name, *options), data_dirs,
                           tmp_path, port, '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, failing, cause)


def test_a_replay_sets_the_recorded_legacy_flags_for_a_port_that_reads_them(
    data_dirs, recorded, tmp_path):
  # The CNN's port reads the legacy module's absl flags (--data_dir, the
  # learning rate), which --legacy_flags set live: the bundle records them
  # and a replay sets them again, where it once ran on their defaults.
  bundle = recorded('cnn', '--steps=3', '--replicas=1,2', '--notpu_ready')
  result, checks = _replay('cnn', bundle, data_dirs, tmp_path, 'make_port',
                           '--notpu_ready')
  assert result.returncode == 0, result.stdout[-3000:]
  assert all(c['passed'] for c in checks.values()), result.stdout[-3000:]
  assert (f'Legacy flags: --nouse_tpu --data_dir={data_dirs["cnn"]} '
          '(recorded; set for the port)') in result.stdout
  # A flag no module here defines is said and left.
  assert cli.set_legacy_flags('--no_such_flag=1', known_only=True) == [
      '--no_such_flag=1']


def _assert_effnet_run(checks):
  """What the EfficientNet-style pair's run must show beyond passing."""
  # Its 31 moving averages paired and compared, each from its variable.
  table = checks['inventory']['train_state']
  averages = {n: e for n, e in table.items() if e['role'] == 'moving average'}
  assert len(averages) == 31 and all(
      e['compared_by'].startswith('inventory') for e in averages.values())
  assert all(e.get('num_updates') for e in averages.values())
  # Compared at every step, on the cores too.
  for label in ('1 replica', '2 replicas', '4 replicas'):
    assert checks[f'one_step ({label})']['averages_diff'] is not None
  # Evaluated and exported on the averages, as the Estimator restored them.
  assert checks['evaluation']['legacy_evaluates_with'] == 'the moving averages'
  assert checks['served_predictions']['legacy_exports'] == (
      'the moving averages')
  assert checks['served_predictions']['inputs'] == {'image_bytes': [64]}
  # Its drop connect (a uniform and a floor) switched off, and said.
  assert list(checks['inventory']['random_ops_switched_off'].values()) == [
      'floor of keep + uniform']
  assert checks['inventory']['random_ops_left'] == {}
  assert 'random mask of the legacy step put at its expectation' in (
      checks['inventory']['message'])
  # TF 1's RMSProp read by its ops; the host_call's two summaries compared.
  assert checks['optimizer']['legacy'] == (
      'RMSProp(centered=False, epsilon=0.001, momentum=0.9, rho=0.9)')
  assert checks['host_call']['names'] == ['loss', 'learning_rate']
  # A warmup from 0: the update judged from step 2, and said.
  assert checks['updates (1 replica)']['first_judged_step'] == 2


EFFNET_BUGS = [
    ('no_ema', 'inventory', '31 moving averages (tf.train.'
     'ExponentialMovingAverage of conv2d/kernel and others'),
    ('ema_without_num_updates', 'one_step (1 replica)',
     "TF 1's num_updates, which lowers the decay"),
    ('evaluates_raw_weights', 'evaluation',
     "the port's metrics are the model_fn's on the raw weights"),
    ('keras_rmsprop', 'optimizer',
     "the rms slots start at 1 in the legacy optimizer and at 0 in the "
     "port's"),
    ('epsilon_outside_the_square_root', 'updates (1 replica)',
     'epsilon inside or outside the square root'),
    ('batch_norm_momentum_0_9', 'one_step (1 replica)',
     'compare the batch-norm momentum'),
    ('no_label_smoothing', 'one_step (1 replica)', 'label smoothing'),
    ('l2_on_batch_norm_too', 'one_step (1 replica)',
     "an L2 term over other variables, such as batch norm's gamma and beta "
     'too'),
    ('summary_of_the_next_rate', 'host_call',
     'learning_rate differs at step 1 (0 vs'),
    ('drop_connect_rate_0_3', 'dropout (1 replica)',
     'dropout is the difference: compare the dropout rate'),
    ('drop_connect_by_where', 'one_step (1 replica)',
     "the port's step draws random numbers that the kit cannot put at their "
     'expectation: tf.random.uniform at effnet_port.py:'),
]


def test_a_hand_written_optimizer_of_the_same_update_passes(data_dirs,
                                                          tmp_path):
  # TF 1's RMSProp as the team's own Keras optimizer class: no kind to read,
  # so it is read by what it does.
  result, checks = _compare('effnet', data_dirs, tmp_path, '--steps=3',
                            '--replicas=1', '--notpu_ready',
                            port='hand_written_rmsprop')
  assert result.returncode == 0, result.stdout[-3000:]
  optimizer = checks['optimizer']
  assert optimizer['read_by'] == 'what it does (updates)'
  assert optimizer['legacy'] == (
      'RMSProp(centered=False, epsilon=0.001, momentum=0.9, rho=0.9)')
  assert optimizer['message'].startswith(
      "the port's optimizer (TF1RMSProp()) is not one the kit reads by its "
      'config: its slots pair one to one'), optimizer['message']
  assert checks['one_step (1 replica)']['slots_diff'] is not None


def test_an_unmapped_port_assigned_out_of_order_pairs_in_creation_order(
    data_dirs, recorded, tmp_path):
  # Its same-shaped convolutions and batch norms are tracked by Keras in the
  # order they were assigned (the block's second ones first): paired in
  # that order, inventory passed and inference failed at 0.118. Paired in
  # the order they were created, the legacy model's, every check passes.
  # Its layers are auto-named: built again for 2 replicas, they were
  # numbered on (resnet/conv2d_3, ...) and every later check ended in a
  # bare KeyError: 'resnet/conv2d/kernel'.
  bundle = recorded('resnet', '--steps=3', '--replicas=1,2', '--notpu_ready')
  result, checks = _run(tmp_path, f'--bundle={bundle}',
                        '--port=resnet_port:assigned_out_of_order',
                        '--notpu_ready')
  assert result.returncode == 0, result.stdout[-3000:]
  assert all(c['passed'] for c in checks.values()), result.stdout[-3000:]
  paired = checks['inventory']['paired_by_order']
  # Named in assignment order, paired in call order: the block's second
  # convolution, assigned first, is Keras's conv2d.
  assert 'conv2d_1/kernel -> resnet/conv2d_1/kernel' in paired, paired
  assert 'conv2d_2/kernel -> resnet/conv2d/kernel' in paired, paired
  assert ('batch_normalization_2/gamma -> resnet/batch_normalization/gamma'
          in paired), paired
  assert checks['stepwise (2 replicas)']['passed']


def test_a_legacy_keras_optimizer_is_refused_in_one_line(data_dirs,
                                                         tmp_path):
  # As SimCLR's LARS is written (tf.keras.optimizers.legacy.Optimizer): the
  # kit reads the current Keras API and says so, where it once ended in
  # "'LARSOptimizer' object has no attribute 'build'".
  result, checks = _compare('cnn', data_dirs, tmp_path, '--steps=1',
                            '--replicas=1', '--notpu_ready',
                            port='legacy_keras_optimizer')
  assert result.returncode == 1, result.stderr[-2000:]
  inventory = checks['inventory']
  assert inventory['status'] == 'error'
  assert inventory['message'] == (
      "building the 1 replica run raised: the port's optimizer (SGD) is a "
      'legacy Keras optimizer (tf.keras.optimizers.legacy.Optimizer: slots '
      'by get_slot, no build), which the kit does not read: it reads the '
      'current Keras API (build, update_step, its variables); subclass '
      'tf.keras.optimizers.Optimizer instead, its update in update_step '
      '(see docs/MIGRATION.md, "Plug your own pair in")')
  assert 'Traceback' not in result.stdout + result.stderr


def test_a_variable_the_loss_never_reaches_has_a_zero_gradient(data_dirs,
                                                              tmp_path):
  """A bias made and never used (tf.gradients' None on the legacy side,
  tape.gradient's on the port's) is a zero gradient: the port that leaves it
  unused too passes on two replicas, one that uses it fails one_step
  naming it."""
  directory = data_dirs['tabular']
  params = {**PAIRS['tabular'].params_in(directory), 'unused_bias': True}
  with open(os.path.join(directory, 'map.json')) as f:
    mapping = {**json.load(f), 'unused_bias': 'extra/bias'}
  map_file = tmp_path / 'map.json'
  map_file.write_text(json.dumps(mapping))
  args = ('--steps=1', '--replicas=1,2', '--notpu_ready',
          f'--params={json.dumps(params)}', f'--variable_map={map_file}')
  result, checks = _compare('tabular', data_dirs, tmp_path, *args,
                            port='unused_bias')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert all(c['passed'] for c in checks.values())
  result, checks = _compare('tabular', data_dirs, tmp_path,
                            *args[:1], '--replicas=1', *args[2:],
                            port='used_bias')
  assert result.returncode == 1, result.stderr[-2000:]
  step = checks['one_step (1 replica)']
  print(step['message'])
  assert not step['passed'] and 'unused_bias' in step['message'], step


def test_a_legacy_step_that_draws_beyond_a_mask_fails_inventory_naming_it(
    data_dirs, tmp_path):
  params = {**PAIRS['effnet'].params_in(data_dirs['effnet']),
            'input_noise': 0.1}
  result, checks = _compare('effnet', data_dirs, tmp_path, '--steps=1',
                            '--replicas=1', f'--params={json.dumps(params)}')
  assert result.returncode == 1, result.stderr[-2000:]
  inventory = checks['inventory']
  assert not inventory['passed']
  assert inventory['message'].startswith(
      'the legacy training step draws random numbers the kit cannot switch '
      'off: random_normal/RandomStandardNormal (RandomStandardNormal, used '
      'otherwise than as a mask'), inventory['message']
  # The drop connect is still switched off; the checks after it say why
  # they did not run.
  assert len(inventory['random_ops_switched_off']) == 1
  assert checks['one_step (1 replica)']['message'] == (
      'inventory failed: the two sides cannot start a step from one state '
      '(its line says why)')


@pytest.mark.parametrize('port, failing, cause', [
    bug if bug[0] == 'no_ema' else catalogue(*bug) for bug in EFFNET_BUGS])
def test_each_bug_of_an_effnet_port_fails_with_a_hint_at_its_cause(
    port, failing, cause, data_dirs, recorded, tmp_path):
  # A larger rate than the pair's: the averages then part from the weights
  # by far more than the evaluation's bar, whatever the initial weights.
  params = {**PAIRS['effnet'].params_in(data_dirs['effnet']),
            'learning_rate': 0.2}
  bundle = recorded('effnet', '--steps=4', '--replicas=1', '--notpu_ready',
                    params=params)
  result, checks = _replay('effnet', bundle, data_dirs, tmp_path, port,
                           '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, failing, cause)


def test_an_effnet_on_raw_pixels_passes_with_bars_scaled_to_each_tensor(
    data_dirs, tmp_path_factory, tmp_path):
  """tensorflow/tpu's EfficientNet feeds its model_fn raw pixels (0 to
  255): the stem's batch-norm moving variance then runs into the thousands,
  where one float32 rounding is about 6e-5. The correct port passes on 1 and
  2 replicas, each tensor judged beyond its own rounding (the port's noise
  measured in the same run), stepwise and dropout included; a bug still
  fails on that pair, replayed from the recording."""
  params = {**PAIRS['effnet'].params_in(data_dirs['effnet']),
            'raw_pixels': True}
  args = [a for a in _live_args('effnet', data_dirs)
          if not a.startswith(('--params=', '--legacy_serving'))]
  bundle, checks = recorded_once(
      tmp_path_factory, 'pair_effnet_raw_pixels', *args,
      f'--params={json.dumps(params)}', '--legacy_serving_input_fn=',
      '--steps=4', '--replicas=1,2', '--notpu_ready', env=ENV)
  assert all(c['passed'] for c in checks.values()), checks
  for name in ('one_step (1 replica)', 'stepwise (1 replica)',
               'stepwise (2 replicas)', 'dropout (1 replica)'):
    allowed = checks[name]['noise_allowance']
    # The statistics of raw pixels round by far more than the fixed 1e-6.
    assert 'moving_variance' in allowed['on'], (name, allowed)
    assert allowed['largest'] > 1e-5, (name, allowed)
  assert checks['dropout (1 replica)']['legacy_draws']
  result, replayed = _replay('effnet', bundle, data_dirs, tmp_path,
                             'batch_norm_momentum_0_9', '--notpu_ready',
                             FAIL_FAST)
  failed_first(result, replayed, 'one_step (1 replica)',
               'compare the batch-norm momentum')


def _assert_bert_run(checks, stdout):
  """What the BERT-shaped pair's run must show beyond passing."""
  # Not read by its ops: its slots paired, what it does judged in updates.
  optimizer = checks['optimizer']
  assert optimizer['legacy'] == 'AdamWeightDecayOptimizer'
  assert optimizer['read_by'] == 'what it does (updates)'
  assert optimizer['slot_map'] == ('adam_m -> adam_m (name), '
                                   'adam_v -> adam_v (name)')
  # Its rate was read (AdamWeightDecayOptimizer.learning_rate), warmup first.
  rates = checks['learning_rate (1 replica)']
  assert rates['status'] == 'passed' and rates['legacy'] == rates['port'] > 0
  # The scaffold_fn warm start ran: 39 encoder variables, not the head.
  warm = checks['inventory']['warm_start']
  assert list(warm.values()) == [39]
  assert list(warm)[0].endswith('pretrained/model.ckpt')
  assert 'both sides start from the legacy warm start' in stdout
  # Warmup: step 1's rate is 0, so updates judge from step 2 (slots from 1).
  assert checks['updates (1 replica)']['first_judged_step'] == 2
  assert 'judged from step 2' in checks['updates (1 replica)']['message']
  assert 'the learning rate was 0 at this step on both sides' in checks[
      'one_step (1 replica)']['message']
  layers = checks['inference']['layers']
  assert len(layers['compared']) == 19 and layers['parting'] is None


def _train_legacy(name, data_dir, estimator_dir, steps=5):
  pair = PAIRS[name]
  params = pair.params_in(data_dir)
  args = [sys.executable, os.path.join(USER_CODE, 'estimator_train.py'),
          f'--pair_module={pair.legacy}', f'--estimator_dir={estimator_dir}',
          f'--pair_params={json.dumps(params)}', f'--train_steps={steps}',
          '--global_batch=32']
  if pair.legacy_flags:
    args += pair.legacy_flags.split() + [f'--data_dir={data_dir}']
  result = subprocess.run(args, capture_output=True, text=True, check=False,
                          env={**os.environ, **ENV}, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]


def test_the_albert_port_passes_from_weights_of_a_trained_scale(data_dirs,
                                                                tmp_path):
  # Weights of scale 0.3, not 0.02: activations far from linear, and LAMB's
  # ratio dividing the rounding noise of an attention key bias's gradient
  # (0 in exact arithmetic) by its own scale.
  params = {**PAIRS['albert'].params_in(data_dirs['albert']),
            'init_range': 0.3}
  result, checks = _compare('albert', data_dirs, tmp_path, '--steps=3',
                            '--replicas=1,2', '--notpu_ready',
                            f'--params={json.dumps(params)}')
  assert result.returncode == 0, result.stdout[-3000:]
  for label in ('1 replica', '2 replicas'):
    noise = checks[f'updates ({label})']['noise_gradient']
    assert noise == ['albert/encoder/transformer/layer_shared/attention/'
                     'key/bias'], noise
  assert 1 < checks['beyond_init']['factor'] < 3  # Already large weights.
  # At weights of this scale the clip engages at the recorded steps.
  for label in ('1 replica', '2 replicas'):
    clipping = checks[f'clipping ({label})']
    assert clipping['status'] == 'passed' and clipping['state'] == 'recorded'
  coverage = json.loads((tmp_path / 'report.json').read_text())['coverage']
  # Clipping, the classifier's dropout (drawn alike on Keras 2), the
  # schedule.
  assert [b['exercised'] for b in coverage['behaviours']] == [True] * 3
  assert 'Exercised: gradient clipping by global norm (bert_legacy.py:' in (
      result.stdout)


# Each bug of an ALBERT port: the check that fails first, what its hint
# names.
ALBERT_BUGS = [
    ('adamw_in_lamb_place', 'updates (1 replica)',
     "no trust ratio (e.g. AdamW in LAMB's place"),
    ('erf_gelu', 'beyond_init', 'one differs (e.g. erf GELU for tanh GELU'),
    ('trust_ratio_on_layer_norm_and_bias', 'updates (1 replica)',
     'compare which variables are excluded from layer adaptation'),
    ('decay_outside_the_trust_ratio', 'updates (1 replica)',
     'a term added to the update outside the trust ratio'),
    ('unshared_layers', 'inventory', 'the port holds 3 copies of 5 kinds of '
     'variables the legacy model has once (e.g. a block the legacy model '
     'shares across its layers'),
    ('transposed_projection', 'inference', 'a kernel read in another '
     'layout'),
    # Each passes every other check: the clip engages at no recorded step.
    ('no_clipping', 'clipping (1 replica)', 'the port clips otherwise (no '
     'clipping in the port, clipping by another norm'),
    ('clipping_by_the_dense_norm', 'clipping (1 replica)',
     'the port clips otherwise'),
]


# All in the catalogue: the readings their hints come from have tests on toy
# steps (test_updates.py), and the correct port runs in the default run.
@pytest.mark.parametrize('port, failing, cause', [
    catalogue(*bug) for bug in ALBERT_BUGS])
def test_each_bug_of_an_albert_port_fails_with_a_hint_at_its_cause(
    port, failing, cause, data_dirs, recorded, tmp_path):
  _assert_fails_first('albert', port, failing, cause, data_dirs, recorded,
                      tmp_path)


def _assert_fails_first(name, port, failing, cause, data_dirs, recorded,
                        tmp_path):
  """The pair's port fails the check `failing` first, its hint naming
  cause, at 3 steps on one replica."""
  bundle = recorded(name, '--steps=3', '--replicas=1', '--notpu_ready')
  result, checks = _replay(name, bundle, data_dirs, tmp_path, port,
                           '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, failing, cause)


def test_a_decay_after_the_warmup_fails_the_schedule_beyond_the_steps_taken(
    data_dirs, tmp_path):
  # HF's get_linear_schedule_with_warmup in place of TF's polynomial decay:
  # with a warmup of 100 in 1,000 steps, the steps compared (3, in the
  # warmup) agree; the schedule read over its range does not.
  params = {**PAIRS['bert'].params_in(data_dirs['bert']),
            'num_train_steps': 1000, 'num_warmup_steps': 100}
  result, checks = _compare('bert', data_dirs, tmp_path, '--steps=3',
                            '--replicas=1', '--notpu_ready',
                            f'--params={json.dumps(params)}', FAIL_FAST,
                            port='decay_after_the_warmup')
  failed_first(result, checks, 'schedule', 'the schedules part at global '
               "step 107 (0.000893 vs 0.000992222), in its decay: compare "
               "the decay's length")
  assert checks['learning_rate (1 replica)']['passed']


def test_a_bert_port_giving_its_optimizer_the_replicas_sum_passes(
    data_dirs, tmp_path):
  # Each replica's own mean loss, the sum of their gradients applied: what
  # BERT's model_fn does on TPU cores (tf.gradients, then
  # CrossShardOptimizer's sum), written as its team would.
  result, checks = _compare('bert', data_dirs, tmp_path, '--steps=2',
                            '--replicas=1,2', '--notpu_ready',
                            port='per_replica_mean')
  assert result.returncode == 0, result.stdout[-3000:]
  assert checks['one_step (2 replicas)']['legacy_gradients_as'] == (
      "received by its optimizer (2x the mean: the cores' sum)")
  assert checks['one_step (1 replica)']['legacy_gradients_as'] == 'the mean'
  assert checks['one_step (2 replicas)']['gradient_scale_ratio'] == (
      pytest.approx(1, abs=1e-3))


@pytest.mark.parametrize('port, failing, cause', [
    bug if bug[0] == 'no_weight_decay' else catalogue(*bug)
    for bug in BERT_BUGS])
def test_each_bug_of_a_bert_port_fails_with_a_hint_at_its_cause(
    port, failing, cause, data_dirs, recorded, tmp_path):
  _assert_fails_first('bert', port, failing, cause, data_dirs, recorded,
                      tmp_path)


@pytest.mark.parametrize('name, slots', [
    catalogue('cnn', 0), ('resnet', 11), catalogue('tabular', 12),
    ('bert', 82)])
def test_the_converter_carries_weights_slots_and_step_and_verifies(
    name, slots, data_dirs, tmp_path):
  estimator_dir = str(tmp_path / 'legacy')
  _train_legacy(name, data_dirs[name], estimator_dir)
  output = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint',
                      f'--estimator_dir={estimator_dir}', f'--output={output}',
                      *PAIRS[name].args(data_dirs[name]),
                      '--verify', '--verify_examples=300', env=ENV)
  assert result.returncode == 0, result.stderr[-2000:]
  examples = 256 if name == 'bert' else 300  # All its file holds.
  assert f'Verified on {examples} examples: every output agrees' in (
      result.stdout), result.stdout
  # And each layer the map pairs, on the first example.
  assert re.search(r'; [1-9]\d* layers agree on the first example',
                   result.stdout), result.stdout
  assert ('Written by Keras 2: on TF 2.16 and later (Keras 3), carry it over '
          'first: migration-convert-checkpoint --keras2_dir=') in result.stdout
  carried = next(line for line in result.stdout.splitlines()
                 if line.startswith('Carried: '))
  assert 'the step (5, as optimizer.iterations)' in carried, carried
  if slots:
    # The slots by their names in the checkpoint and their optimizer.
    kinds = {'resnet': '(momentum x11; Momentum)',
             'tabular': '(m x6, v x6; Adam)',
             'bert': "(adam_m x41, adam_v x41; the legacy optimizer's own, "
                     "paired with the port's by name and shape)"}[name]
    assert f'{slots} optimizer slots {kinds}' in carried, carried
  if slots:
    _assert_slots_carried(name, estimator_dir, str(output))


def _assert_slots_carried(name, estimator_dir, output):
  """Every legacy slot is in the converted checkpoint, in Keras's
  convention (momentum: -learning_rate times TF 1's accumulator)."""
  legacy = tf.train.load_checkpoint(tf.train.latest_checkpoint(estimator_dir))
  ours = tf.train.load_checkpoint(tf.train.latest_checkpoint(output))
  # A Keras 2 optimizer saves its slots as optimizer/_variables/N.
  converted = [ours.get_tensor(k) for k in ours.get_variable_to_shape_map()
               if k.startswith('optimizer/_variables/')]
  scale = -PAIRS[name].params['learning_rate'] if name == 'resnet' else 1.0
  names = [k for k in legacy.get_variable_to_shape_map()
           if k.endswith(('/Momentum', '/Adam', '/Adam_1', '/adam_m',
                          '/adam_v'))]
  assert len(names) == len(converted)
  for key in names:
    expected = legacy.get_tensor(key) * np.float32(scale)
    assert any(c.shape == expected.shape and np.allclose(c, expected, atol=0)
               for c in converted), key


@CATALOGUE
def test_warm_start_from_starts_both_sides_from_the_checkpoint(data_dirs,
                                                               tmp_path):
  """TPUEstimator(warm_start_from=...): the legacy training starts from the
  checkpoint's trainable variables, the port from the same weights."""
  estimator_dir = str(tmp_path / 'trained')
  _train_legacy('bert', data_dirs['bert'], estimator_dir, steps=3)
  params = {k: v for k, v in PAIRS['bert'].params_in(data_dirs['bert']).items()
            if k != 'init_checkpoint'}
  report = tmp_path / 'report.json'
  result = run_module(
      'migration_tools.compare', '--legacy_model_fn=bert_legacy:model_fn',
      '--legacy_input_fn=bert_legacy:input_fn', '--legacy_serving_input_fn=',
      '--port=bert_port:make_port', f'--params={json.dumps(params)}',
      f'--warm_start_from={estimator_dir}', '--batch_size=32', '--steps=3',
      '--replicas=1', f'--report={report}', env=ENV)
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  checks = {c['name']: c for c in json.loads(report.read_text())['checks']}
  assert list(checks['inventory']['warm_start'].values()) == [41]
  assert 'both sides start from the legacy warm start' in result.stdout
  bad = run_module('migration_tools.compare',
                   f'--warm_start_from={tmp_path / "none"}', env=ENV)
  assert bad.returncode == 1
  assert 'no checkpoint there' in bad.stderr.strip().splitlines()[-1]


@CATALOGUE
def test_no_slots_converts_the_model_alone_and_says_so(data_dirs, tmp_path):
  estimator_dir = str(tmp_path / 'legacy')
  _train_legacy('bert', data_dirs['bert'], estimator_dir, steps=2)
  result = run_module('migration_tools.checkpoint',
                      f'--estimator_dir={estimator_dir}',
                      f'--output={tmp_path / "converted"}', '--no_slots',
                      *PAIRS['bert'].args(data_dirs['bert']), env=ENV)
  assert result.returncode == 0, result.stderr[-2000:]
  assert ('Carried: 41 variables, the step (2, as optimizer.iterations). '
          'Left: 82 optimizer slots (') in result.stdout, result.stdout
  assert '--no_slots, the optimizer starts afresh' in result.stdout


def test_moving_averages_convert_as_the_weights_the_estimator_served(
    data_dirs, tmp_path):
  """An EfficientNet-style checkpoint holds each weight's moving average;
  the Estimator evaluated and exported those. Converted as they are, the
  port gets the raw weights and is told so; with --averages_as_weights it
  gets the averages, and --verify predicts the legacy side on them too."""
  estimator_dir = str(tmp_path / 'legacy')
  _train_legacy('effnet', data_dirs['effnet'], estimator_dir)
  args = [f'--estimator_dir={estimator_dir}',
          *PAIRS['effnet'].args(data_dirs['effnet']), '--verify',
          '--verify_examples=64']
  raw = run_module('migration_tools.checkpoint',
                   f'--output={tmp_path / "raw"}', *args, env=ENV)
  assert raw.returncode == 0, raw.stderr[-2000:]
  assert ('Left: 31 moving averages: the raw weights were written'
          in raw.stdout), raw.stdout
  averaged = run_module('migration_tools.checkpoint',
                        f'--output={tmp_path / "averaged"}', *args,
                        '--averages_as_weights', env=ENV)
  assert averaged.returncode == 0, averaged.stderr[-2000:]
  assert 'Verified on 64 examples: every output agrees' in averaged.stdout
  assert re.search(r'; [1-9]\d* layers agree on the first example',
                   averaged.stdout), averaged.stdout
  assert 'Carried: 31 variables as their moving averages' in averaged.stdout
  # The two differ: after 5 steps an average is not its weight.
  theirs, ours = (tf.train.load_checkpoint(tf.train.latest_checkpoint(
      str(tmp_path / name))) for name in ('raw', 'averaged'))
  key = next(k for k in theirs.get_variable_to_shape_map()
             if k.startswith('model/') and 'kernel' in k)
  assert not np.allclose(theirs.get_tensor(key), ours.get_tensor(key))
