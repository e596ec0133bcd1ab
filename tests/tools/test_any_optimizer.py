"""Optimizers the kit does not read by their ops: their slots found by name,
paired through a slot map, their rate and applied gradients read off the
graph as TPUEstimator's cores applied them; where layers part."""
import numpy as np
import pytest
import tensorflow as tf

from kit_core import keras_compat
from kit_core.errors import one_line
from migration_tools.compare import checks
from migration_tools.compare import layers
from migration_tools.pair import legacy_optimizer
from migration_tools.pair import optimizers

v1 = tf.compat.v1


def test_generic_slots_belong_to_the_longest_variable_of_their_shape():
  shapes = {'dense/kernel': (2, 3), 'dense/kernel/adam_m': (2, 3),
            'dense/kernel/adam_v': (2, 3), 'dense/bias': (3,),
            'dense/bias/adam_m': (3,), 'step/count': ()}
  found = optimizers.generic_slots(shapes)
  assert found == {('dense/kernel', 'adam_m'): 'dense/kernel/adam_m',
                   ('dense/kernel', 'adam_v'): 'dense/kernel/adam_v',
                   ('dense/bias', 'adam_m'): 'dense/bias/adam_m'}
  # Given owners (a graph's trainable variables), only theirs.
  assert optimizers.generic_slots(shapes, ['dense/bias']) == {
      ('dense/bias', 'adam_m'): 'dense/bias/adam_m'}


def test_slot_maps_pair_given_then_equal_names_then_order():
  assert optimizers.resolve_slot_map(['adam_m', 'adam_v'],
                                     ['adam_v', 'adam_m'], {}).pairs == {
                                         'adam_m': 'adam_m',
                                         'adam_v': 'adam_v'}
  by_order = optimizers.resolve_slot_map(['Adam', 'Adam_1'],
                                         ['momentum', 'velocity'], None)
  assert by_order.pairs == {'Adam': 'momentum', 'Adam_1': 'velocity'}
  assert str(by_order) == 'Adam -> momentum (order), Adam_1 -> velocity (order)'
  unpaired = optimizers.resolve_slot_map(['a', 'b', 'c'], ['x', 'y'],
                                         {'c': 'y'})
  assert unpaired.pairs == {'c': 'y'} and unpaired.legacy_only == ['a', 'b']


def test_port_slot_variables_are_found_by_keras_names():
  layer = tf.keras.layers.Dense(2, name='dense')
  layer.build((None, 3))
  optimizer = tf.keras.optimizers.Adam()
  optimizer.build(layer.trainable_variables)
  names = {keras_compat.variable_path(v): keras_compat.variable_path(v)
           for v in layer.trainable_variables}
  found = optimizers.port_slot_variables(optimizer, names)
  tokens = sorted({token for _, token in found})
  assert tokens == (['momentum', 'velocity'] if keras_compat.is_keras3()
                    else ['m', 'v'])
  assert {name for name, _ in found} == set(names)


class _Decaying(v1.train.Optimizer):
  """A subclass with its own apply_gradients and slots, as BERT's."""

  def __init__(self, learning_rate):
    super().__init__(False, 'Decaying')
    self.learning_rate = learning_rate

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    updates = []
    for grad, variable in grads_and_vars:
      slot = v1.get_variable(f'{variable.op.name}/adam_m', variable.shape,
                             initializer=v1.zeros_initializer(),
                             trainable=False)
      updates += [slot.assign(grad),
                  variable.assign_sub(self.learning_rate * grad)]
    return tf.group(*updates)


def _graph(shards, own_gradients):
  graph = tf.Graph()
  with graph.as_default(), legacy_optimizer.watch(shards) as watched:
    x = v1.placeholder(tf.float32, [4, 3])
    kernel = v1.get_variable('dense/kernel', [3, 2],
                             initializer=v1.ones_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel)))
    optimizer = _Decaying(tf.constant(0.5) * 0.2)
    if own_gradients:
      grads, _ = tf.clip_by_global_norm(tf.gradients(loss, [kernel]), 1.0)
      optimizer.apply_gradients(zip(grads, [kernel]))
    else:
      optimizer.minimize(loss)
  variables = {v.op.name: v for v in graph.get_collection(
      v1.GraphKeys.GLOBAL_VARIABLES)}
  return graph, x, loss, legacy_optimizer.read(graph, variables, watched)


