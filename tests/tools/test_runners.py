"""Both sides behind one interface (migration_tools/pair/side.py): every
runner answers every question of its side, a question left unanswered stops
the runner from being made, and a tape records and replays exactly the
legacy side's questions."""
import dataclasses
import inspect

import numpy as np
import pytest

from conftest import cpu_strategy
from migration_tools.pair import legacy
from migration_tools.pair.frameworks.keras_tf import runner as port_runner
from migration_tools.pair import recorded
from migration_tools.pair import side

LEGACY_RUNNERS = (legacy.LegacyRunner, recorded.RecordingRunner,
                  recorded.ReplayedRunner)


@pytest.mark.parametrize('runner_class', LEGACY_RUNNERS,
                         ids=lambda c: c.__name__)
def test_each_legacy_runner_answers_every_question(runner_class):
  assert issubclass(runner_class, side.LegacySide)
  assert not runner_class.__abstractmethods__


def test_the_port_runner_answers_every_question():
  assert issubclass(port_runner.PortRunner, side.PortSide)
  assert not port_runner.PortRunner.__abstractmethods__


@pytest.mark.parametrize('runner_class', [*LEGACY_RUNNERS,
                                          port_runner.PortRunner],
                         ids=lambda c: c.__name__)
def test_a_shared_question_has_one_signature_on_every_side(runner_class):
  for name in side.members(side.Side):
    theirs = getattr(runner_class, name)
    if isinstance(theirs, property):
      continue
    declared = inspect.signature(getattr(side.Side, name))
    assert list(inspect.signature(theirs).parameters) == list(
        declared.parameters), (runner_class.__name__, name)


def test_a_side_that_leaves_a_question_cannot_be_made():

  class Half(side.LegacySide):

    def state(self):
      return {}

  with pytest.raises(TypeError, match='abstract') as raised:
    Half()  # pylint: disable=abstract-class-instantiated
  assert 'step' in str(raised.value) and 'state' not in str(
      raised.value).split('methods')[-1].split(', ')


def test_a_tape_records_and_replays_the_legacy_sides_questions():
  assert set(side.QUESTIONS) == set(side.members(side.LegacySide)) - {
      'set_state', 'replicas'}

  class Fake:
    replicas = 1

    def __getattr__(self, name):
      return lambda *args: {'asked': name, 'args': len(args)}

  tape = recorded.Tape()
  recording = recorded.RecordingRunner(Fake(), tape, '1 replica')
  arguments = {q: [np.zeros(1)] * (len(inspect.signature(
      getattr(side.LegacySide, q)).parameters) - 1) for q in side.QUESTIONS}
  answers = {q: getattr(recording, q)(*arguments[q]) for q in side.QUESTIONS}
  replayed = recorded.ReplayedRunner(tape, '1 replica')
  assert replayed.replicas == 1
  assert {q: getattr(replayed, q)(*arguments[q])
          for q in side.QUESTIONS} == answers


def test_a_keras_ports_reordered_step_leaves_its_result_and_restores_all():
  # The port's own noise (compare/noise.py): the same step, its examples in
  # another order within each replica's share, then the port as it was.
  from kit_pair import mnist  # pylint: disable=import-outside-toplevel
  generator = np.random.default_rng(0)
  batches = [(generator.uniform(size=(8, 28, 28, 1)).astype(np.float32),
              generator.integers(0, 10, 8).astype(np.int64))
             for _ in range(2)]
  # Dropout off while its steps are traced, as in a comparison.
  with port_runner.dropout_disabled():
    runner = port_runner.PortRunner(
        mnist.make_port(), cpu_strategy(2),
        {'learning_rate': 0.05, 'batch_size': 8}, batches)
    runner.use_map(mnist.VARIABLE_MAP)
    before, step = runner.state(), runner.global_step()
    again = runner.reordered_step(*batches[0])
    after_noise = runner.state(), runner.global_step()
    answer = runner.step(*batches[0])  # The same step, its sums reordered.
  assert max(np.abs(again['state'][k] - before[k]).max() for k in before) > 0
  assert set(again['gradients']) == set(mnist.VARIABLE_MAP)
  for name, value in after_noise[0].items():
    np.testing.assert_array_equal(value, before[name])
  assert after_noise[1] == step
  assert abs(answer['loss'] - again['loss']) < 1e-6
  for name, value in runner.state().items():
    np.testing.assert_allclose(again['state'][name], value, atol=1e-6)


