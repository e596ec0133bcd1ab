"""The guide's TF 1 optimizer table, a test per row: the Keras settings it
gives reproduce the TF 1 optimizer's updates within the ``updates`` check's
bar, step after step from identical state, as the harness judges a port;
where it names a difference, Keras's defaults fail that bar. The kit reads
each TF 1 optimizer by its ops, kind and hyper-parameters, and names a
slot that starts elsewhere."""
import numpy as np
import pytest
import tensorflow as tf

from kit_core import keras_compat
from migration_tools.compare import checks
from migration_tools.compare import step_record
from migration_tools.compare.checks import updates
from migration_tools.pair import legacy
from migration_tools.pair import legacy_optimizer
from migration_tools.pair import optimizers
from migration_tools.tf1_keras import optimizers as tf1_optimizers

v1 = tf.compat.v1
RATE = 0.1
STEPS = 4
_RNG = np.random.default_rng(7)
_X = _RNG.normal(size=(8, 4)).astype(np.float32)
_Y = _RNG.normal(size=(8, 3)).astype(np.float32)
_START = {'w': _RNG.normal(size=(4, 3)).astype(np.float32),
          'b': np.full((3,), 0.1, np.float32)}
# An embedding, other rows looked up at each step: a sparse gradient.
_TABLE = _RNG.normal(size=(5, 3)).astype(np.float32)
_ROWS = [[1, 3], [0, 3], [1, 4], [2, 3]]


def _start(sparse):
  return {**_START, 'e': _TABLE} if sparse else dict(_START)


class _Legacy:
  """A TF 1 optimizer on a small regression, in a graph of its own."""

  def __init__(self, make, sparse=False):
    self.graph = tf.Graph()
    with self.graph.as_default():
      global_step = v1.train.get_or_create_global_step()
      self.variables = {name: v1.get_variable(name, initializer=value)
                        for name, value in _start(sparse).items()}
      prediction = tf.tanh(_X @ self.variables['w'] + self.variables['b'])
      loss = tf.reduce_mean(tf.square(prediction - _Y))
      self.rows = v1.placeholder(tf.int32, [2])
      if sparse:
        looked_up = tf.gather(self.variables['e'], self.rows)
        loss += tf.reduce_mean(tf.square(tf.tanh(looked_up) - _Y[:2]))
      with legacy_optimizer.watch() as watched:
        optimizer = make(RATE)
        pairs = optimizer.compute_gradients(loss)
        self.train_op = optimizer.apply_gradients(pairs, global_step)
      self.gradients = {v.op.name: g for g, v in pairs}
      self.everything = {v.op.name: v for v in v1.global_variables()}
      self.reading = legacy_optimizer.read(self.graph, self.everything,
                                           watched)
      self.session = v1.Session()
      self.session.run(v1.global_variables_initializer())

  def description(self):
    hyper = {k: legacy.constant_value(v)
             if isinstance(v, (tf.Tensor, tf.Variable)) else v
             for k, v in self.reading.hyper.items()}
    return optimizers.Description(self.reading.kind, hyper)

  def state(self):
    return self.session.run(self.variables)

  def slots(self):
    unused = optimizers.legacy_unused_slots(self.description())
    names = {k: n for k, n in self.reading.slots.items() if k[1] not in unused}
    values = self.session.run({n: self.everything[n] for n in names.values()})
    return {k: values[n] for k, n in names.items()}

  def step(self, number):
    """The step's gradients, then the step."""
    feed = {self.rows: _ROWS[(number - 1) % len(_ROWS)]}
    gradients = self.session.run(self.gradients, feed)
    self.session.run(self.train_op, feed)
    return gradients


def _keras_variable(name, value):
  if keras_compat.is_keras3():
    import keras  # pylint: disable=import-outside-toplevel
    return keras.Variable(value, name=name)
  return tf.Variable(value, name=name)


class _Port:
  """A Keras optimizer applying the legacy step's gradients."""

  def __init__(self, make, sparse=False):
    self.variables = {n: _keras_variable(n, v)
                      for n, v in _start(sparse).items()}
    self.optimizer = make(RATE)
    self.optimizer.build(list(self.variables.values()))
    paths = {keras_compat.variable_path(v): n
             for n, v in self.variables.items()}
    self.slot_variables = optimizers.port_slots(self.optimizer, paths)
    self.kind = optimizers.describe_port(self.optimizer).kind

  def set_state(self, state, slots):
    for name, variable in self.variables.items():
      variable.assign(state[name])
    for key, variable in self.slot_variables.items():
      if key in slots:
        variable.assign(optimizers.to_port(self.kind, key[1], slots[key],
                                           RATE))

  def state(self):
    return {n: v.numpy() for n, v in self.variables.items()}

  def slots(self):
    return {k: optimizers.to_legacy(self.kind, k[1], v.numpy(), RATE)
            for k, v in self.slot_variables.items()}

  def step(self, gradients):
    self.optimizer.apply_gradients(
        [(_tensor(gradients[n]), v) for n, v in self.variables.items()])


