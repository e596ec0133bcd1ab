"""The torch profile: the kit's PyTorch port (kit_pair/mnist_torch.py)
checked from the kit's own golden bundle (kit_pair/golden_bundle.npz, the
default where no tf.estimator runs), with no TensorFlow and no JAX in the
process; its planted bugs (tests/user_code/torch_bugs.py) failing with their
cause; the ALBERT-style pair's PyTorch port (tests/user_code/
albert_torch_port.py) passing from its TF 2.15 bundle, its clipping and
dropout bugs failing there; the Estimator
checkpoint carried to the port's state_dict and verified; and the
adapter's layouts, TPU readiness and state file on their own."""
import json
import os

import numpy as np
import pytest
import torch

import kit_bundle
from conftest import TF215_DIR, TOOLS_PYTHONPATH, catalogue
from conftest import FAIL_FAST, failed_first, run_compare, run_module
from kit_core import checkpoint_files
from kit_core import tensor_bundle
from kit_core.errors import KitError
from migration_tools.pair.frameworks import pytorch
from migration_tools.pair.frameworks import tpu

PORT = '--port=kit_pair.mnist_torch:make_port'
from_tf215 = pytest.mark.from_tf215


def _bundle() -> str:
  return kit_bundle.BUNDLE


@pytest.mark.e2e
@pytest.mark.parametrize('emulated', ['', 'bf16'])
def test_the_kits_torch_port_passes_every_check_on_1_and_2_replicas(
    tmp_path, emulated):
  # As the README's torch line runs it: no flag names the bundle or the
  # port; both are the kit's own on this profile.
  result, checks = run_compare(
      tmp_path / 'report.json',
      *([f'--emulate_precision={emulated}'] if emulated else []))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert (f'Bundle: {kit_bundle.BUNDLE} (the kit\'s own pair: no --bundle '
          'was given, and no tf.estimator is here to run a model_fn), '
          'recorded with TensorFlow 2.15.1 at kit commit ') in result.stdout
  assert (f'Port: kit_pair.mnist_torch:make_port, on PyTorch '
          f'{torch.__version__}') in result.stdout
  assert ('2 replicas: the global batch split into consecutive shares, in '
          'one process, their gradients combined by the model\'s all_reduce'
          ) in result.stdout
  # How they are combined is read from what the port's all_reduce gives.
  assert "; the shares' gradients averaged, as DDP does" in result.stdout
  assert (f'Ran on: cpu (cpu), 1 device; torch {torch.__version__}; matmul '
          'float32, convolution float32') in result.stdout
  assert {'inventory', 'optimizer', 'inputs', 'inference',
          'one_step (1 replica)', 'one_step (2 replicas)',
          'learning_rate (2 replicas)', 'updates (2 replicas)',
          'stepwise (2 replicas)', 'evaluation', 'served_predictions',
          'tpu_ready', 'dropout (1 replica)'} <= set(checks)
  # Every check passed, dropout too: the port made with its dropout on, the
  # legacy step's masks handed to its dropout call.
  assert all(c['passed'] for c in checks.values()), result.stdout[-3000:]
  assert checks['dropout (1 replica)']['mask_ops'] == [
      'dropout/dropout/random_uniform/RandomUniform']
  assert ('Exercised: random draws of the step (1 op: dropout): drawn by the '
          'legacy step, its masks handed to the port\'s dropout calls in '
          'order, compared by dropout') in result.stdout
  assert checks['tpu_ready']['message'] == (
      'the loss and predict export with torch.export as one graph of static '
      'shapes')
  report = json.loads((tmp_path / 'report.json').read_text())
  assert report['bundle'] == kit_bundle.BUNDLE
  assert report['port'] == 'kit_pair.mnist_torch:make_port'
  assert report['port_ran_on']['framework'] == 'pytorch'
  assert report['port_ran_on']['versions']['torch'] == torch.__version__
  assert 'tensorflow' not in report and 'jax' not in report
  # How both starts are seeded, from the bundle's seed: the same command
  # gives the same start.
  assert report['seeded']['seed'] == report['seed'] == 0
  assert report['seeded']['legacy'].startswith(
      'every graph of the model_fn with graph seed 87654321 ')
  assert report['seeded']['port'].startswith('torch.manual_seed(--seed); ')
  # On the CPU nothing drifts; emulated, every dot's operands are rounded,
  # forward and backward, and the outputs stay within what that explains.
  assert ('device_drift' in checks) == bool(emulated)
  if emulated:
    drift = checks['device_drift']
    assert drift['rounding'] == emulated and drift['dots_rounded'] > 0
    assert 0 < drift['ratio_to_bar'] < 1


