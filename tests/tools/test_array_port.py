"""The port contract in arrays (pair/array_port.py) and its runner, on a toy
model in numpy: no framework, so it runs on every profile."""
import numpy as np
import pytest

from kit_core.errors import KitError
from migration_tools.pair import array_port
from migration_tools.pair.frameworks.arrays import runner as array_runner
from toy_array_model import Linear

BATCHES = [(np.ones((4, 3), np.float32), np.zeros(4, np.int32)),
           (np.full((4, 3), 2, np.float32), np.ones(4, np.int32))]


def _runner(**fields):
  port = array_port.ArrayPort(make=Linear, **fields)
  runner = array_runner.ArrayRunner(port, 2, {'learning_rate': 0.1}, BATCHES)
  runner.use_map({'legacy/kernel': 'dense/w'})
  return runner


def test_state_steps_and_gradients_cross_under_the_legacy_names():
  runner = _runner()
  assert runner.shapes() == {'dense/w': (3, 2)}
  runner.set_state({'legacy/kernel': np.zeros((3, 2))})
  assert list(runner.state()) == ['legacy/kernel']
  step = runner.step(*BATCHES[0])
  assert set(step['gradients']) == {'legacy/kernel'}
  assert step['examples'] == 4 and step['learning_rate'] == 0.1
  assert step['host_call'] == {'lr': np.float32(0.1)}
  assert runner.global_step() == 1
  runner.set_global_step(7)
  assert runner.global_step() == 7
  assert runner.replicas == 2


def test_slots_by_keras_3_tokens_in_the_tf1_convention():
  runner = _runner()
  runner.set_slots({('legacy/kernel', 'momentum'): np.ones((3, 2))}, 0.1)
  # Keras keeps momentum's velocity scaled by the rate (optimizers.to_port).
  np.testing.assert_allclose(runner.model.velocity, -0.1)
  np.testing.assert_allclose(
      runner.slots(0.1)[('legacy/kernel', 'momentum')], 1.0, rtol=1e-6)
  runner.use_slot_map({'Momentum': 'momentum'})
  assert list(runner.slots(0.1)) == [('legacy/kernel', 'Momentum')]


def test_batches_are_taken_in_the_legacy_order():
  runner = _runner()
  runner.step(*BATCHES[0])
  with pytest.raises(KitError, match='step 2 was asked another batch'):
    runner.step(*BATCHES[0])


def test_a_rewound_runner_steps_as_a_fresh_one_from_the_first_batch():
  # A pass of its own (Replicas.port_again) takes the count's runner
  # rewound, its compiled programs kept: what a step moves is as made.
  runner = _runner()
  first = [runner.step(*batch) for batch in BATCHES]
  assert runner.global_step() == 2 and np.any(runner.model.velocity)
  assert runner.rewind()
  assert runner.global_step() == 0 and not np.any(runner.model.velocity)
  assert runner.learning_rate() == 0.0
  again = [runner.step(*batch) for batch in BATCHES]  # From the first batch.
  fresh = _runner()
  for ours, theirs, new in zip(again, first,
                               [fresh.step(*batch) for batch in BATCHES]):
    assert ours['loss'] == theirs['loss'] == new['loss']
    np.testing.assert_array_equal(ours['gradients']['legacy/kernel'],
                                  new['gradients']['legacy/kernel'])
  np.testing.assert_array_equal(runner.state()['legacy/kernel'],
                                fresh.state()['legacy/kernel'])


def test_a_model_without_the_contracts_methods_is_one_line():
  port = array_port.ArrayPort(make=lambda params, replicas, dropout: object())
  with pytest.raises(KitError, match=r'lacks replicas, variables, trainable'):
    array_runner.ArrayRunner(port, 1, {}, BATCHES, where='--port mine:port')


@pytest.mark.parametrize('fields, message', [
    ({'make': 3}, 'ArrayPort.make must be a callable'),
    ({'make': Linear, 'export': lambda m, d: d},
     'ArrayPort.export and .serve go together'),
    ({'make': Linear, 'output_map': {'a': 1}},
     'ArrayPort.output_map must be a dict of strings'),
])
def test_a_port_that_breaks_the_contract_is_one_line(fields, message):
  with pytest.raises(KitError, match=message):
    array_port.check_array_port(array_port.ArrayPort(**fields), 'mine:port')
