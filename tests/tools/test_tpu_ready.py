"""tpu_ready: the rules on toy graphs, then the BERT-shaped port and four
ports that train on a CPU but that a TPU refuses (tests/user_code/bert_port),
on both TensorFlows."""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import TESTS
from migration_tools.compare import checks
from migration_tools.pair.frameworks.keras_tf import tpu as tpu_ready
from migration_tools.pair.frameworks import tpu

sys.path.insert(0, os.path.join(TESTS, 'user_code'))
import bert_legacy  # pylint: disable=g-import-not-at-top,wrong-import-position
import bert_port  # pylint: disable=g-import-not-at-top,wrong-import-position


def _causes(fn, *specs, model_code=False):
  graph = tf.function(fn).get_concrete_function(*specs).graph
  return {(p.op, p.cause) for p in tpu_ready.graph_problems(
      graph, 'step', model_code)}


def test_host_python_and_strings_are_found_by_op_and_name_scope():
  def step(x):
    with tf.name_scope('augment'):
      y = tf.py_function(lambda a: a * 2, [x], tf.float32)
    with tf.name_scope('ids'):
      z = tf.strings.to_number(tf.strings.as_string(x))
    return y + z
  graph = tf.function(step).get_concrete_function(
      tf.TensorSpec([4], tf.float32)).graph
  found = {(p.op, p.name, p.cause)
           for p in tpu_ready.graph_problems(graph, 'step')}
  assert found == {('EagerPyFunc', 'augment/EagerPyFunc', 'host_op'),
                   ('AsString', 'ids/AsString', 'string'),
                   ('StringToNumber', 'ids/StringToNumber', 'string')}


def test_an_assertion_message_is_no_string_op_and_plain_math_is_clean():
  def step(x):
    tf.debugging.assert_positive(x, message='must be positive')
    return tf.reduce_sum(tf.matmul(x[None], x[:, None]))
  assert _causes(step, tf.TensorSpec([4], tf.float32)) == set()


def test_data_dependent_shapes_count_in_model_code_only():
  """Where (tf.boolean_mask) in the model or loss; a Keras optimizer's
  sparse update (Unique) elsewhere in the step compiles, bounded."""
  def loss(x):
    return tf.reduce_sum(tf.boolean_mask(x, x > 0)) + tf.cast(
        tf.size(tf.unique(tf.cast(x, tf.int32))[0]), tf.float32)
  spec = tf.TensorSpec([4], tf.float32)
  assert _causes(loss, spec, model_code=True) == {
      ('Where', 'dynamic_shape'), ('Unique', 'dynamic_shape')}
  assert _causes(loss, spec) == set()


def test_a_non_max_suppression_padded_to_its_maximum_is_static():
  def boxes(b, s):
    return tf.image.non_max_suppression_padded(
        b, s, 3, pad_to_max_output_size=True)[0]
  assert _causes(boxes, tf.TensorSpec([6, 4]), tf.TensorSpec([6]),
                 model_code=True) == set()


def test_input_shapes_and_int64_are_read_from_the_element_spec():
  spec = ({'ids': tf.TensorSpec([None, 8], tf.int64),
           'mask': tf.TensorSpec([32, 8], tf.int32)},
          tf.TensorSpec([32], tf.int32))
  problems, int64 = tpu_ready.input_problems(spec)
  assert [(p.op, p.name) for p in problems] == [('features/ids',
                                                  'shape (None, 8)')]
  assert int64 == ['features/ids']


def test_xla_refusal_names_the_op_and_node():
  @tf.function(jit_compile=True)
  def step(x):
    with tf.name_scope('augment'):
      return tf.py_function(lambda a: a * 2, [x], tf.float32)
  with pytest.raises(tf.errors.OpError) as raised:
    step(tf.ones([4]))
  problem = tpu_ready.xla_problem(raised.value, 'step')
  assert (problem.op, problem.name, problem.cause) == (
      'EagerPyFunc', 'augment/EagerPyFunc', 'xla')


def test_problems_are_grouped_with_their_fix_once():
  problems = [tpu_ready.Problem('the input pipeline', 'input_shape', name,
                                'shape (None, 8)')
              for name in ('a', 'b', 'c', 'd')]
  text = tpu.describe(problems, tpu_ready.CAUSES)
  assert text.startswith('the input pipeline: a (shape (None, 8)), b '
                         '(shape (None, 8)), c (shape (None, 8)) and 1 more '
                         'has a shape that is not fully defined; ')
  assert text.count('drop_remainder=True') == 1


@pytest.fixture(scope='module')
def bert(tmp_path_factory):
  """The BERT pair's params and first batch (its labels in the features)."""
  data_dir = str(tmp_path_factory.mktemp('bert'))
  bert_legacy.write_data(data_dir, examples=16, pretrained=False)
  params = {'data_dir': data_dir, 'learning_rate': 1e-3,
            'num_train_steps': 20, 'num_warmup_steps': 2, 'batch_size': 8,
            'use_tpu': False}
  features = next(iter(bert_legacy.input_fn(params)))
  return params, [(tf.nest.map_structure(np.asarray, features), None)]


def test_the_bert_port_is_tpu_ready(bert):
  params, batches = bert
  result = tpu_ready.check(bert_port.make_port(), params, batches)
  assert result.status == checks.PASSED, result.summary
  assert result.figures['problems'] == []
  assert result.figures['input_shapes_checked']
  assert result.summary.startswith('the step and predict compile with XLA')


@pytest.mark.parametrize('port, named, fix', [
    ('remainder_kept', 'the input pipeline: input_ids (shape (None, 8))',
     'batch with drop_remainder=True'),
    ('py_function_in_the_step',
     'the training step: EagerPyFunc (clean_ids/EagerPyFunc) runs Python on '
     'the host', 'move it into the input pipeline (dataset.map)'),
    ('string_op_in_the_step',
     'the training step: AsString (hash_segments/AsString), '
     'StringToHashBucketFast (hash_segments/StringToHashBucketFast) works on '
     'strings', 'turn them into numbers in the input pipeline'),
    ('boolean_mask_in_the_step',
     'the training step: Where (boolean_mask/Where), Where '
     '(boolean_mask_1/Where) makes a shape that depends on the data',
     'mask instead of dropping (tf.where(mask, x, 0)'),
])
def test_each_thing_a_tpu_refuses_fails_naming_the_op_and_the_fix(
    bert, port, named, fix):
  params, batches = bert
  result = tpu_ready.check(getattr(bert_port, port)(), params, batches)
  assert result.status == checks.FAILED
  assert result.summary.startswith(f'not ready for a TPU: {named}'), (
      result.summary)
  assert fix in result.summary
  # Only the cause put there: the optimizer's sparse update is no finding.
  assert len({p['cause'] for p in result.figures['problems']}) == 1, (
      result.figures['problems'])