def test_a_subclassed_optimizer_is_read_by_what_it_does():
  graph, x, _, reading = _graph(1, own_gradients=True)
  assert reading.kind is None and reading.name == '_Decaying'
  assert reading.rate_source == '_Decaying.learning_rate'
  assert reading.slots == {('dense/kernel', 'adam_m'): 'dense/kernel/adam_m'}
  # What the optimizer applies is the clipped gradient, not the loss's.
  assert 'clip_by_global_norm' in reading.applied['dense/kernel'].name
  with v1.Session(graph=graph) as session:
    session.run(v1.global_variables_initializer())
    assert np.isclose(session.run(reading.rate), 0.1)


def test_on_several_cores_the_optimizers_own_gradients_scale_the_loss():
  """As CrossShardOptimizer: minimize's loss over the cores; a model_fn's
  own tf.gradients is left as it is (the cores' sum is applied)."""
  data = np.ones([4, 3], np.float32)
  applied = {}
  for shards in (1, 2):
    graph, x, _, reading = _graph(shards, own_gradients=False)
    with v1.Session(graph=graph) as session:
      session.run(v1.global_variables_initializer())
      applied[shards] = session.run(reading.applied['dense/kernel'],
                                    {x: data})
  np.testing.assert_allclose(applied[2], applied[1] / 2)


def test_layers_part_at_the_first_layer_over_the_bar_in_legacy_order():
  theirs = {'enc/LayerNorm': np.ones(4), 'enc/dense': np.ones(4) * 2,
            'head': np.ones(3)}
  ours = {'e/ln': np.ones(4), 'e/d': np.ones(4) * 2 + 1e-3, 'h': np.ones(3)}
  pairs = layers.pairs({'enc/LayerNorm/gamma': 'e/ln/gamma',
                        'enc/dense/kernel': 'e/d/kernel',
                        'head/kernel': 'h/kernel', 'top': 'top'})
  figures = layers.compare(theirs, ours, pairs)
  assert figures['parting'] == 'enc/dense'
  assert layers.parting_text(figures) == (
      'equal up to enc/LayerNorm; they part at enc/dense (port: e/d) by '
      '0.0005 of its scale (bar 1e-05)')
  assert layers.compare(theirs, theirs, {k: k for k in theirs})[
      'parting'] is None
  # A NaN in a layer's output is where they part, not a layer that agrees.
  nan = dict(ours, **{'e/d': np.array([np.nan, 2, 2, 2])})
  assert layers.compare(theirs, nan, pairs)['parting'] == 'enc/dense'
  # A port layer that also projects (its output another size) is left
  # out, not a parting: the two sides group their operations otherwise.
  wider = dict(ours, **{'e/d': np.ones(8)})
  figures = layers.compare(theirs, wider, pairs)
  assert figures['parting'] is None
  assert figures['other_sizes'] == {'enc/dense': [4, 8]}


def test_a_legacy_layer_called_again_in_its_scope_gives_its_last_call():
  # ALBERT: one block's variable scope entered at every layer (reuse), its
  # name scopes 'encoder_1/block', 'encoder_2/block': each call is the
  # block's, and the last is its output, as a port's shared layer's last
  # call; a scope named 'layer_1' of its own stays its own.
  from migration_tools.pair import legacy  # pylint: disable=import-outside-toplevel
  def dense(x, name):  # As tf.compat.v1.layers.dense (gone in Keras 3).
    with v1.variable_scope(name):
      return tf.matmul(x, v1.get_variable('kernel', [3, 3]))

  graph = tf.Graph()
  with graph.as_default():
    x = v1.placeholder(tf.float32, [2, 3])
    for _ in range(3):
      with v1.variable_scope('encoder', reuse=v1.AUTO_REUSE):
        x = dense(x, 'block')
    with v1.variable_scope('layer_1'):
      out = dense(x, 'block')
    names = [v.op.name for v in v1.global_variables()]
  found = legacy._layer_tensors(graph, names, 2)  # pylint: disable=protected-access
  assert list(found) == ['encoder/block', 'layer_1/block']
  assert found['layer_1/block'] is out
  assert found['encoder/block'].op.name.startswith('encoder_2/block/')