def _tensor(gradient):
  """A gradient session.run gave, as a tensor or IndexedSlices."""
  if not hasattr(gradient, 'indices'):
    return tf.constant(gradient)
  return tf.IndexedSlices(tf.constant(gradient.values),
                          tf.constant(gradient.indices),
                          tf.constant(gradient.dense_shape))


def _updates(row_make_legacy, make_keras, sparse=False):
  """The updates check on STEPS steps at identical state: before each, the
  port takes the legacy weights and (after the first, as the harness does)
  its slots."""
  theirs = _Legacy(row_make_legacy, sparse)
  ours = _Port(make_keras, sparse)
  steps = []
  for number in range(1, STEPS + 1):
    before = theirs.state()
    ours.set_state(before, theirs.slots() if number > 1 else {})
    gradients = theirs.step(number)
    ours.step(gradients)
    legacy_slots, port_slots = theirs.slots(), ours.slots()
    assert set(legacy_slots) == set(port_slots), (
        sorted(legacy_slots), sorted(port_slots))
    steps.append(step_record.step(number, before, theirs.state(), ours.state(),
                              legacy_slots, port_slots, RATE))
  return updates.judge('updates', steps), theirs, ours


_REPRODUCED = [r for r in tf1_optimizers.ROWS if r.make_keras is not None]


@pytest.mark.parametrize('row', _REPRODUCED, ids=lambda r: r.legacy)
def test_the_keras_settings_reproduce_the_tf1_updates(row):
  result, theirs, ours = _updates(row.make_legacy, row.make_keras)
  assert result.status == checks.PASSED, result.message
  # Read by its ops, the kind and hyper-parameters agree with the port's.
  description = theirs.description()
  assert description.kind == ours.kind, (description, ours.kind)
  port = optimizers.describe_port(ours.optimizer)
  assert optimizers.differences(description, port) == []


@pytest.mark.parametrize('row', _REPRODUCED, ids=lambda r: r.legacy)
def test_on_an_embedding_as_the_table_says(row):
  # TF 1's sparse updates of some optimizers touch only the rows looked up;
  # the table says which Keras reproduces.
  result, _, _ = _updates(row.make_legacy, row.make_keras, sparse=True)
  assert (result.status == checks.PASSED) == row.sparse_reproduced, (
      result.message)


@pytest.mark.parametrize(
    'row', [r for r in _REPRODUCED if r.keras_defaults is not None],
    ids=lambda r: r.legacy)
def test_keras_defaults_do_not(row):
  # The table names a difference: with Keras as it is, it shows.
  result, theirs, ours = _updates(row.make_legacy, row.keras_defaults)
  differs = optimizers.differences(
      theirs.description(), optimizers.describe_port(ours.optimizer))
  starts = optimizers.initial_slot_differences(
      _Legacy(row.make_legacy).slots(), _Port(row.keras_defaults).slots())
  assert result.status == checks.FAILED or differs, result.message
  assert differs or starts, 'a difference the optimizer check cannot name'


@pytest.mark.parametrize(
    'row', [r for r in tf1_optimizers.ROWS if r.make_keras is None],
    ids=lambda r: r.legacy)
def test_optimizers_no_keras_one_reproduces_are_read_by_what_they_do(row):
  # The harness pairs their slots through a slot map and judges their
  # updates; it does not claim a Keras kind for them.
  reading = _Legacy(row.make_legacy).reading
  assert reading.kind is None
  assert reading.rate is not None, reading.rate_source


def test_an_rms_slot_that_starts_at_0_is_named():
  theirs = _Legacy(lambda lr: v1.train.RMSPropOptimizer(lr)).slots()
  ours = _Port(lambda lr: tf.keras.optimizers.RMSprop(lr)).slots()
  said = optimizers.initial_slot_differences(theirs, ours)
  assert said == ['the rms slots start at 1 in the legacy optimizer and at '
                  '0 in the port\'s'], said
  fixed = _Port(lambda lr: tf1_optimizers.RMSpropFromOnes(lr)).slots()
  assert optimizers.initial_slot_differences(theirs, fixed) == []


def test_the_guide_holds_the_table():
  import os  # pylint: disable=import-outside-toplevel
  guide = os.path.join(os.path.dirname(__file__), '..', '..', 'docs',
                       'MIGRATION.md')
  with open(guide, encoding='utf-8') as f:
    assert tf1_optimizers.markdown_table() in f.read()
