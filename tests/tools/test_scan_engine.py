"""The scanner's engine driven by toy rule and API tables, apart from the
kit's real ones (tests/tools/test_scan.py holds those to one case per rule), as
tf_upgrade_v2's ast_edits_test drives its engine with toy specs."""
import pytest

from migration_tools.scanner import engine
from migration_tools.scanner import rules


def _rule(rule_id: str, match: str, severity: str = rules.BREAKS):
  return rules.Rule(rule_id, match, 'tf1-api', severity, rule_id,
                    'something else', 'toy-section')


# What TF 2 did to each toy symbol, in tf_api.py's form: (kind, status, TF 2
# name, still in tf.compat.v1).
API = {
    'toy.Gone': ('class', 'removed', '', True),
    'toy.Kept': ('function', 'same', '', True),
    'toy.call': ('function', 'removed', '', True),
    'toy.dropped': ('function', 'removed', '', False),
}
TABLE = engine.Table([
    _rule('gone', 'api:toy.Gone'),
    _rule('kept', 'api:toy.Kept'),
    _rule('dropped', 'api:toy.dropped'),
    _rule('call-args', 'arg:toy.call:1'),
    _rule('keep-prob', 'keyword:keep_prob', rules.SILENT),
    _rule('one-shot', 'method:make_one_shot_iterator'),
    _rule('batch-size', 'subscript:batch_size'),
    _rule('contrib', 'import:tensorflow.contrib.*'),
], API)


def found(source: str) -> list[tuple[int, str, str]]:
  """(line, rule, severity) of each finding in source, under TABLE."""
  return [(f.line, f.rule, f.severity)
          for f in engine.scan_source(source, 'toy.py', TABLE)]


def test_an_api_row_fires_on_a_symbol_tf2_removed():
  assert found('import tensorflow as tf\ntf.toy.Gone()\n') == [
      (2, 'gone', rules.BREAKS)]


def test_through_compat_v1_a_break_only_warns_while_v1_has_it():
  source = 'import tensorflow.compat.v1 as tf\ntf.toy.{}()\n'
  assert found(source.format('Gone')) == [(2, 'gone', rules.COMPAT)]
  # tf.compat.v1 no longer has it: it breaks all the same.
  assert found(source.format('dropped')) == [(2, 'dropped', rules.BREAKS)]


def test_a_symbol_tf2_kept_unchanged_is_no_finding():
  assert found('import tensorflow as tf\ntf.toy.Kept()\n') == []


def test_imports_and_aliases_are_followed():
  assert found('from tensorflow import toy as t\nt.Gone()\n') == [
      (2, 'gone', rules.BREAKS)]
  assert found('import tensorflow as tf\ntoy = tf.toy\ntoy.Gone()\n') == [
      (3, 'gone', rules.BREAKS)]


def test_code_outside_tensorflow_is_no_finding():
  assert found('import numpy as tf\ntf.toy.Gone()\n') == []


def test_an_arg_row_counts_positional_arguments():
  source = 'import tensorflow as tf\ntf.toy.call({})\n'
  assert ('call-args' in
          [rule for _, rule, _ in found(source.format('a, b'))])
  assert ('call-args' not in
          [rule for _, rule, _ in found(source.format('a'))])


def test_keyword_method_and_import_rows():
  assert found('import tensorflow as tf\ntf.toy.Kept(x, keep_prob=0.5)\n'
               ) == [(2, 'keep-prob', rules.SILENT)]
  assert found('TPUEstimatorSpec(x, keep_prob=0.5)\n') == [
      (1, 'keep-prob', rules.SILENT)]
  # A keyword in the user's own call, or dict(...), is the user's.
  assert found('f(x, keep_prob=0.5)\ndict(keep_prob=0.5)\n') == []
  assert found('it = ds.make_one_shot_iterator()\n') == [
      (1, 'one-shot', rules.BREAKS)]
  assert found('from tensorflow.contrib import slim\n') == [
      (1, 'contrib', rules.BREAKS)]


def test_a_subscript_row_counts_only_in_a_file_with_params_functions():
  with_params = ('def model_fn(features, params):\n'
                 '  return params["batch_size"]\n')
  assert found(with_params) == [(2, 'batch-size', rules.BREAKS)]
  assert found('params = {}\nparams["batch_size"]\n') == []


def test_the_ignore_pragma_drops_its_line_only():
  source = ('import tensorflow as tf\n'
            f'tf.toy.Gone()  {engine.IGNORE_LINE}\n'
            'tf.toy.Gone()\n')
  assert found(source) == [(3, 'gone', rules.BREAKS)]


def test_one_finding_per_construct_per_line():
  assert found('import tensorflow as tf\nx = tf.toy.Gone(tf.toy.Gone())\n'
               ) == [(2, 'gone', rules.BREAKS)]


def test_a_row_of_an_unknown_kind_is_refused():
  with pytest.raises(ValueError, match='unknown match'):
    engine.Table([_rule('bad', 'regex:.*')], API)


