"""Predictions made a batch at a time (outputs.in_batches): what the
converter's --verify runs on each side (numpy alone)."""
import numpy as np

from migration_tools import outputs


def test_predictions_in_batches_are_those_of_one_call_with_static_shapes():
  features = {'x': np.arange(10 * 3, dtype=np.float32).reshape(10, 3),
              'ids': np.arange(10)}
  shapes, told = [], []

  def predict(chunk):
    shapes.append(chunk['x'].shape)
    return {'sum': chunk['x'].sum(axis=1), 'id': chunk['ids'] * 2}

  got = outputs.in_batches(predict, features, 4,
                           lambda done, count: told.append((done, count)))
  whole = predict(features)
  np.testing.assert_array_equal(got['sum'], whole['sum'])
  np.testing.assert_array_equal(got['id'], whole['id'])
  # Every call got the batch's shape: the last 2 examples padded to 4.
  assert shapes[:3] == [(4, 3)] * 3
  assert told == [(4, 10), (8, 10), (10, 10)]


def test_a_single_array_in_and_out_is_named_output():
  got = outputs.in_batches(lambda chunk: chunk + 1, np.zeros((5, 2)), 2)
  np.testing.assert_array_equal(got['output'], np.ones((5, 2)))