@pytest.mark.e2e
@pytest.mark.parametrize('port, first, said', [
    # torch.distributed.all_reduce sums: right on 1 replica, 2x on 2.
    ('summed_gradients', 'one_step (2 replicas)',
     "the port's gradients are 2x the legacy ones"),
    catalogue('flattened_nchw', 'inference', 'a kernel read in another '
              'layout'),
    # A NaN every other predict call is no rounding noise: it widens no bar
    # (the softmax of logits x 1.01 behind it once passed), it is named.
    catalogue('nan_every_other_predict', 'inference',
              'the port is not deterministic: probabilities holds NaN'),
    # Each hidden from every other check (they build the port with its
    # dropout off); the dropout check hands the legacy masks to the port's
    # dropout calls, and reads them at inference.
    ('dropout_at_inference', 'dropout (1 replica)', "the port's predict "
     'draws dropout (at torch_bugs.py:'),
    ('dropout_left_out', 'dropout (1 replica)', "the port's step made 0 "
     'dropout calls where the legacy step drew 1 mask; none took dropout/'),
    ('dropout_twice', 'dropout (1 replica)', "the port's dropout at "
     'torch_bugs.py:'),
    # Draws the kit hands no mask: named where they are, with what to do.
    ('dropout_by_rand', 'dropout (1 replica)', 'the step also drew with '
     'torch.rand_like at torch_bugs.py:'),
    ('noise_always_on', 'one_step (1 replica)', 'cannot put at their '
     'expectation: torch.randn_like at torch_bugs.py:'),
    # Bugs behind a port that differs from itself: named, no bar widened.
    ('weight_decay_behind_a_jitter', 'one_step (1 replica)', 'the port is '
     "not deterministic: in the port's step, taken twice from the same "
     'state'),
    ('logits_scaled_behind_a_jitter', 'inference', 'the port is not '
     "deterministic: in the port's outputs, asked twice at the same "
     'weights'),
])
def test_a_planted_torch_bug_fails_naming_its_cause(tmp_path, port, first,
                                                   said):
  # On an emulated TF32 device: the math is checked at float32 still.
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               f'--port=torch_bugs:{port}', '--notpu_ready',
                               '--emulate_precision=tf32', FAIL_FAST)
  failed_first(result, checks, first, said)
  if port == 'summed_gradients':
    assert checks['one_step (1 replica)']['passed']
    # Not "averaged, as DDP does": read from what its all_reduce gives.
    assert "; the shares' gradients summed, where DDP averages them" in (
        result.stdout)
    assert 'all_reduce is a SUM' in checks[first]['message']


# The ALBERT-style pair (tests/user_code/albert_legacy.py) on PyTorch, from
# the bundle TF 2.15 recorded at its defaults (tests/tf215_artifacts.py):
# weights of 0.02, where the clip engages at no recorded step.
ALBERT = '--port=albert_torch_port:{}'


@from_tf215
@pytest.mark.e2e
def test_the_albert_torch_port_passes_with_clipping_and_dropout_exercised(
    tmp_path):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={TF215_DIR}/albert.npz',
                               ALBERT.format('make_port'), '--notpu_ready')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
  assert all(c['passed'] for c in checks.values()), result.stdout[-3000:]
  assert {'served_predictions', 'evaluation', 'clipping (1 replica)',
          'clipping (2 replicas)', 'updates (2 replicas)',
          'dropout (1 replica)'} <= set(checks)
  # The clip engaged where the kit made it engage, not at a recorded step.
  for label in ('1 replica', '2 replicas'):
    assert checks[f'clipping ({label})']['state'] == 'made'
  assert checks['dropout (1 replica)']['mask_ops'] == [
      'dropout/random_uniform/RandomUniform']
  coverage = json.loads((tmp_path / 'report.json').read_text())['coverage']
  assert [(b['name'].split(' (')[0], b['exercised'])
          for b in coverage['behaviours']] == [
              ('gradient clipping by global norm', True),
              ('random draws of the step', True),
              ('learning-rate schedule', True)]
  # Read over its whole range: the warmup, the decay to 0 at step 20.
  assert checks['schedule']['legacy_shape'] == (
      'rises to 0.0009 at step 2, falls to 0 at step 20, holds 0 from step '
      '20')
  assert coverage['not_exercised'] == []
  assert ("random draws of the step (1 op: dropout): drawn by the legacy "
          "step, its masks handed to the port's dropout calls in order, "
          'compared by dropout') in result.stdout


