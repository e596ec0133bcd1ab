"""migration-scan --diff changes no meaning: for each kind of rewrite
(rewrite.KINDS), a snippet of TF 1 code and its rewrite are both run under
the installed TensorFlow (TF 2.15 in the estimator profile; the newest in
the other) and must compute the same.

What the TF 1 code means is what it computes through tf.compat.v1 with v2
behaviour off: a snippet spelt ``import tensorflow as tf`` runs so before
its rewrite, and as rewritten (plain TF 2) after. tf.contrib cannot run on
any TF 2, so its two kinds are held to TensorFlow's own record instead:
each home is the object tf_upgrade_v2 renames that symbol to, and the
rewritten code runs. contrib's layer_norm is held to contrib's own code as
the tf-slim package keeps it.
"""
import ast
import json
import multiprocessing

import pytest
import tensorflow as tf

from conftest import REPO
from migration_tools.scanner import engine
from migration_tools.scanner import rewrite

pytestmark = pytest.mark.e2e  # Each version of each snippet is a process.

# Each runs in a fresh process, as a file would: forked from a server that
# has imported TensorFlow and run nothing (its runtime starts in the child),
# so that the import, 6 s on 2 cores, is paid once per test process.
_PROCESSES = multiprocessing.get_context('forkserver')
_PROCESSES.set_forkserver_preload(['tensorflow', 'numpy'])

_PLAIN = 'import tensorflow as tf\n'
_V1 = 'import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n'
# TF 1's meaning of a file that imports tensorflow plainly.
_AS_TF1 = 'import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()\n'

# Run in the child, given `source`, `repo` and `pipe`: sends ('result', its
# JSON) or ('raised', the traceback).
_RUN = """
import json, os, traceback
import numpy as np
def plain(v):  # A TF 1 Dimension by its value; arrays as lists.
  return v.value if type(v).__name__ == 'Dimension' else np.asarray(v).tolist()
os.chdir(repo)
try:
  namespace = {'__name__': 'snippet'}
  exec(compile(source, 'snippet.py', 'exec'), namespace)
  pipe.send(('result', json.dumps(namespace['result'], default=plain)))
except BaseException:
  pipe.send(('raised', traceback.format_exc()))
"""

SNIPPETS = {
    'renamed': _PLAIN + """
g = tf.Graph()
with g.as_default():
  x = tf.constant([[1.0, 4.0], [9.0, 16.0]])
  y = tf.log(x) + tf.sqrt(x) * tf.div(x, 2.0)
  m = tf.reduce_max(tf.matrix_transpose(x), axis=0)
  with tf.Session() as session:
    result = session.run([y, m])
""",
    'renamed (compat.v1)': _V1 + """
spec = {'n': tf.FixedLenFeature([2], tf.int64)}
example = tf.train.Example(features=tf.train.Features(feature={
    'n': tf.train.Feature(int64_list=tf.train.Int64List(value=[3, 4]))}))
parsed = tf.io.parse_single_example(example.SerializeToString(), spec)
with tf.Session() as session:
  result = session.run(parsed['n'])
""",
    'through-compat-v1': _PLAIN + """
g = tf.Graph()
with g.as_default():
  x = tf.placeholder(tf.float32, [None, 2])
  v = tf.get_variable('v', [2], initializer=tf.constant_initializer(0.5))
  y = tf.reduce_sum(x * v, axis=1)
  with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    result = session.run(y, {x: [[1.0, 2.0], [3.0, 4.0]]})
""",
    'through-compat-v1 (flags, logging)': _PLAIN + """
tf.flags.DEFINE_integer('meaning_steps', 5, 'steps')
flags = tf.app.flags
flags.DEFINE_string('meaning_name', 'a', 'name')
FLAGS = tf.flags.FLAGS
FLAGS(['prog', '--meaning_steps=7'])
tf.logging.set_verbosity(tf.logging.INFO)
tf.logging.info('logged')
result = [FLAGS.meaning_steps, FLAGS.meaning_name, tf.logging.get_verbosity()]
""",
    'gfile': _PLAIN + """
import os, tempfile
root = tempfile.mkdtemp()
tf.gfile.MakeDirs(os.path.join(root, 'a', 'b'))
with tf.gfile.GFile(os.path.join(root, 'a', 'b', 'f.txt'), 'w') as f:
  f.write('x')
tf.gfile.Copy(os.path.join(root, 'a', 'b', 'f.txt'),
              os.path.join(root, 'a', 'g.txt'))
result = [tf.gfile.Exists(os.path.join(root, 'a', 'g.txt')),
          sorted(tf.gfile.ListDirectory(os.path.join(root, 'a'))),
          [os.path.relpath(p, root)
           for p in tf.gfile.Glob(os.path.join(root, 'a', '*'))],
          tf.gfile.IsDirectory(os.path.join(root, 'a'))]
tf.gfile.DeleteRecursively(root)
result.append(tf.gfile.Exists(root))
""",
    'to-dtype': _PLAIN + """
g = tf.Graph()
with g.as_default():
  x = tf.constant([1.7, -2.2])
  ys = [tf.to_float(tf.constant([1, 2])), tf.to_int32(x),
        tf.to_int64(x, name='i'), tf.to_double(x)]
  with tf.Session() as session:
    result = [[y.dtype.name for y in ys], session.run(ys)]
""",
    'renamed-keyword': _PLAIN + """
g = tf.Graph()
with g.as_default():
  x = tf.constant([[1.0, 4.0, 2.0], [9.0, 16.0, 3.0]])
  ys = [tf.reduce_sum(x, 1, keep_dims=True),
        tf.reduce_mean(x, reduction_indices=[0], keep_dims=True),
        tf.nn.moments(x, [1], keep_dims=True)[1],
        tf.reduce_max(x, reduction_indices=1)]
  with tf.Session() as session:
    result = session.run(ys)
""",
    'renamed-keyword (compat.v1)': _V1 + """
x = tf.constant([[1.0, 4.0, 2.0], [9.0, 16.0, 3.0]])
ys = [tf.reduce_logsumexp(x, 0, keep_dims=True),
      tf.count_nonzero(x - 4.0, reduction_indices=[1], keep_dims=True)]
with tf.Session() as session:
  result = session.run(ys)
""",
    'dimension-value': _V1 + """
x = tf.placeholder(tf.float32, [None, 3])
result = [x.shape[0].value is None, x.shape[-1].value,
          x.get_shape()[1].value * 2]
""",
    'dimension-value (plain)': _PLAIN + """
g = tf.Graph()
with g.as_default():
  x = tf.placeholder(tf.float32, [None, 3])
  result = [x.shape[0].value is None, x.shape[-1].value]
""",
}


