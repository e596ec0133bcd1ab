"""What TF 2.15 made, taken over by the TensorFlow running the tests: the
kit's own golden bundle (kit_pair/golden_bundle.npz, in the repository), and
from $KIT_TF215_DIR (tests/tf215_artifacts.py, run by .ci/run on the
estimator profile) an Estimator checkpoint, the port's own Keras 2
checkpoints, the test pairs' bundles; conftest leaves the tests of those out,
and says so, when it is unset."""
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

import kit_bundle
from conftest import FAIL_FAST, TESTS, TOOLS_PYTHONPATH, failed_first
from conftest import last_line, run_compare, run_module
from kit_core import keras_compat
from migration_tools.pair import legacy
from migration_tools.pair import optimizers
from migration_tools.pair import port as port_lib

sys.path.insert(0, os.path.join(TESTS, 'user_code'))
import bert_jax_port  # pylint: disable=g-import-not-at-top,wrong-import-position
import bert_port  # pylint: disable=g-import-not-at-top,wrong-import-position
import wide_deep_port  # pylint: disable=g-import-not-at-top,wrong-import-position

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e
from_tf215 = pytest.mark.from_tf215
# A converted checkpoint predicts as its source: the same weights through
# the same float32 ops, up to kernels that round otherwise between versions.
PREDICTION_ATOL = 1e-6


def _artifact(*parts: str) -> str:
  return os.path.join(os.environ['KIT_TF215_DIR'], *parts)


def _kit_bundle() -> list[str]:
  """The flags that check the kit's port against its own bundle: none where
  no tf.estimator runs (the default there), the bundle named where one
  does (no flag: a live comparison)."""
  return [f'--bundle={kit_bundle.BUNDLE}'] if legacy.runs_here() else []


@pytest.fixture(scope='module')
def expected():
  with np.load(_artifact('expected.npz')) as stored:
    return {k: stored[k] for k in stored.files}


def test_port_matches_the_bundle_recorded_on_2_15(tmp_path):
  result, checks = run_compare(tmp_path / 'replay.json', *_kit_bundle())
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert re.search(r'^Bundle: .*recorded with TensorFlow 2\.15\.1 at kit '
                   r'commit [0-9a-f]{12}; replicas 1,2$', result.stdout, re.M)
  assert len(checks) == 21 and all(
      c['status'] == 'passed' for c in checks.values()), result.stdout
  # Keras 2 draws TF 1's dropout masks; Keras 3 takes the recorded ones.
  handed = checks['dropout (1 replica)'].get('masks')
  assert bool(handed) == keras_compat.is_keras3(), handed
  # Where the Keras port ran, from TensorFlow's own settings.
  assert re.search(r'^Ran on: cpu \(CPU\), 2 devices; tensorflow [\d.]+, '
                   r'keras [\d.]+; matmul float32, convolution float32 '
                   r"\(TensorFlow's TF32 setting \(on\) and the model's "
                   r'compute dtype \(float32\)\)$', result.stdout, re.M)
  with open(tmp_path / 'replay.json', encoding='utf-8') as f:
    ran_on = json.load(f)['port_ran_on']
  assert ran_on['versions']['tensorflow'] == tf.__version__
  # The figures the closing note and docs/EQUIVALENCE.md quote.
  print(f'TF {tf.__version__} against the TF 2.15.1 bundle:',
        {n: c.get('max_abs_diff') for n, c in checks.items()})


def test_broken_port_fails_the_bundle_recorded_on_2_15(tmp_path):
  result, checks = run_compare(tmp_path / 'broken.json', *_kit_bundle(),
                               '--port=broken_ports:missing_relu', FAIL_FAST)
  failed_first(result, checks, 'inference', 'before any training step')