@from_tf215
@pytest.mark.e2e
@pytest.mark.parametrize('port, first, said', [
    # Both pass every check but clipping: at the recorded steps the clip
    # stays idle, so the kit compares a step at a state where it engages.
    ('no_clipping', 'clipping (1 replica)', 'the port clips otherwise (no '
     'clipping in the port, clipping by another norm'),
    ('clipping_by_the_dense_norm', 'clipping (1 replica)', "an embedding's "
     'gradient made dense, whose rows sum their lookups'),
    # Both pass every check taken with dropout off.
    ('dropout_at_inference', 'dropout (1 replica)', "the port's predict "
     'draws dropout (at albert_torch_port.py:'),
    ('classifier_dropout_left_out', 'dropout (1 replica)', "the port's step "
     'made 0 dropout calls where the legacy step drew 1 mask'),
    # The outputs agree within their bar at the fresh initialisation (a
    # softmax of near-zero scores): the query layer's own output does not.
    ('query_kernel_as_stored', 'inference', 'they part at albert/encoder/'
     'transformer/layer_shared/attention/query (port: albert/encoder/'
     'transformer/layer_shared/attention/query)'),
])
def test_each_albert_torch_bug_fails_at_the_default_recording(tmp_path, port,
                                                               first, said):
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={TF215_DIR}/albert.npz',
                               ALBERT.format(port), '--notpu_ready', FAIL_FAST)
  failed_first(result, checks, first, said)


@pytest.mark.e2e
def test_a_port_that_raises_is_named_and_no_check_blames_the_bundle(
    tmp_path):
  # The loss raises: the checks that take a step say where, those after
  # them that the replay's order broke say so, and none says "record the
  # bundle again" (it replays the kit's port whole).
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_bundle()}',
                               '--port=torch_bugs:loss_raises',
                               '--notpu_ready')
  assert result.returncode == 1, result.stdout[-3000:]
  assert 'First to fix: one_step (1 replica)' in result.stdout
  assert checks['one_step (1 replica)']['message'].startswith(
      'ValueError: expected labels of shape [batch, 10] (at ')
  assert 'torch_bugs.py' in checks['one_step (1 replica)']['message']
  assert not any('record it again' in c['message'] for c in checks.values())
  broken = [c for c in checks.values() if 'broke the order' in c['message']]
  assert broken and all(c['status'] == 'not run' for c in broken)


@from_tf215
@pytest.mark.e2e
def test_the_estimator_checkpoint_becomes_a_state_dict_that_predicts_alike(
    tmp_path):
  output = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint',
                      f'--estimator_dir={TF215_DIR}/estimator',
                      f'--output={output}', PORT, '--verify',
                      f'--predictions={TF215_DIR}/kit_predictions.npz',
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  assert f'Checkpoint: {output}/model-30.pt' in result.stdout
  assert 'Verified on 496 examples: every output agrees' in result.stdout
  assert '; 4 layers agree on the first example' in result.stdout
  # PyTorch itself restores it: the module's, optimizer's and scheduler's
  # state_dicts, in PyTorch's layout.
  state = torch.load(output / 'model-30.pt', weights_only=True)
  legacy = tensor_bundle.read(checkpoint_files.latest(
      os.path.join(TF215_DIR, 'estimator')))
  assert state['step'] == legacy['global_step'] == 30
  assert state['scheduler']['last_epoch'] == 30
  assert set(state['optimizer']) == {'state', 'param_groups'}
  np.testing.assert_array_equal(state['model']['conv1.weight'].numpy(),
                                legacy['conv1/kernel'].transpose(3, 2, 0, 1))
  np.testing.assert_array_equal(state['model']['dense.weight'].numpy(),
                                legacy['dense/kernel'].T)
  rate = state['optimizer']['param_groups'][0]['lr']
  assert rate == pytest.approx(0.05 * 0.96 ** (30 / 100000), rel=1e-12)


