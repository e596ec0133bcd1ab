"""migration-scan --diff: the rewrites that are safe by construction, one
case each, and what they leave alone."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

from migration_tools.scanner import rewrite

_TF = 'import tensorflow as tf\n'


@pytest.mark.parametrize('source,expected', [
    # The same object under its TF 2 name; the rest through tf.compat.v1.
    ('y = tf.log(x)\n', 'y = tf.math.log(x)\n'),
    ('s = tf.Session()\n', 's = tf.compat.v1.Session()\n'),
    ('tf.app.run()\n', 'tf.compat.v1.app.run()\n'),
    ('f = tf.gfile.GFile(p)\ntf.gfile.MakeDirs(d)\n',
     'f = tf.io.gfile.GFile(p)\ntf.io.gfile.makedirs(d)\n'),
    ('y = tf.to_float(x)\nz = tf.to_int64(x, name="z")\n',
     'y = tf.cast(x, tf.float32)\nz = tf.cast(x, tf.int64, name="z")\n'),
    ('w = x.shape[-1].value\nv = x.get_shape()[0].value\n',
     'w = tf.compat.dimension_value(x.shape[-1])\n'
     'v = tf.compat.dimension_value(x.get_shape()[0])\n'),
    ('r = tf.contrib.tpu.TPUEstimator(f)\n',
     'r = tf.compat.v1.estimator.tpu.TPUEstimator(f)\n'),
    ('d = tf.contrib.data.map_and_batch(f, 8)\n',
     'd = tf.data.experimental.map_and_batch(f, 8)\n'),
    # TF 2 code and what only reads like TF 1 stay as they are.
    ('y = tf.nn.dropout(x, rate=0.1)\nw = x.value\n',
     'y = tf.nn.dropout(x, rate=0.1)\nw = x.value\n'),
    # to_float with name passed positionally: not rewritten.
    ('y = tf.to_float(x, "y")\n', 'y = tf.to_float(x, "y")\n'),
    # No home of the same meaning: left for the report.
    ('c = tf.contrib.summary.scalar("l", l)\n',
     'c = tf.contrib.summary.scalar("l", l)\n'),
    ('c = tf.contrib.seq2seq.BahdanauAttention(8, m)\n',
     'c = tf.contrib.seq2seq.BahdanauAttention(8, m)\n'),
    # Renamed keywords where TF 1 took both names for one parameter.
    ('y = tf.reduce_sum(x, 1, keep_dims=True)\n',
     'y = tf.reduce_sum(x, 1, keepdims=True)\n'),
    ('y = tf.reduce_mean(x, reduction_indices=[1])\n',
     'y = tf.reduce_mean(x, axis=[1])\n'),
    ('y = tf.reduce_max(x, axis=1, reduction_indices=1)\n',
     'y = tf.reduce_max(x, axis=1, reduction_indices=1)\n'),
    ('y = my_reduce(x, keep_dims=True)\n',
     'y = my_reduce(x, keep_dims=True)\n'),
])
def test_each_safe_rewrite(source, expected):
  assert rewrite.rewrite(_TF + source) == _TF + expected


def test_flags_and_logging_go_through_compat_v1_not_to_absl():
  """absl's flags and logging are not tf's (FLAGS parses on first read in
  tf's, the logging levels differ): the same objects through tf.compat.v1."""
  source = (_TF + "tf.flags.DEFINE_string('d', None, 'data')\n"
            'FLAGS = tf.app.flags.FLAGS\nflags = tf.flags\n'
            'tf.logging.set_verbosity(tf.logging.INFO)\n')
  assert rewrite.rewrite(source) == (
      _TF + "tf.compat.v1.flags.DEFINE_string('d', None, 'data')\n"
      'FLAGS = tf.compat.v1.app.flags.FLAGS\nflags = tf.compat.v1.flags\n'
      'tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)\n')
  v1 = 'import tensorflow.compat.v1 as tf\nflags = tf.flags\n'
  assert rewrite.rewrite(v1) == v1


def test_compat_v1_spellings_keep_their_spelling():
  v1 = 'import tensorflow.compat.v1 as tf\n'
  source = v1 + 's = tf.Session()\nf = tf.FixedLenFeature([], tf.int64)\n'
  assert rewrite.rewrite(source) == (
      v1 + 's = tf.Session()\nf = tf.io.FixedLenFeature([], tf.int64)\n')
  # compat.v1's io.parse_single_example is not TF 2's: left as it is.
  kept = v1 + 'e = tf.parse_single_example(r, f)\n'
  assert rewrite.rewrite(kept) == kept


def test_contrib_aliases_get_their_homes_and_unused_imports_go():
  source = ('import tensorflow.compat.v1 as tf\n'
            'from tensorflow.contrib import tpu as contrib_tpu\n'
            'from tensorflow.contrib import layers as contrib_layers\n'
            'from tensorflow.contrib.tpu.python.tpu import tpu_estimator\n'
            'e = contrib_tpu.TPUEstimator(model_fn)\n'
            's = tpu_estimator.TPUEstimatorSpec(mode)\n'
            'p = contrib_tpu.InputPipelineConfig.PER_HOST_V2\n'
            'n = contrib_layers.xavier_initializer()\n')
  assert rewrite.rewrite(source) == (
      'import tensorflow.compat.v1 as tf\n'
      'from tensorflow.contrib import layers as contrib_layers\n'
      'e = tf.estimator.tpu.TPUEstimator(model_fn)\n'
      's = tf.estimator.tpu.TPUEstimatorSpec(mode)\n'
      'p = tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2\n'
      'n = contrib_layers.xavier_initializer()\n')
  # Still used (here by what has no home): the import stays.
  partly = ('import tensorflow as tf\n'
            'from tensorflow.contrib import tpu as contrib_tpu\n'
            'e = contrib_tpu.TPUEstimator(f)\nk = contrib_tpu.keras_to_tpu_model\n')
  assert 'from tensorflow.contrib import tpu as contrib_tpu' in (
      rewrite.rewrite(partly))


def test_layer_norm_by_any_spelling_calls_one_helper_after_the_imports():
  source = ('import tensorflow.compat.v1 as tf\n'
            'import tensorflow.contrib.slim as slim\n'
            'from tensorflow.contrib.layers import layer_norm\n'
            '\n'
            'def f(x):\n'
            '  a = tf.contrib.layers.layer_norm(x, scope="a")\n'
            '  b = slim.layer_norm(a)\n'
            '  return layer_norm(b), slim.conv2d\n')
  after = rewrite.rewrite(source)
  head = ('import tensorflow.compat.v1 as tf\n'
          'import tensorflow.contrib.slim as slim\n'
          '\n\n'
          'def contrib_layer_norm(\n'
          '    inputs, center=True,')
  assert after.startswith(head), after[:300]
  assert after.count('def contrib_layer_norm(') == 1
  assert after.endswith(
      '    return outputs\n\n\n'
      'def f(x):\n'
      '  a = contrib_layer_norm(x, scope="a")\n'
      '  b = contrib_layer_norm(a)\n'
      '  return contrib_layer_norm(b), slim.conv2d\n')


@pytest.mark.parametrize('use', [
    'with slim.arg_scope([slim.layer_norm], center=False):\n'
    '    return slim.layer_norm(x)',
    'return slim.repeat(x, 2, slim.layer_norm)'])
def test_layer_norm_named_other_than_called_is_left_whole(use):
  # slim's arg_scope takes only ops made for it: with the helper in its
  # list it raises ValueError, and its defaults would no longer reach the
  # calls. Any use of layer_norm other than a call leaves them all.
  source = ('import tensorflow.compat.v1 as tf\n'
            'import tensorflow.contrib.slim as slim\n'
            '\n'
            'def f(x):\n'
            f'  {use}\n')
  after = rewrite.rewrite(source)
  assert 'contrib_layer_norm' not in after
  assert after.count('slim.layer_norm') == source.count('slim.layer_norm')


@pytest.mark.e2e
def test_diff_takes_a_bert_like_file_at_least_as_far_as_tf_upgrade_v2():
  """The BERT-shaped file of tests/rewrite_sources (compat.v1, contrib by
  alias, a flags alias): the step-1 blockers left after --diff's patch
  against those left after tf_upgrade_v2, both run here."""
  import rewrite_comparison  # pylint: disable=g-import-not-at-top
  found = rewrite_comparison.compare([os.path.join(
      rewrite_comparison.SOURCES, 'bert_like.py')])
  print(found)
  assert found.diff.step1 <= found.tf_upgrade_v2.step1 < found.before.step1
  assert not found.diff.unchecked  # The patched file parses.


def test_a_file_name_with_a_newline_and_escapes_is_quoted_everywhere(
    tmp_path):
  """A name cannot forge a line of the text report or drive the terminal;
  in the patch it is quoted as git quotes it, and git apply takes it."""
  name = 'ev\nil\x1b[31m "q".py'
  (tmp_path / name).write_text(_TF + 'y = tf.log(x)\n')
  subprocess.run(['git', 'init', '-q'], cwd=tmp_path, check=True)
  ran = subprocess.run(
      [sys.executable, '-m', 'migration_tools.scanner', '.',
       '--diff=fix.patch'], cwd=tmp_path, capture_output=True, text=True,
      env={**os.environ, 'PYTHONPATH': REPO}, timeout=120, check=False)
  assert ran.returncode == 1, ran.stderr
  assert '\x1b' not in ran.stdout + ran.stderr
  assert ran.stdout.splitlines()[0] == (
      './ev\\nil\\x1b[31m "q".py: 1 for step 2')
  patch = (tmp_path / 'fix.patch').read_text()
  assert patch.startswith('--- "a/ev\\nil\\033[31m \\"q\\".py"\n')
  subprocess.run(['git', 'apply', 'fix.patch'], cwd=tmp_path, check=True)
  assert (tmp_path / name).read_text() == _TF + 'y = tf.math.log(x)\n'