@pytest.mark.parametrize('port, said', [
    pytest.param('wrong_dropout_rate', 'compare the dropout rate',
                 marks=pytest.mark.skipif(
                     not keras_compat.is_keras3(), reason='on Keras 2, '
                     'test_compare.py\'s wrong_dropout_rate case')),
    ('predicts_in_training_mode', "the port's predict draws dropout (at "
     'broken_ports.py:'),
    # Keras 3 names the call that took a mask of another shape.
    ('dropout_on_the_images', "the port's dropout call 1 (at broken_ports.py:"
     if keras_compat.is_keras3() else 'compare the dropout rate'),
])
def test_a_dropout_bug_fails_dropout_on_keras_2_and_3(tmp_path, port, said):
  # Keras 2 draws the legacy masks alike; Keras 3 is handed them
  # (keras_tf/dropout.py). Every other check passes: the others compare
  # with dropout off.
  result, checks = run_compare(tmp_path / 'broken.json', *_kit_bundle(),
                               f'--port=broken_ports:{port}', '--notpu_ready')
  assert result.returncode == 1, result.stdout + result.stderr[-2000:]
  failed = [n for n, c in checks.items() if c['status'] != 'passed']
  assert failed == ['dropout (1 replica)'], result.stdout
  assert said in checks['dropout (1 replica)']['message']


def _served_probabilities(export_dir: str, images: np.ndarray) -> np.ndarray:
  serve = tf.saved_model.load(export_dir).signatures['serving_default']
  return serve(image=tf.constant(images))['probabilities'].numpy()


def _resume(model_dir, *flags):
  """python -m migrate on model_dir at the artifacts' step, and later."""
  result = run_module('migrate', f'--model_dir={model_dir}', '--loop=custom',
                      '--batch_size=64', '--noenable_predict',
                      '--eval_steps=2', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


@from_tf215
@pytest.mark.parametrize('source, flag, key', [
    ('estimator', '--estimator_dir', 'estimator_probabilities'),
    ('port', '--keras2_dir', 'port_probabilities')])
def test_checkpoint_from_2_15_resumes_here_at_its_step(tmp_path, expected,
                                                       source, flag, key):
  converted = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint',
                      f'{flag}={_artifact(source)}', f'--output={converted}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert re.search(r'^Checkpoint: .*/converted/ckpt-30$', result.stdout,
                   re.M), result.stdout
  # At its step: nothing left to train, so it exports the converted weights.
  done = _resume(converted, '--train_steps=30')
  assert 'resuming at step 30 of 30' in done.stderr
  export = re.search(r'SavedModel: (\S+)', done.stdout).group(1)
  served = _served_probabilities(export, expected['images'])
  diff = float(np.max(np.abs(served - expected[key])))
  print(f'{source} checkpoint from TF 2.15.1, served on TF {tf.__version__}: '
        f'probabilities differ by {diff:.3g}')
  assert diff <= PREDICTION_ATOL
  np.testing.assert_array_equal(served.argmax(1), expected[key].argmax(1))
  # And on from there.
  more = _resume(converted, '--train_steps=40')
  assert 'resuming at step 30 of 40' in more.stderr
  assert re.search(r'step 40/40: loss \d', more.stderr)


@from_tf215
def test_savedmodel_exported_on_2_15_serves_here(expected):
  exports = os.listdir(_artifact('port', 'export'))
  assert len(exports) == 1
  served = _served_probabilities(_artifact('port', 'export', exports[0]),
                                 expected['images'])
  diff = float(np.max(np.abs(served - expected['port_probabilities'])))
  print(f'SavedModel from TF 2.15.1 served on TF {tf.__version__}: '
        f'probabilities differ by {diff:.3g}')
  assert diff <= PREDICTION_ATOL