ALBERT_CONVERSION = [f'--estimator_dir={TF215_DIR}/albert_estimator',
                     f'--predictions={TF215_DIR}/albert_predictions.npz',
                     '--verify', '--params=' + json.dumps({
                         'data_dir': f'{TF215_DIR}/albert_data',
                         'learning_rate': 1e-3, 'num_train_steps': 20,
                         'num_warmup_steps': 2})]


@from_tf215
@pytest.mark.e2e
def test_a_square_kernel_loaded_untransposed_fails_verify_at_its_layer(
    tmp_path):
  # The ALBERT-style port's query kernel (hidden x hidden) as stored: its
  # outputs agree within their bars, its query layer's does not.
  correct = run_module('migration_tools.checkpoint',
                       f'--output={tmp_path / "right"}', *ALBERT_CONVERSION,
                       '--port=albert_torch_port:make_port',
                       env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert correct.returncode == 0, correct.stderr[-3000:]
  assert 'Verified on 32 examples: every output agrees' in correct.stdout
  assert '; 11 layers agree on the first example (closest to its bar: ' in (
      correct.stdout), correct.stdout
  broken = run_module('migration_tools.checkpoint',
                      f'--output={tmp_path / "wrong"}', *ALBERT_CONVERSION,
                      '--port=albert_torch_port:query_kernel_as_stored',
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert broken.returncode == 1
  line = broken.stderr.strip().splitlines()[-1]
  assert line.startswith('error: verification failed: the outputs agree '
                         'within their bars on 32 examples, but inside the '
                         'model, on the first example, equal up to '
                         'albert/encoder/embedding_hidden_mapping_in; they '
                         'part at albert/encoder/transformer/layer_shared/'
                         'attention/query (port: '), line
  assert 'a square kernel loaded untransposed' in line
  assert not (tmp_path / 'wrong').exists()


def test_a_file_that_is_no_state_dict_is_refused_in_one_line(tmp_path):
  output = tmp_path / 'converted'
  output.mkdir()
  bad = output / 'model-30.pt'
  bad.write_bytes(b'not a checkpoint')
  from kit_pair import mnist_torch  # pylint: disable=g-import-not-at-top
  port = mnist_torch.make_port()
  model = port.make({'learning_rate': 0.05}, 1, False)
  with pytest.raises(KitError) as raised:
    pytorch.PyTorch().load_state(port, model, str(bad))
  assert str(raised.value).startswith(
      f'{bad} is not a checkpoint the converter wrote for this port')
  assert '\n' not in str(raised.value)
  assert str(raised.value).endswith('; convert again')
  # A pickle of objects other than tensors: refused, its code never run,
  # and no advice to load it with weights_only=False cut before its caveat.
  torch.save({'w': _RunsCode(str(tmp_path / 'ran'))}, bad)
  with pytest.raises(KitError) as raised:
    pytorch.PyTorch().load_state(port, model, str(bad))
  assert str(raised.value) == (
      f'{bad} is not a checkpoint the converter wrote for this port (it '
      'holds objects other than tensors, which the kit does not load: '
      'loading them would run code from the file); convert again')
  assert not (tmp_path / 'ran').exists()


class _RunsCode:
  """Unpickled, it would write a file at path."""

  def __init__(self, path: str):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, 'w'))


# The adapter's parts, on small modules ---------------------------------------

def test_the_layouts_hand_over_tfs_names_and_shapes_and_come_back():
  net = torch.nn.Sequential()
  net.add_module('conv', torch.nn.Conv2d(3, 8, (5, 4)))
  net.add_module('norm', torch.nn.BatchNorm2d(8))
  net.add_module('embed', torch.nn.Embedding(11, 6))
  net.add_module('dense', torch.nn.Linear(6, 2))
  model = pytorch.TorchModel()
  model.module = net
  values = model.variables()
  assert {k: v.shape for k, v in values.items()} == {
      'conv/kernel': (5, 4, 3, 8), 'conv/bias': (8,),
      'norm/gamma': (8,), 'norm/beta': (8,), 'norm/moving_mean': (8,),
      'norm/moving_variance': (8,), 'embed/embeddings': (11, 6),
      'dense/kernel': (6, 2), 'dense/bias': (2,)}
  assert model.trainable() == ['conv/kernel', 'conv/bias', 'norm/gamma',
                               'norm/beta', 'embed/embeddings',
                               'dense/kernel', 'dense/bias']
  np.testing.assert_array_equal(values['dense/kernel'],
                                net.dense.weight.detach().numpy().T)
  kernel = np.arange(5 * 4 * 3 * 8, dtype=np.float32).reshape(5, 4, 3, 8)
  model.set_variables({'conv/kernel': kernel})
  np.testing.assert_array_equal(model.variables()['conv/kernel'], kernel)
  # [kh, kw, in, out] -> [out, in, kh, kw]: out 1, in 2, row 3, column 0.
  assert net.conv.weight[1, 2, 3, 0].item() == kernel[3, 0, 2, 1]