def _run(source: str) -> str:
  """source's `result`, as JSON, computed in a process of its own."""
  receiver, sender = _PROCESSES.Pipe(duplex=False)
  child = _PROCESSES.Process(target=exec, args=(_RUN, {
      'source': source, 'repo': REPO, 'pipe': sender}))
  child.start()
  sender.close()
  try:
    assert receiver.poll(300), (source, 'no result in 300 s')
    how, said = receiver.recv()
  except EOFError:
    how, said = 'died', f'exit code {child.join(60) or child.exitcode}'
  finally:
    child.kill()
    child.join(60)
  assert how == 'result', (source, said[-3000:])
  return said


def _as_tf1(source: str) -> str:
  return (_AS_TF1 + source[len(_PLAIN):] if source.startswith(_PLAIN)
          else source)


@pytest.mark.parametrize('name', sorted(SNIPPETS))
def test_a_rewrite_computes_what_the_tf1_code_computed(name):
  source = SNIPPETS[name]
  kind = name.split(' ')[0]
  assert kind in {e.kind for e in rewrite.edits(source)}, (
      f'the snippet for {kind} is not rewritten as {kind}')
  after = rewrite.rewrite(source)
  assert json.loads(_run(after)) == json.loads(_run(_as_tf1(source)))


def test_every_kind_of_rewrite_has_its_meaning_tested():
  covered = {name.split(' ')[0] for name in SNIPPETS} | set(CONTRIB_KINDS)
  assert covered == set(rewrite.KINDS)


def test_the_old_drop_of_dimension_value_would_have_been_caught():
  """Dropping .value (the rewrite before) turns `.value is None` from True
  to False under disable_v2_behavior: the comparison above sees that."""
  source = SNIPPETS['dimension-value']
  dropped = source.replace('.value', '')
  assert json.loads(_run(dropped)) != json.loads(_run(source))


CONTRIB_KINDS = ('contrib-home', 'unused-contrib-import', 'layer-norm')


def _resolve(path: str):
  value = tf.compat.v1
  for part in path.split('.'):
    value = getattr(value, part)
  return value


def test_each_contrib_home_is_the_object_tensorflows_own_upgrade_names():
  renames = pytest.importorskip(
      'tensorflow.tools.compatibility.all_renames_v2').symbol_renames
  agreed = resolved = 0
  for contrib, home in rewrite.CONTRIB_HOMES.items():
    try:
      ours = _resolve(home)
    except AttributeError:
      # TF 2.16 on has no tf.estimator, and Keras 3 no v1 RNN cells: the
      # homes are TF 2.15's, and the plan's step 2 after it.
      assert tf.__version__ >= '2.16' and home.startswith(
          ('estimator.', 'nn.rnn_cell.')), home
      continue
    resolved += 1
    theirs = renames.get(f'tf.{contrib}')
    if not theirs:
      continue
    try:
      named = _resolve(theirs.removeprefix('tf.').removeprefix('compat.v1.'))
    except AttributeError:
      # tf_upgrade_v2 names a symbol TensorFlow does not have
      # (cluster_resolver.UnionClusterResolver): ours is checked above.
      continue
    assert ours is named, (contrib, home, theirs)
    agreed += 1
  # Most homes are tf_upgrade_v2's too; the rest are TF 1.15's own core
  # names of the same objects (contrib.framework.get_or_create_global_step).
  assert agreed >= 0.7 * resolved, (agreed, resolved)


