"""migration-scan on the shapes real TPU-era repositories have: TPUEstimator
through TensorFlow's private modules, notebooks full of IPython syntax, and
the places where a finding must come from the call alone (never from the
rest of the file, never from a name that only looks like TensorFlow's)."""
import json
import os
import subprocess

import pytest
import tensorflow as tf

from conftest import last_line, run_module
from migration_tools.scanner import engine
from migration_tools.scanner import rules


def _found(source: str) -> list[tuple[int, str, str]]:
  return [(f.line, f.rule, f.severity)
          for f in engine.scan_source(source, 'x.py')]


def _rules(source: str) -> set[str]:
  return {rule for _, rule, _ in _found(source)}


ESTIMATOR_USES = """
config = tpu_config.RunConfig(
    tpu_config=tpu_config.TPUConfig(iterations_per_loop=100))
estimator = tpu_estimator.TPUEstimator(model_fn=model_fn, config=config)
spec = tpu_estimator.TPUEstimatorSpec(mode=mode, loss=loss)
"""


@pytest.mark.parametrize('imports', [
    # tensorflow/mesh, tensorflow/tpu's models, simclr.
    'from tensorflow.python.tpu import tpu_config\n'
    'from tensorflow.python.tpu import tpu_estimator\n',
    'from tensorflow_estimator.python.estimator.tpu import tpu_config\n'
    'from tensorflow_estimator.python.estimator.tpu import tpu_estimator\n',
    'import tensorflow.python.tpu.tpu_config as tpu_config\n'
    'import tensorflow.python.tpu.tpu_estimator as tpu_estimator\n',
    'from tensorflow.contrib.tpu.python.tpu import tpu_config\n'
    'from tensorflow.contrib.tpu.python.tpu import tpu_estimator\n',
], ids=['tensorflow.python.tpu', 'tensorflow_estimator', 'import as',
        'contrib private'])
def test_tpu_estimator_through_private_modules_is_reported_as_public(imports):
  found = _rules(imports + ESTIMATOR_USES)
  assert {'tpu-estimator', 'estimator-spec', 'run-config', 'tpu-config',
          'iterations-per-loop'} <= found, found
  # The import itself is what it imports (tf.estimator.tpu breaks on TF
  # 2.16), not a style note on a private module.
  assert 'private-api' not in found


def test_private_flags_and_logging_are_tf_flags_and_logging():
  found = _found('from tensorflow.python.platform import tf_logging as lg\n'
                 'from tensorflow.python.platform import flags\n'
                 'lg.info("x")\nflags.DEFINE_string("a", None, "b")\n')
  assert {(3, 'logging'), (4, 'flags')} <= {(line, rule)
                                            for line, rule, _ in found}


def _notebook(path, *cells: str) -> str:
  document = {'nbformat': 4, 'nbformat_minor': 5, 'metadata': {},
              'cells': [{'cell_type': 'code', 'metadata': {}, 'outputs': [],
                         'execution_count': None,
                         'source': cell.splitlines(keepends=True)}
                        for cell in cells]}
  path.write_text(json.dumps(document))
  return str(path)


# The IPython forms that hid whole notebooks (automl, tensorflow/docs):
# each cell holds one, beside a TF 1 construct that must still be found.
IPYTHON_CELLS = [
    ("import sys\nif 'google.colab' in sys.modules:\n"
     "  %tensorflow_version 1.x\nimport tensorflow as tf\n"),
    'files = !ls /data\nwriter = tf.summary.FileWriter("/tmp/x")\n',
    '!pip install -q tensorflow-datasets \\\n    pillow\n'
    'graph = tf.get_default_graph()\n',
    '  # A cell pasted with its indent.\n  tf.logging.info("x")\n',
    'tf.nn.dropout?\nsess = tf.Session()\n',
    'n = %time len(files)\ntf.gfile.Exists("/data")\n',
    'try:\n  !nvidia-smi\nexcept Exception:\n  pass\nx = tf.placeholder(tf.float32)\n',
]


def test_a_notebook_with_ipython_syntax_keeps_every_cells_findings(tmp_path):
  path = _notebook(tmp_path / 'colab.ipynb', *IPYTHON_CELLS)
  result = engine.scan([path])
  assert not result.unchecked, result.unchecked
  found = {(f.cell, f.rule) for f in result.findings}
  assert {(2, 'summary-v1'), (3, 'tf1-removed'), (4, 'logging'),
          (5, 'session'), (6, 'gfile'), (7, 'placeholder')} <= found, found
  # Lines are the cell's own, as Jupyter numbers them.
  assert {(f.cell, f.line) for f in result.findings
          if f.rule == 'placeholder'} == {(7, 5)}


def test_a_cell_with_broken_python_is_still_the_only_one_left_out(tmp_path):
  path = _notebook(tmp_path / 'n.ipynb', 'import tensorflow as tf\n',
                   'def broken(:\n', 'tf.Session()\n')
  result = engine.scan([path])
  assert [u.reason.split(' (')[0] for u in result.unchecked] == [
      f'cell 2 {engine.NOT_PYTHON3}']
  assert [(f.cell, f.rule) for f in result.findings] == [(3, 'session')]


def test_python_in_brackets_that_looks_like_a_magic_stays_python():
  from migration_tools.scanner import notebooks  # pylint: disable=g-import-not-at-top
  cell = 'x = (a\n     % b)\ny = "!" != z\n'
  assert notebooks.python_of(cell) == cell
  mixed = '!ls\nx = (a\n     % b)\n'
  assert notebooks.python_of(mixed) == 'pass\nx = (a\n     % b)\n'


