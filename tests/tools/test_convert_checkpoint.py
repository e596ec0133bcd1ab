"""Estimator checkpoint -> migrated model, checked by predictions."""
import json
import os
import re

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from conftest import last_line, run_module
from estimator_mnist import data as estimator_data
from estimator_mnist import model as estimator_model
from kit_core import progress as progress_lib
from kit_core.errors import KitError
from kit_pair import mnist as kit_pair
from migrate import model as model_lib
from migration_tools.checkpoint import estimator
from migration_tools.checkpoint import keras2
from migration_tools.checkpoint import verify
from migration_tools.pair import flags as pair

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

PORT = kit_pair.make_port()
PARAMS = json.loads(pair.KIT_PAIR['params'])


@pytest.fixture(scope='module')
def estimator_dir(fake_data_dir, tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('estimator') / 'model')
  result = run_module('estimator_mnist', f'--data_dir={fake_data_dir.data_dir}',
                      f'--model_dir={model_dir}', '--train_steps=30',
                      '--batch_size=64', '--learning_rate=0.1',
                      '--noenable_predict', '--eval_steps=0')
  assert result.returncode == 0, result.stderr[-2000:]
  return model_dir


def test_converts_and_verifies_on_the_whole_test_split(estimator_dir,
                                                       fake_data_dir, tmp_path):
  output = tmp_path / 'converted'
  result = run_module('migration_tools.checkpoint',
                      f'--estimator_dir={estimator_dir}', f'--output={output}',
                      '--verify', '--verify_examples=512', '--params=' +
                      json.dumps({**PARAMS, 'data_dir': fake_data_dir.data_dir}))
  assert result.returncode == 0, result.stderr[-2000:]
  assert re.search(r'Checkpoint: .*/converted/ckpt-30', result.stdout)
  match = re.search(r'Verified on 512 examples: every output agrees \(max '
                    r'differences: class_ids 0.00e\+00, probabilities '
                    r'([\d.e+-]+)\)', result.stdout)
  assert match and float(match.group(1)) <= 1e-6, result.stdout
  # Every layer the map pairs, too (the model_fn's four, each on the first
  # example).
  assert '4 layers agree on the first example (closest to its bar: ' in (
      result.stdout), result.stdout
  # Already converted: said so, in one line.
  again = run_module('migration_tools.checkpoint',
                     f'--estimator_dir={output}', f'--output={tmp_path / "x"}')
  assert again.returncode == 1
  assert 'is already a TF 2 (object-based) checkpoint' in last_line(
      again.stderr), again.stderr[-500:]


def test_migrate_resumes_from_the_converted_checkpoint(estimator_dir,
                                                       fake_data_dir, tmp_path):
  output = str(tmp_path / 'converted')
  estimator.convert(estimator_dir, output, PORT, PARAMS)
  result = run_module('migrate', f'--data_dir={fake_data_dir.data_dir}',
                      f'--model_dir={output}', '--train_steps=35',
                      '--batch_size=64', '--steps_per_execution=5',
                      '--noenable_predict')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'resuming at step 30 of 35' in result.stderr


def test_weights_are_carried_exactly(estimator_dir, tmp_path):
  path = estimator.convert(estimator_dir, str(tmp_path / 'out'),
                                    PORT, PARAMS)
  model = model_lib.build_model()
  tf.train.Checkpoint(model=model).restore(path).expect_partial()
  reader = tf.train.load_checkpoint(estimator_dir)
  for variable in model.trainable_variables:
    np.testing.assert_array_equal(
        variable.numpy(), reader.get_tensor(variable.name.removesuffix(':0')))


def _verify(estimator_dir, output, port, data):
  """--verify on 64 examples: the legacy model_fn's, then the port's."""
  params = {**PARAMS, 'data_dir': data.data_dir}
  theirs = verify.legacy_predictions(
      estimator_dir, estimator_model.model_fn, estimator_data.eval_input_fn,
      params, 64, progress_lib.Progress(None))
  return verify.verify(output, port, theirs, params)


def test_mis_mapped_kernel_fails_verification(estimator_dir, fake_data_dir,
                                              tmp_path):
  # Two same-shaped variables swapped: shapes pass, predictions must not.
  swapped = dict(kit_pair.VARIABLE_MAP)
  swapped['conv1/bias'], swapped['dense/bias'] = 'dense/bias', 'conv1/bias'
  with pytest.raises(KitError, match='wrong shape'):
    estimator.convert(estimator_dir, str(tmp_path / 'a'),
                               dataclasses.replace(PORT, variable_map=swapped),
                               PARAMS)
  # Transposing a square kernel is invisible to the shape check.
  output = str(tmp_path / 'b')
  estimator.convert(estimator_dir, output, PORT, PARAMS)
  model = model_lib.build_model()
  checkpoint = tf.train.Checkpoint(model=model)
  checkpoint.restore(tf.train.latest_checkpoint(output)).expect_partial()
  kernel = model.get_layer('conv1').kernel
  kernel.assign(tf.transpose(kernel, [1, 0, 2, 3]))  # 5x5 spatially flipped.
  checkpoint.write(tf.train.latest_checkpoint(output))
  with pytest.raises(KitError, match=r'verification failed: probabilities '
                     r'differs .* or a kernel transposed'):
    _verify(estimator_dir, output, PORT, fake_data_dir)