def test_bfloat16_parameters_are_read_as_their_float32_values():
  # numpy has no bfloat16: "Got unsupported ScalarType BFloat16" once.
  model = pytorch.TorchModel()
  model.module = torch.nn.Linear(3, 2).to(torch.bfloat16)
  values = model.variables()
  assert values['kernel'].dtype == np.float32
  np.testing.assert_array_equal(
      values['kernel'], model.module.weight.detach().float().numpy().T)
  model.set_variables({'bias': np.array([0.5, 1.25], np.float32)})
  assert model.module.bias.dtype == torch.bfloat16
  np.testing.assert_array_equal(model.variables()['bias'], [0.5, 1.25])


def test_replicas_average_their_shares_gradients_as_ddp_does():
  def model(replicas):
    torch.manual_seed(0)
    made = pytorch.TorchModel()
    made.module = torch.nn.Linear(3, 1)
    made.optimizer = torch.optim.SGD(made.module.parameters(), lr=0.1)
    made.replicas = replicas
    made.loss = lambda x, y: ((made.module(x)[:, 0] - y) ** 2).mean()
    return made

  features = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
  labels = np.arange(8, dtype=np.float32)
  one, four = model(1).train_step(features, labels), model(4).train_step(
      features, labels)
  # Equal shares: the mean of the shares' means is the batch's mean.
  assert four['loss'] == pytest.approx(one['loss'], rel=1e-6)
  for name, gradient in one['gradients'].items():
    np.testing.assert_allclose(four['gradients'][name], gradient, rtol=1e-5)


def test_labels_inside_the_features_name_the_ports_class_and_the_override():
  # The default train_step cuts the labels into shares: with labels inside
  # the features it once ended in a bare IndexError, naming nothing.
  class InFeatures(pytorch.TorchModel):
    pass

  made = InFeatures()
  made.module = torch.nn.Linear(3, 1)
  made.optimizer = torch.optim.SGD(made.module.parameters(), lr=0.1)
  with pytest.raises(KitError) as e:
    made.train_step({'x': np.zeros((4, 3), np.float32),
                     'label': np.zeros(4, np.float32)}, None)
  assert str(e.value).startswith(f'{__file__}:')
  assert '(InFeatures): the input_fn gives its labels inside the features' \
      in str(e.value)
  assert str(e.value).endswith('override train_step in InFeatures to take '
                               'them from the features')
  # And the replicas' convention is read from what all_reduce gives.
  from migration_tools.pair.frameworks.pytorch import ran_on  # pylint: disable=import-outside-toplevel
  assert ran_on.gradients_combined(made) == 'averaged, as DDP does'
  made.all_reduce = sum
  assert ran_on.gradients_combined(made) == 'summed, where DDP averages them'


def test_a_value_read_back_to_python_is_not_tpu_ready():
  class Reads(torch.nn.Module):

    def forward(self, x):
      if x.sum().item() > 0:  # A branch on a value: the graph breaks.
        return x * 2
      return x

  problems = pytorch.export_problems('predict', Reads(), (torch.ones(2, 3),))
  assert [(p.part, p.cause) for p in problems] == [('predict',
                                                    'data_dependent')]
  text = tpu.describe(problems, pytorch.CAUSES)
  assert text.startswith('predict: ')
  assert 'no .item(), .tolist() or Python branches on them' in text
  assert pytorch.export_problems('predict', torch.nn.Linear(3, 2),
                                 (torch.ones(2, 3),)) == []


