"""migration-scan on legacy sources of several eras, and on the kit."""
import json
import os

import pytest

from conftest import REPO, last_line, run_module
from migration_tools import scan

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'legacy_sources')


def _found(name):
  path = os.path.join(SOURCES, name)
  with open(path) as f:
    return [(f.line, f.construct) for f in scan.scan_source(f.read(), path)]


def test_contrib_era_with_aliased_contrib_imports():
  assert _found('contrib_era.py') == [
      (3, 'tf.contrib'), (4, 'tf.contrib'), (8, 'tf.metrics (v1)'),
      (12, 'tf.layers'), (13, 'tf.losses (v1)'), (14, 'CrossShardOptimizer'),
      (15, 'tf.train optimizer'),
      (16, 'tf.compat.v1.train (global step, decay, Saver)'),
      (17, 'TPUEstimatorSpec / EstimatorSpec'),
      (18, 'eval_metrics / metric_fn'), (19, 'host_call'),
      (23, "params['batch_size']"), (27, 'tf.flags / tf.app / tf.logging'),
      (27, 'tf.flags / tf.app / tf.logging'), (28, 'TPUClusterResolver'),
      (29, 'RunConfig / TPUConfig'), (31, 'RunConfig / TPUConfig'),
      (31, 'iterations_per_loop'), (32, 'TPUEstimator'),
      (35, 'export_saved_model / export_savedmodel'),
      (39, 'tf.flags / tf.app / tf.logging')]


def test_compat_v1_era_and_the_ignore_pragma():
  found = _found('compat_v1_era.py')
  assert found == [
      (2, 'import of tensorflow.compat.v1'), (6, 'tf.layers'),
      (7, 'tf.losses (v1)'),
      (8, 'tf.compat.v1.train (global step, decay, Saver)'),
      (8, 'tf.compat.v1.train (global step, decay, Saver)'),
      (10, 'CrossShardOptimizer'), (11, 'tf.train optimizer'),
      (12, 'session hook'), (13, 'TPUEstimatorSpec / EstimatorSpec'),
      (15, 'scaffold_fn / Scaffold'), (19, 'tf.Session / placeholder'),
      (20, 'tf.estimator'), (24, 'RunConfig / TPUConfig'),
      (25, 'iterations_per_loop'), (25, 'RunConfig / TPUConfig'),
      (26, 'TPUEstimator'), (27, 'train_and_evaluate'),
      (33, 'tpu.bfloat16_scope')]
  assert 28 not in [line for line, _ in found]  # '# migration-scan: ignore'


def test_aliases_are_followed_and_tf2_spellings_left_alone():
  assert _found('aliased_imports.py') == [
      (4, 'tf.estimator'), (5, 'RunConfig / TPUConfig'),
      (12, 'tf.train optimizer'), (13, 'RunConfig / TPUConfig'),
      (14, 'TPUEstimator')]


def test_estimator_mnist_lists_every_legacy_construct():
  result = scan.scan([os.path.join(REPO, 'estimator_mnist')])
  constructs = {f.construct for f in result.findings}
  assert constructs == {
      'import of tensorflow.compat.v1', "params['batch_size']",
      'tf.metrics (v1)', 'tf.compat.v1.train (global step, decay, Saver)',
      'tf.train optimizer', 'CrossShardOptimizer', 'tf.estimator',
      'TPUEstimatorSpec / EstimatorSpec', 'tf.losses (v1)',
      'eval_metrics / metric_fn', 'session hook', 'tf.Session / placeholder',
      'TPUEstimator', 'RunConfig / TPUConfig', 'iterations_per_loop',
      'export_saved_model / export_savedmodel'}
  by_file = {os.path.basename(f.path) for f in result.findings}
  assert by_file == {'data.py', 'model.py', 'train.py'}
  assert not result.unparsable and not result.skipped


def test_command_exit_codes_and_outputs(tmp_path):
  clean = run_module('migration_tools.scan', 'migrate', 'migration_tools',
                     'mnist_common')
  assert clean.returncode == 0, clean.stdout
  assert last_line(clean.stdout).startswith('0 legacy construct(s)')
  assert ('migration_tools/legacy.py: skipped: # migration-scan: skip-file'
          in clean.stdout)

  legacy = run_module('migration_tools.scan', SOURCES, '--format=json')
  assert legacy.returncode == 1
  report = json.loads(legacy.stdout)
  assert report['files'] == 4
  assert [u['path'] for u in report['unparsable']] == [
      os.path.join(SOURCES, 'python2_era.py')]
  assert 'does not parse as Python 3 (line 4)' in (
      report['unparsable'][0]['reason'])
  first = report['findings'][0]
  assert first['section'].startswith('docs/MIGRATION.md#')
  assert first['becomes']

  text = run_module('migration_tools.scan',
                    os.path.join(SOURCES, 'contrib_era.py'))
  assert text.returncode == 1
  assert ('contrib_era.py:32: TPUEstimator: `tpu_estimator.TPUEstimator` -> '
          in text.stdout)


@pytest.mark.parametrize('args, message', [
    ((), 'error: give one or more files or directories to scan'),
    (('no/such/dir',), 'error: no such file or directory: no/such/dir'),
])
def test_bad_input_exits_2_in_one_line(args, message):
  result = run_module('migration_tools.scan', *args)
  assert result.returncode == 2
  assert last_line(result.stderr).startswith(message)
  assert not result.stdout


def test_every_rule_points_at_a_section_of_the_guide():
  with open(os.path.join(REPO, scan.GUIDE)) as f:
    guide = f.read()
  anchors = set(_anchors(guide))
  rules = [v for v in vars(scan).values() if isinstance(v, scan.Rule)]
  assert len(rules) > 20
  for rule in rules:
    assert rule.section in anchors, (rule.construct, rule.section)


def _anchors(markdown):
  """GitHub's anchors for the '## ' headings: lower case, punctuation out,
  spaces to hyphens."""
  for line in markdown.splitlines():
    if line.startswith('## '):
      title = line[3:].strip().lower()
      yield ''.join(c for c in title if c.isalnum() or c in ' -_').replace(
          ' ', '-')


def test_unchecked_files_make_the_exit_non_zero_and_the_rest_go_on(tmp_path):
  # Read as Python reads it: a PEP 263 coding line, here latin-1.
  (tmp_path / 'latin.py').write_bytes(
      b'# -*- coding: latin-1 -*-\nimport tensorflow as tf\n'
      b'NAME = "caf\xe9"\nsession = tf.Session()\n')
  # Too deep for the AST walk: listed, not fatal.
  (tmp_path / 'deep.py').write_text('x = ' + ' + '.join(['"a"'] * 5000) + '\n')
  result = scan.scan([str(tmp_path)])
  assert [f.line for f in result.findings] == [4]
  assert [(os.path.basename(p), r) for p, r in result.unparsable] == [
      ('deep.py', 'cannot be analysed: an expression is nested too deeply')]

  (tmp_path / 'latin.py').unlink()
  only_unparsable = run_module('migration_tools.scan', str(tmp_path))
  assert only_unparsable.returncode == 1, only_unparsable.stdout
  assert '1 not parsed' in last_line(only_unparsable.stdout)