# A toy symbol TF 2 redefined: TF 1's f(x, keep, name=None, old=None), TF 2's
# f(x, rate, name=None, new=None); position 1 moved (keep -> rate).
_V1_SIGNATURE = (('x', 'keep', 'name', 'old'), 4, 2, False, False)
_V2_SIGNATURE = (('x', 'rate', 'name', 'new'), 4, 2, False, False)
SHAPE_API = {'toy.f': ('function', 'changed', '', True, _V1_SIGNATURE,
                       (_V2_SIGNATURE,), ((1, 'keep', 'rate'),)),
             'toy.g': ('function', 'changed', '', True),
             'toy.marker': ('function', 'same', '', True)}
SHAPE_TABLE = engine.Table([
    _rule('g-v1', 'api:toy.g', rules.SILENT),
    rules.Rule('g-marked', 'api:toy.h', 'tf1-api', rules.SILENT, 'h', 'x',
               'toy-section', undecided=rules.TF1_SHAPE),
], {**SHAPE_API, 'toy.h': ('function', 'changed', '', True)})


def shape_found(call: str) -> list[tuple[str, str]]:
  source = f'import tensorflow as tf\n{call}\n'
  return [(f.rule, f.severity)
          for f in engine.scan_source(source, 'toy.py', SHAPE_TABLE)]


@pytest.mark.parametrize('call,expected', [
    ('tf.toy.f(x, r, new=1)', []),  # Binds to TF 2's signature only.
    ('tf.toy.f(x, k, old=1)', [('tf1-keyword', rules.BREAKS),
                               ('tf1-positional', rules.SILENT)]),
    ('tf.toy.f(x, keep=k)', [('tf1-keyword', rules.BREAKS)]),
    ('tf.toy.f(x, self.keep)', [('tf1-positional', rules.SILENT)]),
    ('tf.toy.f(x, drop_rate)', []),
    ('tf.toy.f(x, 0.5)', [('tf1-positional', rules.REVIEW)]),
    ('tf.toy.f(x, rate=0.5)', []),  # Nothing moved is passed.
    ('tf.toy.f(x, *args)', []),
    # A symbol redefined whole: a call that cannot tell is for review, or
    # decided by the row's default, whatever else the file holds.
    ('tf.toy.g(x)', [('g-v1', rules.REVIEW)]),
    ('tf.toy.h(x)', [('g-marked', rules.SILENT)]),
    ('tf.toy.marker()\ntf.toy.h(x)', [('g-marked', rules.SILENT)]),
])
def test_a_redefined_symbol_is_judged_by_its_call_shape(call, expected):
  assert shape_found(call) == expected


def test_through_compat_v1_the_call_is_tf1_whatever_its_shape():
  # TF 1's own: the positional means what it meant (compat, as for every
  # name TF 2 redefined: Rule.redefined); a silent row stays silent.
  source = 'import tensorflow.compat.v1 as tf\ntf.toy.f(x, 0.5)\ntf.toy.g(x)\n'
  assert [(f.rule, f.severity) for f in engine.scan_source(
      source, 'toy.py', SHAPE_TABLE)] == [('tf1-positional', rules.COMPAT),
                                          ('g-v1', rules.SILENT)]


INDIRECT_TABLE = engine.Table([
    _rule('attr', 'attribute:old_a|old_b'),
    _rule('step-keyword', 'method-arg:run:step'),
    _rule('step-positional', 'method-arg:run:1:step:items|things'),
    _rule('dim', 'shape-attribute:value'),
    _rule('wrapped', 'wrapper:legacy'),
    _rule('fit', 'input_fn-call:fit:input_fn,steps'),
], API)


@pytest.mark.parametrize('source,expected', [
    ('x.old_a\ny.old_b\nz.new_a\n', [(1, 'attr'), (2, 'attr')]),
    ('o.run(a, step=s)\n', [(1, 'step-keyword')]),
    ('o.run(a, global_step)\no.run(a, my_things)\n', [(1, 'step-positional')]),
    ('x.shape[0].value\nx.get_shape()[1].value\nx.value\nd[0].value\n',
     [(1, 'dim'), (2, 'dim')]),
    # Named once per file and wrapper, at its first use.
    ('legacy.mod().A()\nlegacy.mod().B()\nother.mod().A()\n',
     [(1, 'wrapped')]),
    ('e.fit(input_fn=f, steps=1)\ne.fit(train_input_fn, metric_fn)\n'
     'e.fit(input_fn=f, epochs=2)\n', [(1, 'fit')]),
])
def test_indirect_match_kinds(source, expected):
  assert [(f.line, f.rule) for f in engine.scan_source(
      source, 'toy.py', INDIRECT_TABLE)] == expected


def test_a_wrapper_is_named_with_its_uses():
  table = engine.Table([rules.Rule(
      'wrapped', 'wrapper:legacy', 'tf1-api', rules.BREAKS, '{wrapper}',
      '{count}: {uses}', 'toy-section')], API)
  [finding] = engine.scan_source('legacy.mod().A()\nlegacy.mod().B()\n',
                                 'toy.py', table)
  assert (finding.construct, finding.becomes) == ('legacy.mod()', '2: A, B')