def test_code_with_contrib_homes_runs_and_loses_no_used_import():
  source = ('import tensorflow.compat.v1 as tf\n'
            'from tensorflow.contrib import data as contrib_data\n'
            'from tensorflow.contrib.framework import nest as contrib_nest\n'
            'tf.disable_v2_behavior()\n'
            'd = tf.data.Dataset.range(6).apply(contrib_data.map_and_batch('
            'lambda x: x * 2, 4))\n'
            'n = contrib_nest.flatten({"a": 1, "b": [2, 3]})\n'
            'it = tf.data.make_one_shot_iterator(d)\n'
            'with tf.Session() as session:\n'
            '  result = [session.run(it.get_next()), n]\n')
  after = rewrite.rewrite(source)
  assert 'contrib' not in after
  assert {e.kind for e in rewrite.edits(source)} == {
      'contrib-home', 'unused-contrib-import'}
  # What map + batch and nest.flatten compute: the homes' behaviour.
  assert json.loads(_run(after)) == [[0, 2, 4, 6], [1, 2, 3]]


# BERT's calls (scope given, begin axes -1), contrib's defaults (scope
# LayerNorm, uniquified; normalised from axis 1 on a rank-3 input), reuse,
# no centre, an activation, float16, collections by dict and outputs.
_LAYER_NORM = """
import tensorflow.compat.v1 as tf
from tensorflow.contrib import layers as contrib_layers
tf.disable_v2_behavior()
rng = __import__('numpy').random.RandomState(0)
x = tf.constant(rng.normal(3.0, 2.0, (2, 3, 4)).astype('float32'))
with tf.variable_scope('bert/encoder'):
  a = tf.contrib.layers.layer_norm(
      inputs=x, begin_norm_axis=-1, begin_params_axis=-1, scope='output')
  b = contrib_layers.layer_norm(x)
  c = contrib_layers.layer_norm(a, center=False, activation_fn=tf.nn.relu,
                                variables_collections={'gamma': ['g']},
                                outputs_collections=['outs'])
  d = tf.contrib.layers.layer_norm(x * 2.0, begin_norm_axis=-1,
                                   begin_params_axis=-1, scope='output',
                                   reuse=True)
  e = contrib_layers.layer_norm(tf.cast(x, tf.float16), scope='half')
names = lambda key: sorted(v.name for v in tf.get_collection(key))
with tf.Session() as session:
  session.run(tf.global_variables_initializer())
  result = [session.run([a, b, c, d, e]),
            sorted((v.name, v.shape.as_list()) for v in tf.global_variables()),
            names(tf.GraphKeys.MODEL_VARIABLES),
            names(tf.GraphKeys.TRAINABLE_VARIABLES), names('g'),
            [t.name for t in tf.get_collection('outs')], c.aliases]
"""


def test_the_layer_norm_rewrite_is_contribs_own_layer_norm():
  """The helper --diff writes computes what contrib's layer_norm computed
  (tf-slim's copy of contrib's code), bit for bit, with the same variables
  and collections; the contrib import goes with the last use."""
  tf_slim_source = _LAYER_NORM.replace(
      'from tensorflow.contrib import layers as contrib_layers',
      'from tf_slim import layers as contrib_layers').replace(
          'tf.contrib.layers.', 'contrib_layers.')
  after = rewrite.rewrite(_LAYER_NORM)
  # Nothing is left that stops the file on TF 2.15.
  assert not [f for f in engine.scan_source(after, 'after.py') if f.step == 1]
  assert {e.kind for e in rewrite.edits(_LAYER_NORM)} == {
      'layer-norm', 'unused-contrib-import'}
  ours, contribs = json.loads(_run(after)), json.loads(_run(tf_slim_source))
  assert ours == contribs
  assert ['bert/encoder/output/beta:0', [4]] in contribs[1]
  assert 'bert/encoder/LayerNorm_1/gamma:0' in contribs[2]


def test_the_layer_norm_helper_follows_the_files_layout():
  source = ('import tensorflow as tf\r\n'
            'def f(x):\r\n'
            '    return tf.contrib.layers.layer_norm(x)\r\n')
  after = rewrite.rewrite(source)
  assert '\n' not in after.replace('\r\n', '')
  assert '\r\n\r\n\r\ndef contrib_layer_norm(\r\n        inputs' in after
  assert 'return contrib_layer_norm(x)' in after
  ast.parse(after)
  # A file that binds the name, or uses layer_norm before any import, is
  # left for a person.
  bound = source + 'contrib_layer_norm = None\r\n'
  assert rewrite.rewrite(bound) == bound
