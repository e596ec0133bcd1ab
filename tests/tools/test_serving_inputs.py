"""Inputs for a serving receiver of any type: a tensor named as a feature
takes its values, a string receiver the features as tf.Example protos (what
a parsing receiver takes), or the user's own (--legacy_serving_inputs, e.g.
JPEG bytes), checked against the receiver; and strings survive a bundle."""
import numpy as np
import pytest
import tensorflow as tf

from kit_core.errors import KitError
from migration_tools.pair import stored
from migration_tools.pair import serving
from migration_tools.pair import side

_FEATURES = {'ids': np.arange(12, dtype=np.int32).reshape(4, 3),
             'weight': np.linspace(0, 1, 4, dtype=np.float32),
             'word': np.array([b'a', b'b', b'c', b'\x00d'], dtype=object)}
_DATA = side.Data(None, [(_FEATURES, np.zeros(4, np.int32))])


def test_a_string_receiver_gets_the_features_as_tf_examples():
  receiver = {'examples': tf.TensorSpec([None], tf.string)}
  protos = serving.inputs(receiver, _DATA)['examples']
  assert protos.shape == (4,)
  parsed = tf.io.parse_example(protos, {
      'ids': tf.io.FixedLenFeature([3], tf.int64),
      'weight': tf.io.FixedLenFeature([], tf.float32),
      'word': tf.io.FixedLenFeature([], tf.string)})
  np.testing.assert_array_equal(parsed['ids'], _FEATURES['ids'])
  np.testing.assert_array_equal(parsed['weight'], _FEATURES['weight'])
  assert list(parsed['word'].numpy()) == list(_FEATURES['word'])


def test_one_unnamed_feature_tensor_cannot_be_an_example():
  data = side.Data(None, [(np.zeros((4, 2), np.float32), None)])
  with pytest.raises(KitError, match='--legacy_serving_inputs'):
    serving.inputs({'examples': tf.TensorSpec([None], tf.string)}, data)


def test_the_users_inputs_are_checked_against_the_receiver():
  receiver = {'image_bytes': tf.TensorSpec([None], tf.string)}
  given = serving.given({'image_bytes': [b'\xff\xd8', b'\xff\xd8\x00']},
                        receiver, '--legacy_serving_inputs')
  assert given['image_bytes'].dtype == object
  assert list(given['image_bytes']) == [b'\xff\xd8', b'\xff\xd8\x00']
  with pytest.raises(KitError, match=r"returned \['images'\] where the "
                     r"serving receiver takes \['image_bytes'\]"):
    serving.given({'images': [b'x']}, receiver, '--legacy_serving_inputs')
  with pytest.raises(KitError, match='of shape'):
    serving.given({'image_bytes': [[b'x']]}, receiver, 'it')


def test_bytes_go_into_a_bundle_and_come_back_whole(tmp_path):
  # No pickle in a bundle: strings are kept as base64, a trailing NUL too.
  values = np.array([b'\xff\xd8\xff\x00', b'', b'abc'], dtype=object)
  arrays = {}
  encoded = stored.encode({'image_bytes': values}, arrays)
  decoded = stored.decode(encoded, arrays)['image_bytes']
  assert decoded.dtype == object and list(decoded) == list(values)