@from_tf215
@pytest.mark.parametrize('optimizer', ['adam', 'momentum'])
def test_keras2_slots_statistics_and_step_carry_over(tmp_path, expected,
                                                     optimizer):
  """A team port with an embedding, batch norm and Adam or momentum slots."""
  prefix = f'wide_deep_{optimizer}'
  params = json.dumps({'optimizer': optimizer})
  converted = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint',
                      f'--keras2_dir={_artifact(prefix)}',
                      f'--output={converted}',
                      '--port=wide_deep_port:make_port', f'--params={params}',
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert result.returncode == 0, result.stderr[-3000:]
  model = wide_deep_port.build_model({'optimizer': optimizer})
  opt = wide_deep_port.make_optimizer({'optimizer': optimizer})
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      tf.train.latest_checkpoint(converted)).assert_consumed()
  state = port_lib.state_variables(model)
  for name, variable in state.items():
    np.testing.assert_array_equal(variable.numpy(),
                                  expected[f'{prefix}/weight/{name}'], name)
  slots = optimizers.port_slots(opt, {n: n for n in state})
  assert len(slots) == len(model.trainable_variables) * (
      2 if optimizer == 'adam' else 1)
  for (name, slot), variable in slots.items():
    np.testing.assert_array_equal(
        variable.numpy(), expected[f'{prefix}/slot/{name}/{slot}'],
        f'{name}/{slot}')
  assert int(opt.iterations.numpy()) == int(expected[f'{prefix}/step']) == 5
  probe, _ = wide_deep_port.examples(32, seed=1)
  diff = np.max(np.abs(model(probe, training=False).numpy() -
                       expected[f'{prefix}/predictions']))
  assert diff <= PREDICTION_ATOL


@from_tf215
def test_migrate_takes_a_keras2_checkpoint_on_keras2_only(tmp_path):
  model_dir = tmp_path / 'port'
  shutil.copytree(_artifact('port'), model_dir)
  if not keras_compat.is_keras3():
    assert 'resuming at step 30 of 30' in _resume(
        model_dir, '--train_steps=30').stderr
    return
  result = run_module('migrate', f'--model_dir={model_dir}',
                      '--train_steps=30')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      f'error: --model_dir {model_dir} holds a checkpoint written by Keras 2 '
      '(TF 2.15), ckpt-30; carry it over with migration-convert-checkpoint '
      f'--keras2_dir={model_dir} --output=NEW_DIR and train in NEW_DIR')
  assert sorted(os.listdir(model_dir)) == sorted(os.listdir(
      _artifact('port')))  # Nothing written.


def _replays(tmp_path, bundle: str, port: str, label: str, *flags) -> dict:
  """migration-compare of port against a bundle recorded on TF 2.15: every
  check passes, dropout included; the checks."""
  result, checks = run_compare(tmp_path / 'report.json',
                               f'--bundle={_artifact(bundle)}',
                               f'--port={port}', *flags)
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  # Dropout included: drawn alike on Keras 2, handed on Keras 3.
  assert all(c['status'] == 'passed' for c in checks.values()), result.stdout
  print(f'{label}, TF {tf.__version__} against its TF 2.15.1 bundle:',
        {n: c.get('max_abs_diff') for n, c in checks.items()})
  return checks


@from_tf215
def test_the_bert_port_passes_its_bundle_recorded_on_2_15(tmp_path):
  """Its own optimizer judged by its updates and slots, its warm start and
  its 2 replicas as on TPU cores, replayed without tf.estimator; and its
  outputs on an emulated bfloat16 device (every dot's operands rounded)
  within what that rounding explains."""
  checks = _replays(tmp_path, 'bert.npz', 'bert_port:make_port',
                    'BERT-shaped pair', '--emulate_precision=bf16')
  assert checks['one_step (2 replicas)']['legacy_reference'] == (
      'as on 2 TPU cores')
  drift = checks['device_drift']
  assert drift['rounding'] == 'bf16' and drift['dots_rounded'] > 0
  assert 0 < drift['ratio_to_bar'] < 1


@from_tf215
def test_the_effnet_port_passes_its_bundle_recorded_on_2_15(tmp_path):
  """Its moving averages, RMSProp slots, host_call and JPEG-bytes serving,
  on 1 and 2 replicas, replayed without tf.estimator."""
  checks = _replays(tmp_path, 'effnet.npz', 'effnet_port:make_port',
                    'EfficientNet-style pair')
  assert {'host_call', 'served_predictions', 'evaluation',
          'updates (2 replicas)'} <= set(checks)
  table = checks['inventory']['train_state']
  averages = [n for n, e in table.items() if e['role'] == 'moving average']
  assert len(averages) == 31 and all(
      table[n]['compared_by'].startswith('inventory') for n in averages)