def test_an_error_in_a_tf_function_shows_its_cause_and_the_users_frame():
  @tf.function
  def user_step(x):
    return x + 'text'  # The user's bug.

  try:
    user_step(tf.constant(1.0))
  except Exception as e:  # pylint: disable=broad-except
    line = one_line(e)
  assert not line.startswith('in user code'), line
  assert 'test_any_optimizer.py:' in line and 'user_step' in line, line


def test_keras2_checkpoints_are_told_from_keras3_ones():
  assert keras_compat.written_by_keras2(['model/layer_with_weights-0/kernel'])
  # A subclassed model's attributes beside a Keras 2 optimizer.
  assert keras_compat.written_by_keras2(['model/dense/kernel/.ATTRIBUTES',
                                         'optimizer/_variables/1/.ATTRIBUTES'])
  assert not keras_compat.written_by_keras2([
      'model/dense/_kernel/.ATTRIBUTES',
      'optimizer/_trainable_variables/0/.ATTRIBUTES'])


def test_a_keras3_call_error_shows_its_reason_not_its_arguments():
  message = ('in user code:\n\n    File "/team/port.py", line 56, in call\n'
             '        x = tf.gather(w, ids)\n\n'
             '    TypeError: Exception encountered when calling Embed.call().\n'
             '\n    \x1b[1mindices has DataType float32\x1b[0m\n\n'
             '    Arguments received by Embed.call():\n'
             '      \u2022 training=False')
  assert one_line(TypeError(message)) == (
      'TypeError: Exception encountered when calling Embed.call(). indices '
      'has DataType float32 (at /team/port.py:56 in call)')


def test_an_unread_optimizer_passes_only_if_its_slots_pair_one_to_one():
  run = {'optimizer': 'AdamWeightDecayOptimizer'}
  ours = optimizers.Description('AdamWeightDecay', {})
  paired = optimizers.resolve_slot_map(['adam_m', 'adam_v'],
                                       ['adam_m', 'adam_v'], {})
  result = checks.optimizer.by_behaviour(run, ours, paired)
  assert result.passed and 'judged at every step in the updates' in (
      result.message)
  # A port optimizer with state the legacy one lacks (Keras Adam's).
  other = optimizers.resolve_slot_map(['adam_m'], ['adam_m', 'velocity'], {})
  failed = checks.optimizer.by_behaviour(run, ours, other)
  assert failed.failed and "the port's velocity pair with nothing" in (
      failed.message)


def test_a_hand_written_port_optimizer_is_read_by_what_it_does():
  # TF 1's RMSProp, read by its ops, against a port's own Keras optimizer
  # of the same update: no kind to compare, so its slots pair and start
  # alike, and updates judges the rest.
  theirs = optimizers.Description(optimizers.RMSPROP, {'rho': 0.9})
  ours = optimizers.Description('TF1RMSProp', {})
  paired = optimizers.resolve_slot_map(['momentum', 'rms'],
                                       ['momentum', 'rms'], {})
  run = {'optimizer': 'RMSPropOptimizer'}
  result = checks.optimizer.by_behaviour(run, ours, paired, theirs)
  assert result.passed, result.message
  assert result.message.startswith(
      "the port's optimizer (TF1RMSProp()) is not one the kit reads by its "
      'config: its slots pair one to one')
  assert result.figures['legacy'] == 'RMSProp(rho=0.9)'
  started = checks.optimizer.by_behaviour(
      run, ours, paired, theirs,
      ["the rms slots start at 1 in the legacy optimizer and at 0 in the "
       "port's"])
  assert started.failed and started.message.startswith(
      "the rms slots start at 1 in the legacy optimizer and at 0 in the "
      "port's: start the port's slots where")


class _OwnSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
  """A team's schedule with no get_config: Keras cannot serialize it."""

  def __call__(self, step):
    return 0.1 / (1.0 + tf.cast(step, tf.float32))


def test_a_port_optimizer_with_its_own_schedule_is_read_by_its_attributes():
  # Its config raises (the schedule has no get_config); the kind and
  # hyper-parameters are still read, the rate left to learning_rate.
  optimizer = tf.keras.optimizers.SGD(_OwnSchedule(), momentum=0.9)
  try:
    optimizer.get_config()
    unserializable = False
  except NotImplementedError:
    unserializable = True
  assert unserializable
  description = optimizers.describe_port(optimizer)
  assert description.kind == optimizers.MOMENTUM
  assert description.hyper['momentum'] == pytest.approx(0.9)
  assert description.hyper['nesterov'] is False