def _mnist_runner(batches, port=None):
  from kit_pair import mnist  # pylint: disable=import-outside-toplevel
  with port_runner.dropout_disabled():
    runner = port_runner.PortRunner(
        port or mnist.make_port(), cpu_strategy(2),
        {'learning_rate': 0.05, 'batch_size': 8}, batches)
  runner.use_map(mnist.VARIABLE_MAP)
  return runner


def _steps(runner, batches):
  with port_runner.dropout_disabled():
    return [runner.step(*batch) for batch in batches]


def test_a_rewound_keras_runner_steps_as_a_fresh_one_to_the_bit():
  # A pass of its own (Replicas.port_again) takes the count's runner
  # rewound rather than built again: its traced steps kept, every variable
  # made with it (weights, slots, step, metrics) as it was made.
  generator = np.random.default_rng(1)
  batches = [(generator.uniform(size=(8, 28, 28, 1)).astype(np.float32),
              generator.integers(0, 10, 8).astype(np.int64))
             for _ in range(3)]
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from kit_pair import mnist  # pylint: disable=import-outside-toplevel
  # Adam: slots to set back.
  port = dataclasses.replace(mnist.make_port(), make_optimizer=lambda params:
                             tf.keras.optimizers.Adam(1e-3))
  runner = _mnist_runner(batches, port)
  start = runner.state()
  first = _steps(runner, batches)
  assert runner.global_step() == 3 and any(
      np.any(v) for v in runner.slots(0.05).values())
  assert runner.rewind()
  for name, value in runner.state().items():
    np.testing.assert_array_equal(value, start[name])
  assert runner.global_step() == 0
  assert not any(np.any(v) for v in runner.slots(0.05).values())
  again = _steps(runner, batches)  # From the first batch again.
  for ours, theirs in zip(again, first):
    assert ours['loss'] == theirs['loss']
    for name, gradient in ours['gradients'].items():
      np.testing.assert_array_equal(gradient, theirs['gradients'][name])
  # Its metrics too: an evaluation from the start as a fresh runner's.
  assert runner.rewind()
  fresh = _mnist_runner(batches, port)
  fresh.set_state(start)
  assert runner.evaluate(batches) == fresh.evaluate(batches)


def test_a_keras_runner_whose_trainer_made_a_variable_later_is_not_rewound():
  # A variable made by a first trace was never recorded at its made value:
  # a rewound runner could not be the fresh one, so the caller builds one.
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from kit_pair import mnist  # pylint: disable=import-outside-toplevel

  class Later(mnist.make_port().trainer_class):
    counted = None

    @tf.function
    def train_steps(self, iterator, steps):
      if self.counted is None:
        self.counted = tf.Variable(0)
      self.counted.assign_add(steps)
      return super().train_steps(iterator, steps)

  port = dataclasses.replace(mnist.make_port(), trainer_class=Later)
  generator = np.random.default_rng(2)
  batches = [(generator.uniform(size=(8, 28, 28, 1)).astype(np.float32),
              generator.integers(0, 10, 8).astype(np.int64))]
  runner = _mnist_runner(batches, port)
  _steps(runner, batches)
  state, step = runner.state(), runner.global_step()
  assert not runner.rewind()
  assert runner.global_step() == step  # Nothing was changed.
  for name, value in runner.state().items():
    np.testing.assert_array_equal(value, state[name])