@from_tf215
def test_a_bert_checkpoint_converted_on_2_15_restores_here(tmp_path,
                                                           expected):
  """Converted on TF 2.15 (Keras 2's layout); on Keras 3 carried over with
  --keras2_dir, as the converter said, slots included."""
  data_dir = _artifact('bert_data')
  params = {'learning_rate': 1e-3, 'num_train_steps': 20,
            'num_warmup_steps': 2, 'data_dir': data_dir}
  source = _artifact('bert_converted')
  if keras_compat.is_keras3():
    carried = tmp_path / 'carried'
    result = run_module('migration_tools.checkpoint',
                        f'--keras2_dir={source}', f'--output={carried}',
                        '--port=bert_port:make_port',
                        f'--params={json.dumps(params)}',
                        env={'PYTHONPATH': TOOLS_PYTHONPATH})
    assert result.returncode == 0, result.stderr[-3000:]
    assert '(step 5, 41 variables, 82 slots)' in result.stderr
    source = str(carried)
  model = bert_port.build_model(params)
  optimizer = bert_port.make_optimizer(params)
  optimizer.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=optimizer).restore(
      tf.train.latest_checkpoint(source)).assert_consumed()
  assert int(optimizer.iterations.numpy()) == 5
  assert all(np.any(m.numpy()) for m in optimizer.adam_m)
  features = {k.split('/', 1)[1]: v for k, v in expected.items()
              if k.startswith('bert_features/')}
  probabilities = bert_port.predict(model, features)['probabilities'].numpy()
  diff = float(np.max(np.abs(probabilities -
                             expected['bert_probabilities'])))
  print(f'BERT checkpoint converted on TF 2.15.1, predicting on TF '
        f'{tf.__version__}: probabilities differ by {diff:.3g}')
  assert diff <= PREDICTION_ATOL


@from_tf215
def test_a_bert_checkpoint_verifies_here_against_predictions_from_2_15(
    tmp_path):
  """Where tf.estimator may be gone, --verify compares with the legacy
  predictions recorded on TF 2.15 (--record_predictions): the Estimator
  checkpoint converted here, slots included, predicts as it did there."""
  params = {'learning_rate': 1e-3, 'num_train_steps': 20,
            'num_warmup_steps': 2, 'data_dir': _artifact('bert_data')}
  flags = [f'--estimator_dir={_artifact("bert_estimator")}',
           '--port=bert_port:make_port', f'--params={json.dumps(params)}',
           '--verify',
           f'--predictions={_artifact("bert_predictions.npz")}']
  # Without the model_fn, the checkpoint does not say which of the
  # same-shaped biases (query, key, value, ...) is which: refused.
  output = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint', *flags,
                      f'--output={output}',
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert result.returncode == 1
  assert 'pair with the port\'s only by the order the model_fn creates ' \
      'them' in last_line(result.stderr), result.stderr[-2000:]
  assert not output.exists()
  # With the map (the legacy names in creation order, the port's likewise).
  model = bert_port.build_model(params)
  legacy_names = [name for name, _ in bert_jax_port.NAMES]
  variable_map = tmp_path / 'map.json'
  variable_map.write_text(json.dumps(dict(zip(
      legacy_names, port_lib.state_variables(model)))))
  result = run_module('migration_tools.checkpoint', *flags,
                      f'--output={output}', f'--variable_map={variable_map}',
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  assert result.returncode == 0, result.stderr[-3000:]
  assert ('Carried: 41 variables, the step (5, as optimizer.iterations), 82 '
          'optimizer slots (adam_m x41, adam_v x41;') in result.stdout
  assert 'Verified on 64 examples: every output agrees' in result.stdout
  # Each layer too, paired by the map (on Keras 3 as on Keras 2).
  assert re.search(r'; [1-9]\d* layers agree on the first example',
                   result.stdout), result.stdout
