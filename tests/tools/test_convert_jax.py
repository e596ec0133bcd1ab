"""migration-convert-checkpoint on the jax profile: Estimator checkpoints
written on TF 2.15 (KIT_TF215_DIR) carried to ports on JAX and verified
against the legacy predictions recorded there, with no TensorFlow in the
process: the kit's model to Keras 3's .weights.h5, the BERT-shaped pair's
(41 variables, 82 Adam slots) to its plain-JAX port's named arrays."""
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest

import kit_bundle
from conftest import TESTS, TF215_DIR, TOOLS_PYTHONPATH, catalogue
from conftest import last_line, run_module
from kit_core import checkpoint_files
from kit_core import tensor_bundle
from migration_tools.pair import array_port

sys.path.insert(0, os.path.join(TESTS, 'user_code'))
import bert_jax_port  # pylint: disable=g-import-not-at-top,wrong-import-position

pytestmark = [pytest.mark.e2e, pytest.mark.from_tf215]


def _convert(*args: str):
  return run_module('migration_tools.checkpoint', *args,
                    env={'PYTHONPATH': TOOLS_PYTHONPATH})


def _legacy(folder: str) -> dict:
  """The latest checkpoint of an artifact folder, read with numpy alone."""
  return tensor_bundle.read(checkpoint_files.latest(
      os.path.join(TF215_DIR, folder)))


def _bert_params() -> str:
  data_dir = os.path.join(TF215_DIR, 'bert_data')
  return json.dumps({'data_dir': data_dir, 'learning_rate': 1e-3,
                     'num_train_steps': 20, 'num_warmup_steps': 2})


def test_the_kits_checkpoint_becomes_keras3_weights_that_predict_alike(
    tmp_path):
  output = tmp_path / 'converted'
  result = _convert(f'--estimator_dir={TF215_DIR}/estimator',
                    f'--output={output}', '--verify',
                    f'--predictions={TF215_DIR}/kit_predictions.npz')
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  assert f'Checkpoint: {output}/model.weights.h5' in result.stdout
  # 496: the test set's 497 images in whole batches of 16 (verify.BATCH).
  assert 'Verified on 496 examples: every output agrees' in result.stdout
  assert '; 4 layers agree on the first example' in result.stdout
  # Keras itself restores it, the optimizer's step with the weights.
  from migrate_jax import model as model_lib  # pylint: disable=g-import-not-at-top
  model = model_lib.build_model()
  optimizer = model_lib.make_optimizer(0.05)
  model.compile(optimizer=optimizer)
  optimizer.build(model.trainable_variables)
  model.load_weights(str(output / 'model.weights.h5'))
  legacy = _legacy('estimator')
  assert int(optimizer.iterations.value) == legacy['global_step'] == 30
  for variable in model.trainable_variables:
    np.testing.assert_array_equal(np.asarray(variable.value),
                                  legacy[variable.path])


def test_the_bert_checkpoint_carries_its_82_slots_to_a_plain_jax_port(
    tmp_path):
  output = tmp_path / 'converted'
  result = _convert(f'--estimator_dir={TF215_DIR}/bert_estimator',
                    f'--output={output}', '--port=bert_jax_port:make_port',
                    f'--params={_bert_params()}', '--verify',
                    f'--predictions={TF215_DIR}/bert_predictions.npz')
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
  assert ('Carried: 41 variables, the step (5, as optimizer.iterations), 82 '
          'optimizer slots (adam_m x41, adam_v x41;') in result.stdout
  assert 'Verified on 64 examples: every output agrees' in result.stdout
  assert re.search(r'; [1-9]\d* layers agree on the first example',
                   result.stdout), result.stdout
  model = bert_jax_port.BertJaxModel({}, 1, False)
  array_port.read_state(model, str(output / 'state-5.npz'))
  legacy = _legacy('bert_estimator')
  assert model.step_count() == 5
  slots = model.slots()
  assert len(slots) == 82
  for (name, slot), value in slots.items():
    np.testing.assert_array_equal(value, legacy[f'{name}/{slot}'])
  for name, value in model.variables().items():
    np.testing.assert_array_equal(value, legacy[name])


def test_a_mispaired_variable_fails_verify_and_leaves_nothing(tmp_path):
  # Two kernels of one shape: only predictions tell them apart.
  pairs = {name: name for name, _ in bert_jax_port.NAMES}
  value = 'bert/encoder/layer_0/attention/self/value/kernel'
  dense = 'bert/encoder/layer_0/attention/output/dense/kernel'
  pairs[value], pairs[dense] = dense, value
  variable_map = tmp_path / 'map.json'
  variable_map.write_text(json.dumps(pairs))
  output = tmp_path / 'converted'
  result = _convert(f'--estimator_dir={TF215_DIR}/bert_estimator',
                    f'--output={output}', '--port=bert_jax_port:make_port',
                    f'--params={_bert_params()}', '--verify',
                    f'--variable_map={variable_map}',
                    f'--predictions={TF215_DIR}/bert_predictions.npz')
  assert result.returncode == 1, result.stdout[-2000:]
  line = last_line(result.stderr)
  assert 'verification failed: probabilities' in line, line
  assert 'is a variable mis-paired or a kernel transposed?' in line
  assert f'{output} was removed' in line
  assert not output.exists()


def test_predictions_of_another_checkpoint_are_refused_before_any_work(
    tmp_path):
  # The first checkpoint of the same model_dir: step 0, not 30.
  older = tmp_path / 'older'
  older.mkdir()
  for name in os.listdir(os.path.join(TF215_DIR, 'estimator')):
    if name.startswith('model.ckpt-0.'):
      shutil.copy(os.path.join(TF215_DIR, 'estimator', name), older)
  output = tmp_path / 'converted'
  result = _convert(f'--estimator_dir={older}', f'--output={output}',
                    '--verify',
                    f'--predictions={TF215_DIR}/kit_predictions.npz')
  assert result.returncode == 1
  line = last_line(result.stderr)
  assert 'was recorded from model.ckpt-30 (step 30), not from the ' in line
  assert 'model.ckpt-0 (step 0)' in line and '--record_predictions' in line
  assert not output.exists()


@pytest.mark.parametrize('args, said', [
    (['--verify'], '--verify of a port on JAX 0.'),
    catalogue([f'--predictions={TF215_DIR}/kit_predictions.npz'],
              '--predictions is what --verify compares with: add --verify'),
    catalogue(['--verify', f'--predictions={kit_bundle.BUNDLE}'],
              'is not a recording of predictions'),
    catalogue(['--record_predictions=x.npz'],
              '--record_predictions records the legacy model_fn'),
])
def test_bad_flags_are_refused_in_one_line(tmp_path, args, said):
  output = tmp_path / 'converted'
  result = _convert(f'--estimator_dir={TF215_DIR}/estimator',
                    f'--output={output}', *args)
  assert result.returncode == 1
  assert said in last_line(result.stderr), result.stderr[-2000:]
  assert not output.exists()
