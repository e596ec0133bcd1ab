"""migration-scan --diff: the rewrites that are safe by construction, one
case each, and what they leave alone."""
import pytest

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
     'w = x.shape[-1]\nv = x.get_shape()[0]\n'),
    # TF 2 code and what only reads like TF 1 stay as they are.
    ('y = tf.nn.dropout(x, rate=0.1)\nw = x.value\n',
     'y = tf.nn.dropout(x, rate=0.1)\nw = x.value\n'),
    # to_float with name passed positionally: not rewritten.
    ('y = tf.to_float(x, "y")\n', 'y = tf.to_float(x, "y")\n'),
    ('c = tf.contrib.layers.xavier_initializer()\n',
     'c = tf.contrib.layers.xavier_initializer()\n'),
])
def test_each_safe_rewrite(source, expected):
  assert rewrite.rewrite(_TF + source) == _TF + expected


def test_flags_and_logging_go_to_absl_with_its_import_once():
  source = ('"""Doc."""\nfrom __future__ import print_function\n' + _TF +
            "tf.flags.DEFINE_string('d', None, 'data')\n"
            'FLAGS = tf.app.flags.FLAGS\n'
            'tf.logging.set_verbosity(tf.logging.INFO)\n')
  assert rewrite.rewrite(source) == (
      '"""Doc."""\nfrom __future__ import print_function\n'
      'from absl import flags\nfrom absl import logging\n' + _TF +
      "flags.DEFINE_string('d', None, 'data')\n"
      'FLAGS = flags.FLAGS\n'
      'logging.set_verbosity(logging.INFO)\n')
  # absl's logging imported already: not imported twice.
  kept = 'from absl import logging\n' + _TF + 'tf.logging.info("x")\n'
  assert rewrite.rewrite(kept) == (
      'from absl import logging\n' + _TF + 'logging.info("x")\n')


@pytest.mark.parametrize('source', [
    'import logging\n' + _TF + 'tf.logging.info("x")\n',
    _TF + 'logging = get_logger()\ntf.logging.info("x")\n',
    _TF + 'def f(logging):\n  tf.logging.info("x")\n',
    _TF + 'tf.logging.TaskLevelStatusMessage("x")\n',  # Not in absl.
])
def test_logging_is_left_where_the_name_means_something_else(source):
  assert 'tf.logging' in rewrite.rewrite(source)


def test_compat_v1_spellings_are_left_alone():
  source = 'import tensorflow.compat.v1 as tf\ns = tf.Session()\n'
  assert rewrite.rewrite(source) == source


def test_a_files_encoding_bom_and_line_endings_stay(tmp_path):
  path = tmp_path / 'm.py'
  path.write_bytes(b'\xef\xbb\xbfimport tensorflow as tf\r\n'
                   b's = tf.Session()\r\n')
  patch = rewrite.file_diff(str(path))
  assert b'-\xef\xbb\xbfimport' not in patch  # Line 1 is context, with BOM.
  assert b' \xef\xbb\xbfimport tensorflow as tf\r\n' in patch
  assert b'+s = tf.compat.v1.Session()\r\n' in patch
  latin = tmp_path / 'l.py'
  latin.write_bytes(b'# -*- coding: latin-1 -*-\nimport tensorflow as tf\n'
                    b'x = tf.log(1.)  # caf\xe9\n')
  assert b'+x = tf.math.log(1.)  # caf\xe9\n' in rewrite.file_diff(str(latin))
  clean = tmp_path / 'c.py'
  clean.write_text(_TF + 'x = tf.constant(1)\n')
  assert rewrite.file_diff(str(clean)) == b''