def _kit_runner():
  """The kit's PyTorch port on one replica, fed one batch; the batch."""
  from kit_pair import mnist_torch  # pylint: disable=import-outside-toplevel
  from migration_tools.pair.frameworks.arrays import runner as array_runner  # pylint: disable=import-outside-toplevel
  generator = np.random.default_rng(0)
  features = generator.uniform(-0.5, 0.5, (8, 28, 28, 1)).astype(np.float32)
  labels = generator.integers(0, 10, 8).astype(np.int64)
  runner = array_runner.ArrayRunner(
      mnist_torch.make_port(), 1, {'learning_rate': 0.05, 'batch_size': 8},
      [(features, labels)], dots=pytorch.PyTorch().dots())
  return runner, features, labels


def test_a_reordered_step_keeps_what_it_left_and_restores_the_model():
  # PyTorch hands out views of its parameters: the step's result must be
  # copied before the model is set back, or the noise it measures is 0.
  runner, features, labels = _kit_runner()
  before = {k: v.copy() for k, v in runner.state().items()}
  again = runner.reordered_step(features, labels)
  assert max(np.abs(again['state'][k] - before[k]).max() for k in before) > 0
  for name, value in runner.state().items():
    np.testing.assert_array_equal(value, before[name])
  runner.step(features, labels)
  for name, value in runner.state().items():  # The same step, its sums reordered.
    np.testing.assert_allclose(again['state'][name], value, atol=1e-6)


@pytest.mark.parametrize('rounding', ['tf32', 'bf16'])
def test_torchs_rounding_is_the_reference_rounding(rounding):
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  from migration_tools.pair.frameworks.pytorch import precision as pytorch_precision  # pylint: disable=import-outside-toplevel
  rounding = precision.EMULATED[rounding]
  generator = np.random.default_rng(0)
  values = np.concatenate([
      generator.standard_normal(20000) * 10.0 ** generator.integers(
          -40, 38, 20000),
      1 + 2.0 ** -11 * np.arange(-8, 9),
      [np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 0.0, -0.0, 1e-42]
  ]).astype(np.float32)
  got = pytorch_precision.round_to(torch.from_numpy(values), rounding)
  np.testing.assert_array_equal(got.numpy(),
                                precision.rounded(values, rounding))
  assert np.sum(got.numpy() != values) > len(values) // 2


def test_emulation_rounds_the_dots_forward_and_backward_and_not_the_bias():
  from migration_tools.pair import precision  # pylint: disable=import-outside-toplevel
  from migration_tools.pair.frameworks.pytorch import precision as pytorch_precision  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  linear, conv = torch.nn.Linear(32, 5), torch.nn.Conv2d(3, 4, 3)
  x, images = torch.randn(6, 32), torch.randn(2, 3, 7, 7)

  def run():
    linear.zero_grad()
    conv.zero_grad()
    out = linear(x), conv(images)
    (out[0].tanh().sum() + out[1].tanh().sum()).backward()
    return [o.detach() for o in out] + [linear.weight.grad.clone(),
                                       conv.weight.grad.clone()]

  exact = run()
  dots = pytorch_precision.TorchDots(precision.BF16)
  with dots.deployed():
    emulated = run()
  # Two forward dots, and the backward's: the weights' gradients at least.
  assert dots.rounded >= 4
  r = lambda t: pytorch_precision.round_to(t, precision.BF16)  # pylint: disable=unnecessary-lambda-assignment
  with torch.no_grad():
    expected = (r(x) @ r(linear.weight).T + linear.bias,
                torch.nn.functional.conv2d(r(images), r(conv.weight),
                                           conv.bias))
  for got, want in zip(emulated, expected):
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
  for got, before in zip(emulated, exact):
    assert (got - before).abs().max() > 0
  # Out of it, float32 again.
  for got, before in zip(run(), exact):
    torch.testing.assert_close(got, before, rtol=0, atol=0)


def test_the_forward_noise_leaves_a_torch_port_as_it_found_it():
  # evaluation measures its noise from the port's own state, which PyTorch
  # hands out as views of its parameters: what is set back must be copies.
  from migration_tools.compare import passes  # pylint: disable=import-outside-toplevel
  runner, features, _ = _kit_runner()
  runner.use_map({n: n for n in runner.shapes()})
  before = {k: v.copy() for k, v in runner.state().items()}

  class Run:
    weights = tuple(before)
    options = type('Options', (), {'seed': 0})

  found = passes.forward_noise(
      Run, runner, runner.state(), runner.predict(features),
      lambda: runner.predict(features))
  assert found.by_output['probabilities'] > 0
  for name, value in runner.state().items():
    np.testing.assert_array_equal(value, before[name])
