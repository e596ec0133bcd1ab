"""The checkpoint converter's mapping and slot logic, fast: a tiny name-based
checkpoint written here, a toy port, no model_fn run and no training.
tests/tools/test_convert_checkpoint.py runs the command end to end."""
import os

import numpy as np
import pytest
import tensorflow as tf

from kit_core.errors import KitError
from migration_tools.checkpoint import arrays
from migration_tools.checkpoint import estimator
from migration_tools.checkpoint import files
from migration_tools.pair import array_port
from migration_tools.pair import port as port_lib
from toy_array_model import Linear

RATE = 0.1
KERNEL = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
BIAS = np.array([0.5, -0.5], np.float32)


def _name_based(folder, values: dict, step: int = 7) -> str:
  """A TF 1 checkpoint of values (and global_step) in folder; its prefix."""
  with tf.Graph().as_default():
    variables = [tf.compat.v1.Variable(v, name=k) for k, v in values.items()]
    variables.append(tf.compat.v1.Variable(np.int64(step), name='global_step'))
    saver = tf.compat.v1.train.Saver(variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, str(folder / 'model.ckpt'), global_step=step)


def _momentum_checkpoint(folder) -> str:
  return _name_based(folder, {
      'dense/kernel': KERNEL, 'dense/bias': BIAS,
      'dense/kernel/Momentum': np.full((3, 2), 2.0, np.float32),
      'dense/bias/Momentum': np.full((2,), 3.0, np.float32)})


def _port(momentum: float = 0.9, **pieces) -> port_lib.Port:
  def build_model(params):
    del params
    inputs = tf.keras.Input((3,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2, name='dense')(inputs))
  return port_lib.Port(
      build_model=build_model,
      make_optimizer=lambda params: tf.keras.optimizers.SGD(
          RATE, momentum=momentum),
      trainer_class=object, **pieces)


def _restored(output: str, port: port_lib.Port):
  model, optimizer, _ = files.build(port, {})
  tf.train.Checkpoint(model=model, optimizer=optimizer).restore(
      tf.train.latest_checkpoint(output)).expect_partial()
  return model, optimizer


def test_the_checkpoint_splits_into_model_slots_and_step(tmp_path):
  _momentum_checkpoint(tmp_path)
  checkpoint = estimator.read_checkpoint(str(tmp_path))
  assert sorted(checkpoint.model) == ['dense/bias', 'dense/kernel']
  assert sorted(checkpoint.slots) == [('dense/bias', 'momentum'),
                                      ('dense/kernel', 'momentum')]
  assert checkpoint.kind == 'Momentum' and checkpoint.step == 7


def test_weights_step_and_momentum_cross_in_the_ports_convention(tmp_path):
  _momentum_checkpoint(tmp_path / 'old')
  port = _port()
  estimator.convert(str(tmp_path / 'old'), str(tmp_path / 'new'), port, {})
  model, optimizer = _restored(str(tmp_path / 'new'), port)
  kernel, bias = model.get_layer('dense').get_weights()
  np.testing.assert_array_equal(kernel, KERNEL)
  np.testing.assert_array_equal(bias, BIAS)
  assert int(optimizer.iterations.numpy()) == 7
  # TF 1 accumulates gradients (a = m a + g; w -= lr a); Keras keeps the
  # step itself (v = m v - lr g; w += v): the slot crosses as -lr a.
  slots = sorted(float(np.unique(v.numpy())[0])
                 for v in optimizer.variables
                 if v.shape in ((3, 2), (2,)))
  assert slots == pytest.approx([-RATE * 3.0, -RATE * 2.0])


def test_without_slots_the_optimizer_starts_afresh_at_the_step(tmp_path):
  _momentum_checkpoint(tmp_path / 'old')
  port = _port()
  estimator.convert(str(tmp_path / 'old'), str(tmp_path / 'new'), port, {},
                    slots=False)
  _, optimizer = _restored(str(tmp_path / 'new'), port)
  assert int(optimizer.iterations.numpy()) == 7
  assert all(not np.any(v.numpy()) for v in optimizer.variables
             if v.shape in ((3, 2), (2,)))


def test_a_given_map_pairs_by_name_and_a_wrong_one_lists_every_mismatch():
  ours = {'out/kernel': tf.Variable(np.zeros((3, 2))),
          'out/bias': tf.Variable(np.zeros(2))}
  theirs = {'dense/kernel': KERNEL.shape, 'dense/bias': BIAS.shape}
  files.check_pairs(theirs, ours, {'dense/kernel': 'out/kernel',
                                   'dense/bias': 'out/bias'})
  with pytest.raises(KitError) as raised:
    files.check_pairs(theirs, ours, {'dense/kernel': 'out/bias',
                                     'dense/bias': 'out/kernel'})
  said = str(raised.value)
  assert 'dense/kernel' in said and 'dense/bias' in said, said


