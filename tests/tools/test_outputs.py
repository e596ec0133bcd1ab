"""Predictions made a batch at a time (outputs.in_batches): what the
converter's --verify runs on each side (numpy alone), and the recordings of
them it reads."""
import os

import numpy as np
import pytest

from conftest import append_zeros
from kit_core import room
from kit_core.errors import KitError
from migration_tools import outputs
from migration_tools.checkpoint import predictions


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


def test_a_recording_keeps_its_layers_in_order_and_reads_without_them(
    tmp_path):
  path = str(tmp_path / 'predictions.npz')
  layers = {'b/dense': np.arange(3, dtype=np.float32),
            'a/query': np.ones(5, np.float32)}
  predictions.save(path, _recording(layers=layers))
  read = predictions.load(path)
  assert list(read.layers) == ['b/dense', 'a/query']
  np.testing.assert_array_equal(read.layers['a/query'], layers['a/query'])
  predictions.save(path, _recording())
  assert predictions.load(path).layers == {}


def test_the_first_batch_is_padded_as_in_batches_pads():
  features = {'x': np.arange(3 * 2).reshape(3, 2)}
  first = outputs.first_batch(features, 4)
  np.testing.assert_array_equal(first['x'], [[0, 1], [2, 3], [4, 5], [4, 5]])
  np.testing.assert_array_equal(outputs.first_batch(features, 2)['x'],
                                [[0, 1], [2, 3]])


def _recording(**changes):
  fields = dict(checkpoint={'name': 'model.ckpt-5', 'step': 5,
                            'index_sha256': 'ab'},
                features={'x': np.zeros((4, 3), np.float32)},
                outputs={'probabilities': np.full((4, 2), 0.5, np.float32)},
                averages=False, batch=2, versions={'tensorflow': '2.15.1'})
  return predictions.Recorded(**{**fields, **changes})


@pytest.mark.parametrize('changes, message', [
    (dict(outputs={}), 'it holds no features or no outputs'),
    (dict(features={'x': np.zeros((0, 3), np.float32)},
          outputs={'probabilities': np.zeros((0, 2), np.float32)}),
     "rows by array: {'x': 0, 'probabilities': 0}"),
    (dict(outputs={'probabilities': np.zeros((3, 2), np.float32)}),
     "rows by array: {'x': 4, 'probabilities': 3}"),
    (dict(batch=0), 'batch 0'),
])
def test_an_emptied_predictions_recording_is_refused_in_one_line(
    tmp_path, changes, message):
  path = str(tmp_path / 'predictions.npz')
  predictions.save(path, _recording(**changes))
  with pytest.raises(KitError) as raised:
    predictions.load(path)
  assert str(raised.value).startswith(
      f'--predictions {path} is incomplete (ValueError: {message}')


def test_an_entry_no_prediction_refers_to_is_never_read(tmp_path,
                                                        monkeypatch):
  """A 4 MB file may hold gigabytes of zeros: an entry the recording does
  not refer to costs nothing, whatever it declares."""
  path = tmp_path / 'predictions.npz'
  predictions.save(str(path), _recording())
  append_zeros(path, 'unused', 2**25)
  monkeypatch.setattr(room, 'available_memory', lambda: 50_000_000)
  assert predictions.load(str(path)).examples == 4


def test_outputs_of_other_shapes_say_both_shapes():
  theirs, ours = np.zeros((4, 3)), np.zeros((4, 2))
  assert outputs.difference_text(
      'logits', theirs, ours, outputs.output_diff(theirs, ours)) == (
          'logits is of shape [4, 2] on the port\'s side and [4, 3] on the '
          'legacy side')


def test_a_missing_predictions_file_is_named_once(tmp_path):
  path = tmp_path / 'nope.npz'
  with pytest.raises(KitError) as raised:
    predictions.load(str(path))
  assert str(raised.value) == (
      f'cannot read --predictions {path}: No such file or directory; record '
      'it again on TF 2.15 with migration-convert-checkpoint '
      '--record_predictions')


def test_a_fifo_as_predictions_is_refused_not_opened(tmp_path):
  fifo = tmp_path / 'predictions.npz'
  os.mkfifo(fifo)
  with pytest.raises(KitError) as raised:
    predictions.load(str(fifo))
  assert 'is not a regular file (a FIFO, a socket or a device)' in str(
      raised.value)