def test_a_nan_output_never_verifies(estimator_dir, fake_data_dir, tmp_path):
  output = str(tmp_path / 'converted')
  estimator.convert(estimator_dir, output, PORT, PARAMS)

  def nan_probabilities(model, features):
    outputs = dict(PORT.predict(model, features) if PORT.predict else
                   model(features, training=False))
    outputs['probabilities'] = outputs['probabilities'] * float('nan')
    return outputs

  with pytest.raises(KitError, match=re.escape(
      'verification failed: probabilities holds NaN on the port\'s side '
      '(640 of 640 values) on 64 examples (allowed 1e-06: 1e-06, or 4x the '
      'port\'s own rounding noise there); is a variable '
      'missing from the checkpoint, or did the port or the legacy weights '
      'diverge?')):
    _verify(estimator_dir, output,
            dataclasses.replace(PORT, predict=nan_probabilities),
            fake_data_dir)


def test_mismatched_checkpoint_lists_every_problem(tmp_path):
  with tf.Graph().as_default():
    tf.compat.v1.get_variable('conv1/kernel', [3, 3, 1, 32])
    tf.compat.v1.get_variable('conv1/bias', [32])
    tf.compat.v1.get_variable('conv2/kernel/Momentum', [5, 5, 32, 64])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(sess, str(tmp_path / 'est' / 'model.ckpt'))
  result = run_module('migration_tools.checkpoint',
                      f'--estimator_dir={tmp_path / "est"}',
                      f'--output={tmp_path / "out"}')
  assert result.returncode != 0
  line = last_line(result.stderr)
  assert line.startswith('error: the checkpoint does not match the port\'s '
                         'model; missing from the checkpoint: conv2/bias, ')
  assert 'extra in the checkpoint: conv2/kernel/Momentum' in line
  assert ('wrong shape: conv1/kernel [3, 3, 1, 32] -> conv1/kernel '
          '[5, 5, 1, 32]') in line
  assert not os.path.exists(tmp_path / 'out')


def test_no_checkpoint_and_non_empty_output(tmp_path, estimator_dir):
  with pytest.raises(KitError, match='no checkpoint in --estimator_dir'):
    estimator.convert(str(tmp_path), str(tmp_path / 'out'), PORT,
                               PARAMS)
  (tmp_path / 'full').mkdir()
  (tmp_path / 'full' / 'x').write_text('')
  with pytest.raises(KitError, match='exists and is not empty'):
    estimator.convert(estimator_dir, str(tmp_path / 'full'), PORT,
                               PARAMS)


def test_the_newest_checkpoint_is_found_without_a_state_file(estimator_dir,
                                                            tmp_path):
  copied = tmp_path / 'copied'
  os.makedirs(copied)
  for name in os.listdir(estimator_dir):
    if name.startswith('model.ckpt-'):
      os.link(os.path.join(estimator_dir, name), copied / name)
  path = estimator.convert(str(copied), str(tmp_path / 'out'), PORT, PARAMS)
  assert path.endswith('ckpt-30')
  (copied / 'checkpoint').write_text('model_checkpoint_path: "model.ckpt-99"')
  path = estimator.convert(str(copied), str(tmp_path / 'out2'), PORT, PARAMS)
  assert path.endswith('ckpt-30')


@pytest.mark.parametrize('args, message', [
    ((), 'give one of --estimator_dir (an Estimator checkpoint) or '
     '--keras2_dir'),
    (('--estimator_dir=a', '--keras2_dir=b'), 'give one of --estimator_dir'),
    (('--keras2_dir=b', '--verify'), '--verify runs the legacy model_fn: it '
     'goes with --estimator_dir only'),
])
def test_source_flags_fail_in_one_line(tmp_path, args, message):
  result = run_module('migration_tools.checkpoint',
                      f'--output={tmp_path / "out"}', *args)
  assert result.returncode == 1
  assert message in last_line(result.stderr), result.stderr[-500:]
  assert not os.path.exists(tmp_path / 'out')


def test_keras2_dir_refuses_an_estimator_checkpoint(tmp_path, estimator_dir):
  with pytest.raises(KitError, match='is a name-based .* convert it with '
                     '--estimator_dir'):
    keras2.convert_keras2(estimator_dir, str(tmp_path / 'out'),
                                      PORT, PARAMS)
  assert not os.path.exists(tmp_path / 'out')