def test_a_checkpoint_of_another_optimizer_is_refused_before_writing(
    tmp_path):
  _name_based(tmp_path / 'old', {
      'dense/kernel': KERNEL, 'dense/bias': BIAS,
      'dense/kernel/Adam': KERNEL, 'dense/kernel/Adam_1': KERNEL,
      'dense/bias/Adam': BIAS, 'dense/bias/Adam_1': BIAS,
      'beta1_power': np.float32(0.9), 'beta2_power': np.float32(0.999)})
  with pytest.raises(KitError, match='Adam slots and the port\'s optimizer '
                     'is Momentum'):
    estimator.convert(str(tmp_path / 'old'), str(tmp_path / 'new'), _port(),
                      {})
  assert not (tmp_path / 'new').exists()


def test_a_model_of_other_shapes_is_refused_with_nothing_written(tmp_path):
  _name_based(tmp_path / 'old', {'dense/kernel': np.zeros((4, 2), np.float32),
                                 'dense/bias': BIAS})
  with pytest.raises(KitError, match='does not match'):
    estimator.convert(str(tmp_path / 'old'), str(tmp_path / 'new'), _port(),
                      {})
  assert not (tmp_path / 'new').exists()


def test_an_object_based_checkpoint_says_what_it_is(tmp_path):
  tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(tmp_path / 'ckpt'))
  with pytest.raises(KitError, match='already a TF 2'):
    estimator.read_checkpoint(str(tmp_path))


def test_moving_averages_are_read_apart_and_carried_only_when_asked(tmp_path):
  source = tmp_path / 'source'
  source.mkdir()
  averages = {'dense/kernel': KERNEL + 1, 'dense/bias': BIAS + 1}
  _name_based(source, {'dense/kernel': KERNEL, 'dense/bias': BIAS, **{
      f'{k}/ExponentialMovingAverage': v for k, v in averages.items()}})
  checkpoint = estimator.read_checkpoint(str(source))
  assert sorted(checkpoint.model) == ['dense/bias', 'dense/kernel']
  assert sorted(checkpoint.averages) == ['dense/bias', 'dense/kernel']
  port = _port(momentum=0.0)
  estimator.convert(str(source), str(tmp_path / 'raw'), port, {},
                    slots=False)
  model, _ = _restored(tmp_path / 'raw', port)
  np.testing.assert_array_equal(model.get_layer('dense').kernel, KERNEL)
  estimator.convert(str(source), str(tmp_path / 'averaged'), port, {},
                    slots=False, averages_as_weights=True)
  model, _ = _restored(tmp_path / 'averaged', port)
  np.testing.assert_array_equal(model.get_layer('dense').kernel, KERNEL + 1)
  np.testing.assert_array_equal(model.get_layer('dense').bias, BIAS + 1)


def test_averages_as_weights_without_averages_is_refused(tmp_path):
  _momentum_checkpoint(tmp_path)
  with pytest.raises(KitError, match='holds no moving average'):
    estimator.convert(str(tmp_path), str(tmp_path / 'out'), _port(), {},
                      averages_as_weights=True)
  assert not (tmp_path / 'out').exists()


# To a port on arrays (checkpoint/arrays.py), the toy of test_array_port.
class _OwnOptimizer(Linear):
  """The toy, its optimizer one the kit does not know: slots by name."""

  def describe_optimizer(self):
    return None

  def slots(self):
    return {('dense/w', 'acc'): self.velocity.copy()}

  def set_slots(self, values):
    self.velocity = np.array(values[('dense/w', 'acc')], np.float32)


def _array_port(model=Linear) -> array_port.ArrayPort:
  return array_port.ArrayPort(make=model,
                              variable_map={'dense/kernel': 'dense/w'})


def test_an_array_port_gets_weights_slots_and_step_as_named_arrays(tmp_path):
  (tmp_path / 'ckpt').mkdir()
  accumulator = np.full((3, 2), 4.0, np.float32)
  _name_based(tmp_path / 'ckpt', {'dense/kernel': KERNEL,
                                  'dense/kernel/acc': accumulator})
  path = arrays.convert(str(tmp_path / 'ckpt'), str(tmp_path / 'out'),
                        _array_port(_OwnOptimizer), {'learning_rate': RATE})
  assert path == str(tmp_path / 'out' / 'state-7.npz')
  model = _OwnOptimizer({'learning_rate': RATE}, 1, False)
  array_port.read_state(model, path)
  np.testing.assert_array_equal(model.variables()['dense/w'], KERNEL)
  np.testing.assert_array_equal(model.slots()[('dense/w', 'acc')],
                                accumulator)
  assert model.step_count() == 7