def test_a_reference_without_a_call_is_for_review_never_silent():
  source = ('import tensorflow as tf\n'
            'SUMMARIES = dict(scalar_fn=tf.summary.scalar)\n'
            "tf.summary.scalar('loss', loss)\n")
  assert _found(source) == [(2, 'summary-op', rules.REVIEW),
                            (3, 'summary-op', rules.SILENT)]


@pytest.mark.parametrize('source', [
    'config = dict(iterations_per_loop=100, host_call=None)',
    'def make(**kw):\n  return kw\nmake(eval_metrics=m, scaffold_fn=f)',
    # TF 2 Keras code with a params dict of its own.
    "def build_model(params):\n  return params['batch_size']",
    "def dataset(params, ctx):\n  return params['batch_size']",
    "params = {'batch_size': 8}\nparams['batch_size']",
])
def test_estimator_keywords_and_params_are_not_found_outside_its_apis(source):
  found = _rules('import tensorflow as tf\n' + source)
  assert not found & {'iterations-per-loop', 'host-call', 'eval-metrics',
                      'scaffold-fn', 'batch-size-param'}, found


@pytest.mark.parametrize('source, rule', [
    ('tf.estimator.tpu.RunConfig(tpu_config=tf.estimator.tpu.TPUConfig('
     'iterations_per_loop=100))', 'iterations-per-loop'),
    ('contrib.tpu().TPUEstimatorSpec(mode, loss=l, host_call=h)',
     'host-call'),
    ("def model_fn(features, labels, mode, params):\n"
     "  return params['batch_size']", 'batch-size-param'),
    ("def my_input(params):\n  return params['batch_size']\n"
     'estimator.train(input_fn=my_input)', 'batch-size-param'),
    ("estimator.train(input_fn=lambda params: data(params['batch_size']))",
     'batch-size-param'),
    ("def data(params, path):\n  return params['batch_size']\n"
     'estimator.train(functools.partial(data, path=p))', 'batch-size-param'),
])
def test_estimator_keywords_and_params_are_found_where_it_takes_them(
    source, rule):
  assert rule in _rules('import tensorflow as tf\n' + source)


def test_where_with_three_arguments_is_for_review():
  assert _found('import tensorflow as tf\ntf.where(c, x, y)\n'
                'tf.where(c)\n') == [(2, 'where-broadcast', rules.REVIEW)]


def test_enable_v2_behavior_through_compat_v2_is_no_finding():
  assert _found('import tensorflow.compat.v2 as tf\n'
                'tf.enable_v2_behavior()\n') == []
  assert ('tf1-removed', rules.BREAKS) in {
      (rule, severity) for _, rule, severity in
      _found('import tensorflow as tf\ntf.enable_v2_behavior()\n')}


def test_in_compat_v2_only_matches_the_installed_tensorflow():
  only = {name for name in dir(tf.compat.v2) if not name.startswith('_')} - {
      name for name in dir(tf)}
  assert only == set(rules.IN_COMPAT_V2_ONLY)


@pytest.mark.e2e
def test_a_non_python_file_named_alone_is_said_to_be_no_python(tmp_path):
  readme = tmp_path / 'README.md'
  readme.write_text('# Model\n```python\nimport tensorflow as tf\n```\n')
  alone = run_module('migration_tools.scanner', str(readme))
  assert alone.returncode == 2
  assert last_line(alone.stderr) == (
      f'error: nothing to scan: {readme} is a .md file; the scanner reads '
      '.py files and notebooks (and scripts with no suffix) only')
  code = tmp_path / 'train.py'
  code.write_text('import tensorflow as tf\ntf.Session()\n')
  script = tmp_path / 'train'
  script.write_text('#!/usr/bin/env python3\nimport tensorflow as tf\n'
                    'tf.Session()\n')
  both = run_module('migration_tools.scanner', str(readme), str(code),
                    str(script))
  assert both.returncode == 1, both.stderr
  assert f'{readme}: not scanned: a .md file' in both.stdout
  assert f'{script}:3:1: breaks' in both.stdout
  assert 'does not parse' not in both.stdout


@pytest.mark.e2e
def test_diff_says_notebooks_are_not_rewritten_and_outputs_are_readable(
    tmp_path):
  code = tmp_path / 'code'
  code.mkdir()
  _notebook(code / 'colab.ipynb', 'import tensorflow as tf\n',
            'tf.gfile.Exists("x")\n')
  (code / 'train.py').write_text('import tensorflow as tf\n'
                                 'tf.gfile.Exists("x")\n')
  patch, report = tmp_path / 'fix.patch', tmp_path / 'report.txt'
  result = subprocess.run(
      ['sh', '-c', 'umask 022 && exec "$@"', 'sh', *_scan_command(),
       str(code), f'--diff={patch}', f'--output={report}'],
      capture_output=True, text=True, check=False,
      env={**os.environ, 'PYTHONPATH': os.getcwd()})
  assert result.returncode == 1, result.stderr
  assert ('1 notebook(s) not rewritten: --diff rewrites .py files only; '
          'their findings are in the report') in result.stderr
  assert 'safe rewrites in 1 of 1 file(s)' in result.stderr
  for written in (patch, report):
    assert written.stat().st_mode & 0o777 == 0o644, written


def _scan_command() -> list[str]:
  import sys  # pylint: disable=g-import-not-at-top
  return [sys.executable, '-m', 'migration_tools.scanner']