def test_an_array_port_refuses_what_it_cannot_carry(tmp_path):
  (tmp_path / 'ckpt').mkdir()
  _name_based(tmp_path / 'ckpt', {
      'dense/kernel': KERNEL,
      'dense/kernel/Momentum': np.full((3, 2), 2.0, np.float32)})
  # TF 1's Momentum slot is Keras's times -rate: a rate an ArrayModel gives
  # only after a step.
  with pytest.raises(KitError, match=r'Momentum slots are carried to '
                     r'Keras\'s by the learning rate .* \(--no_slots\)'):
    arrays.convert(str(tmp_path / 'ckpt'), str(tmp_path / 'out'),
                   _array_port(), {'learning_rate': RATE})
  assert not (tmp_path / 'out').exists()
  # The same checkpoint into a port of another optimizer.
  with pytest.raises(KitError, match='the checkpoint holds Momentum slots and '
                     'the port\'s optimizer is not described'):
    arrays.convert(str(tmp_path / 'ckpt'), str(tmp_path / 'out'),
                   _array_port(_OwnOptimizer), {'learning_rate': RATE})
  path = arrays.convert(str(tmp_path / 'ckpt'), str(tmp_path / 'out'),
                        _array_port(), {'learning_rate': RATE}, slots=False)
  assert os.path.basename(path) == 'state-7.npz'


def test_verify_holds_each_output_to_its_own_rounding_noise():
  # Trained weights round by more than a fresh start's: a fixed 1e-6 once
  # failed the default job's trained checkpoint at 1.01e-6. The bar is the
  # larger of 1e-6 and 4x the port's own noise on that output.
  from migration_tools.checkpoint import predictions  # pylint: disable=import-outside-toplevel
  from migration_tools.checkpoint import verify  # pylint: disable=import-outside-toplevel
  from migration_tools.compare import noise  # pylint: disable=import-outside-toplevel
  theirs_p = np.full((4, 3), 0.25, np.float32)
  theirs = predictions.Recorded({'name': 'ckpt'}, np.zeros((4, 1)),
                                {'probabilities': theirs_p}, False, 4, {})
  ours = {'probabilities': theirs_p + np.float32(2e-6)}
  with pytest.raises(KitError, match=r'\(allowed 1e-06: 1e-06, or 4x'):
    verify.judge(theirs, ours, {})
  rounding = noise.forward(ours, {'probabilities': ours['probabilities'] +
                                  np.float32(1e-6)}, again=dict(ours))
  assert verify.judge(theirs, ours, {}, rounding).examples == 4
  # A port that differs from itself between two calls takes no bar from it.
  jittered = noise.forward(ours, dict(ours), again={
      'probabilities': ours['probabilities'] + np.float32(1e-3)})
  with pytest.raises(KitError, match=r'verification failed: the port is not '
                     r'deterministic: in the port\'s outputs, asked twice'):
    verify.judge(theirs, ours, {}, jittered)


def test_verify_names_the_first_layer_that_parts_when_the_outputs_agree():
  # A square kernel loaded untransposed can move a model's outputs by less
  # than their rounding: its layer's output moves by far more.
  from migration_tools.checkpoint import predictions  # pylint: disable=import-outside-toplevel
  from migration_tools.checkpoint import verify  # pylint: disable=import-outside-toplevel
  outputs = {'probabilities': np.full((4, 3), 0.25, np.float32)}
  hidden = np.linspace(-1, 1, 8).astype(np.float32)
  legacy = {'embed': hidden, 'dense': hidden * 2}
  theirs = predictions.Recorded({'name': 'ckpt'}, np.zeros((4, 1)), outputs,
                                False, 4, {}, legacy)
  pairs = {'embed/w': 'emb/w', 'dense/kernel': 'query/kernel'}
  agreeing = verify.Layers(theirs, lambda: {'emb': hidden,
                                            'query': hidden * 2}, pairs)
  result = verify.judge(theirs, dict(outputs), {}, None, agreeing)
  assert result.layers['compared'] == ['embed', 'dense']
  assert verify.layers_text(result).startswith(
      '2 layers agree on the first example (closest to its bar: ')
  parting = verify.Layers(theirs, lambda: {'emb': hidden,
                                           'query': hidden[::-1] * 2}, pairs)
  with pytest.raises(KitError, match=(
      r'^verification failed: the outputs agree within their bars on 4 '
      r'examples, but inside the model, on the first example, equal up to '
      r'embed; they part at dense \(port: query\) by 2 of its scale \(bar '
      r'1e-05\): is a variable of that layer mis-paired, or a square kernel '
      r'loaded untransposed')):
    verify.judge(theirs, dict(outputs), {}, None, parting)
  # A recording made before layers were kept: the outputs alone, said so.
  old = predictions.Recorded({'name': 'ckpt'}, np.zeros((4, 1)), outputs,
                             False, 4, {})
  result = verify.judge(old, dict(outputs), {}, None, verify.Layers(
      old, lambda: {'emb': hidden}, pairs))
  assert verify.layers_text(result) == (
      'no layer compared: the legacy predictions hold no layer outputs (a '
      'recording made before --verify compared layers: record it again on '
      'TF 2.15 with migration-convert-checkpoint --record_predictions; or no '
      'legacy variable lies in a name scope)')
