"""The port contract: what breaks it is named in one line, in-process."""
import dataclasses
import importlib
import os
import sys
import warnings

import numpy as np

import pytest
import tensorflow as tf

from kit_core.errors import KitError
from kit_pair import mnist as kit_pair
from migrate import custom_loop
from migration_tools import cli
from migration_tools.compare import checks
from migration_tools.compare import harness
from migration_tools.pair import flags as pair
from migration_tools.pair import frameworks
from migration_tools.pair import optimizers
import migration_tools
from migration_tools.pair import port as port_lib
from migration_tools.pair import variable_map


def test_the_kit_pair_follows_the_contract():
  port = frameworks.load_port(pair.KIT_PAIR['port'])
  assert isinstance(port, port_lib.Port)
  assert set(port_lib.TRAINER_METHODS) <= set(dir(custom_loop.Trainer))


def test_a_port_written_for_the_earlier_path_loads_with_a_warning(
    tmp_path, monkeypatch, capsys):
  # migration_tools.port moved to migration_tools.pair.port: a port that
  # imports the old path loads, and the command says, in a line, what to
  # import instead (a DeprecationWarning outside __main__ is not shown).
  (tmp_path / 'earlier_port.py').write_text(
      'from migration_tools import port\n'
      'from migration_tools.port import Port\n'
      'from kit_pair.mnist import make_port\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  # As in a fresh process: no earlier import of the old path (the
  # documented-surface test makes one), as a module or as the package's
  # attribute.
  monkeypatch.delitem(sys.modules, 'migration_tools.port', raising=False)
  monkeypatch.delattr(migration_tools, 'port', raising=False)
  make = frameworks.load_port('earlier_port:make_port')
  assert isinstance(make, port_lib.Port)
  assert sys.modules['earlier_port'].port is port_lib
  assert sys.modules['earlier_port'].Port is port_lib.Port
  assert capsys.readouterr().err == (
      f'warning: {tmp_path / "earlier_port.py"}:1: migration_tools.port '
      'moved to migration_tools.pair.port: import it as `from '
      'migration_tools.pair import port`; migration_tools.port goes in the '
      'next release\n')
  with pytest.warns(DeprecationWarning, match='migration_tools.pair.port'):
    monkeypatch.delitem(sys.modules, 'migration_tools.port')
    importlib.import_module('migration_tools.port')


def test_the_earlier_cpu_strategies_warns_and_gives_the_frameworks_placements():
  # harness.cpu_strategies gave a Keras port's strategies; the harness now
  # asks the port's framework (harness.placements): kept, with a warning.
  with pytest.warns(DeprecationWarning, match=r'harness\.placements'):
    strategies = harness.cpu_strategies([1, 2])
  assert list(strategies) == ['1 replica', '2 replicas']
  assert [s.num_replicas_in_sync for s in strategies.values()] == [1, 2]
  placed = harness.placements(kit_pair.make_port(), [1, 2])
  assert [s.num_replicas_in_sync for s in placed.values()] == [1, 2]


def test_the_earlier_name_of_the_kits_jax_port_warns_and_still_names_it():
  with pytest.warns(DeprecationWarning, match=r"KIT_PORTS\)\['jax'\]"):
    assert pair.KIT_JAX_PORT == 'kit_pair.mnist_jax:make_port'
  with pytest.raises(AttributeError):
    pair.NO_SUCH_NAME  # pylint: disable=pointless-statement


def test_a_kit_module_that_moved_is_named_where_it_is_now(tmp_path,
                                                         monkeypatch):
  (tmp_path / 'older_port.py').write_text(
      'from migration_tools import variable_map\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(KitError) as e:
    frameworks.load_port('older_port:make_port')
  assert str(e.value) == (
      "--port: cannot import older_port (cannot import name 'variable_map' "
      f"from 'migration_tools' ({os.path.dirname(cli.__file__)}"
      "/__init__.py): migration_tools.variable_map is now "
      'migration_tools.pair.variable_map); import it from there')


def test_a_module_renamed_into_its_frameworks_folder_is_named_there(
    tmp_path, monkeypatch):
  # The Keras runner moved into pair/frameworks/keras_tf/ under another
  # name: the line names its new path.
  (tmp_path / 'runner_port.py').write_text(
      'from migration_tools.pair import port_runner\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(KitError) as e:
    frameworks.load_port('runner_port:make_port')
  assert 'migration_tools.pair.port_runner is now ' \
      'migration_tools.pair.frameworks.keras_tf.runner' in str(e.value)


def test_the_contracts_public_paths_are_their_frameworks_modules():
  # A port imports its contract from pair/; its code lives in its
  # framework's folder, and both paths are one module, without a warning.
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    from migration_tools.pair import array_port  # pylint: disable=import-outside-toplevel
    from migration_tools.pair.frameworks.arrays import port as arrays_port  # pylint: disable=import-outside-toplevel
    from migration_tools.pair.frameworks.keras_tf import port as keras_port  # pylint: disable=import-outside-toplevel
  assert port_lib is keras_port and array_port is arrays_port


def test_variables_that_share_a_path_are_refused_naming_them():
  # Keras lets sibling layers share a name; keyed by path, two of three
  # would be left out in silence.
  class Sibling(tf.keras.Model):

    def __init__(self):
      super().__init__(name='albert')
      self.blocks = [tf.keras.layers.Dense(n, name='dense') for n in (3, 2)]

    def call(self, x):
      return self.blocks[1](self.blocks[0](x))

  model = Sibling()
  model(tf.zeros((1, 4)))
  with pytest.raises(KitError) as e:
    port_lib.state_variables(model)
  assert str(e.value) == (
      "the port's model has variables that share a path: albert/dense/kernel "
      '(2 variables, shapes [4, 3], [3, 2]); albert/dense/bias (2 '
      'variables, shapes [3], [2]); the kit keys variables by path, and '
      'Keras lets sibling layers share a name: give each layer a name of its '
      "own (e.g. Dense(64, name='dense_2'))")


class _NoEval(custom_loop.Trainer):
  eval_steps = None


@pytest.mark.parametrize('spec, message', [
    ('broken_ports:not_a_port',
     "--port broken_ports:not_a_port returned a dict, not a "
     "migration_tools.pair.port.Port"),
    ('no_such_module:make_port', '--port: cannot import no_such_module'),
    ('broken_ports:nothing_here', '--port: broken_ports has no nothing_here'),
    ('broken_ports', "--port 'broken_ports': expected package.module:name"),
])
def test_load_port_names_what_is_wrong(spec, message):
  with pytest.raises(KitError) as error:
    frameworks.load_port(spec)
  assert str(error.value).startswith(message), str(error.value)


def test_a_trainer_without_a_method_is_named():
  port = dataclasses.replace(kit_pair.make_port(), trainer_class=_NoEval)
  with pytest.raises(KitError, match='trainer_class _NoEval lacks eval_steps: '
                     'implement the Trainer protocol'):
    port_lib.check_port(port, 'test')


def test_a_map_naming_a_missing_variable_is_named():
  with pytest.raises(KitError, match=r"variable map names conv1/bias, "
                     r"conv1/kernel, which the port's model does not have "
                     r"\(it has conv2d/kernel, conv2d/bias\)"):
    variable_map.resolve({'conv1/kernel': (3, 3), 'conv1/bias': (3,)},
                         {'conv2d/kernel': (3, 3), 'conv2d/bias': (3,)},
                         {'conv1/kernel': 'conv1/kernel',
                          'conv1/bias': 'conv1/bias'})


def test_an_inferred_map_pairs_by_name_then_by_shape_and_order():
  legacy = {'conv2d/kernel': (3, 3, 1, 8), 'conv2d/bias': (8,),
            'conv2d_1/kernel': (3, 3, 8, 8), 'conv2d_1/bias': (8,),
            'dense/kernel': (8, 2), 'dense/bias': (2,)}
  port = {'model/dense/kernel': (8, 2), 'model/dense/bias': (2,),
          'a/kernel': (3, 3, 1, 8), 'a/bias': (8,),
          'b/kernel': (3, 3, 8, 8), 'b/bias': (8,)}
  resolved = variable_map.infer(legacy, port)
  assert resolved.pairs == {
      'dense/kernel': 'model/dense/kernel', 'dense/bias': 'model/dense/bias',
      'conv2d/kernel': 'a/kernel', 'conv2d/bias': 'a/bias',
      'conv2d_1/kernel': 'b/kernel', 'conv2d_1/bias': 'b/bias'}
  assert resolved.by_order() == ['conv2d/kernel -> a/kernel',
                                 'conv2d/bias -> a/bias',
                                 'conv2d_1/kernel -> b/kernel',
                                 'conv2d_1/bias -> b/bias']


def test_an_ambiguous_map_lists_what_is_left():
  with pytest.raises(KitError, match=r'cannot pair every variable by name or '
                     r'by shape and order \(left: legacy w \[4\]; port '
                     r'x/kernel \[4\], y/kernel \[4\]\); give the map'):
    variable_map.infer({'w': (4,)}, {'x/kernel': (4,), 'y/kernel': (4,)})


def test_a_variable_map_file_must_be_a_json_object(tmp_path):
  bad = tmp_path / 'map.json'
  bad.write_text('["a", "b"]')
  with pytest.raises(KitError, match='expected a JSON object'):
    variable_map.read(str(bad))
  with pytest.raises(KitError, match='No such file'):
    variable_map.read(str(tmp_path / 'missing.json'))


@pytest.mark.parametrize('text, message', [
    ('{"a": 1', '--params is not JSON'),
    ('[1]', '--params must be a JSON object'),
    ('{"batch_size": 8}', '--params holds batch_size, which TPUEstimator sets'),
])
def test_params_are_a_json_object_without_reserved_keys(text, message):
  with pytest.raises(KitError, match=message):
    cli.parse_params(text)


def test_a_command_without_a_batch_takes_batch_size_as_the_users_own():
  # The converter has no --batch_size: the key goes to the port as it is.
  assert cli.parse_params('{"batch_size": 8}', batch_flag=None) == {
      'batch_size': 8}
  with pytest.raises(KitError, match=r'sets itself$'):
    cli.parse_params('{"use_tpu": true}', batch_flag=None)


def test_momentum_slots_convert_between_conventions():
  accumulator = np.array([1.0, -2.0], np.float32)
  keras = optimizers.to_port(optimizers.MOMENTUM, 'momentum', accumulator, 0.1)
  np.testing.assert_allclose(keras, [-0.1, 0.2])
  np.testing.assert_allclose(optimizers.to_legacy(
      optimizers.MOMENTUM, 'momentum', keras, 0.1), accumulator)
  assert optimizers.to_port(optimizers.ADAM, 'm', accumulator, 0.1) is not None
  with pytest.raises(ValueError, match='learning rate of 0'):
    optimizers.to_legacy(optimizers.MOMENTUM, 'momentum', keras, 0.0)


def test_optimizer_differences_are_phrased():
  legacy = optimizers.Description(optimizers.ADAM, {'epsilon': 1e-8,
                                                    'beta_1': 0.9})
  assert optimizers.differences(legacy, optimizers.Description(
      optimizers.ADAM, {'epsilon': 1e-8, 'beta_1': 0.9})) == []
  assert optimizers.differences(legacy, optimizers.Description(
      optimizers.ADAM, {'epsilon': 1e-7, 'beta_1': 0.9})) == [
          "epsilon is 1e-08 in the legacy Adam and 1e-07 in the port's"]
  assert 'the legacy optimizer is Adam(' in optimizers.differences(
      legacy, optimizers.Description(optimizers.SGD, {}))[0]


def test_recorder_isolates_a_raising_check_and_lists_the_rest():
  rec = harness.Recorder(['a', 'b', 'c', 'd'])
  rec.run('a', lambda: checks.judged('a', 0.0, 1.0, {}, ''))
  rec.run('b', lambda: 1 / 0)
  rec.error(['c'], 'c could not run')
  results = rec.results()
  assert [r.status for r in results] == [checks.PASSED, checks.ERROR,
                                         checks.ERROR, checks.NOT_RUN]
  # The cause, and where in the code that raised it.
  assert results[1].message.startswith('ZeroDivisionError: division by zero'
                                       ' (at ')
  assert results[2].message == 'c could not run'
  assert results[1].summary().startswith('ERROR b: ZeroDivisionError')


def test_planned_checks_match_the_report_of_the_kit_pair():
  names = harness.planned_checks(['1 replica', '2 replicas', '4 replicas'],
                                 serving=True)
  assert len(names) == 32 and len(set(names)) == 32
  assert names[:5] == ['inventory', 'optimizer', 'inputs', 'inference',
                       'beyond_init']
  assert 'inputs (2 replicas)' in names
  assert names[-2:] == ['dropout (1 replica)', 'tpu_ready']
  assert harness.planned_checks(['1 replica'], serving=True,
                                tpu_ready=False)[-1] == 'dropout (1 replica)'
  assert harness.planned_checks(['1 replica', '2 replicas'], serving=True,
                                speed=True)[-3:] == [
                                    'tpu_ready', 'speed (1 replica)',
                                    'speed (2 replicas)']


def test_importing_the_harness_leaves_the_environment_alone():
  # Only the command turns oneDNN off for itself; a process that imports the
  # library (these tests, and the subprocesses they start) keeps its default.
  assert os.environ.get('TF_ENABLE_ONEDNN_OPTS') != '0'


def test_outputs_and_metrics_are_compared_by_name_or_through_a_map():
  theirs = {'scores': np.array([0.25, 0.75]), 'classes': np.array([1, 0])}
  ours = {'probabilities': np.array([0.25, 0.75]), 'classes': np.array([1, 0])}
  unmapped = checks.inference.judge(theirs, ours, {})
  assert unmapped.status == checks.FAILED
  assert unmapped.message.startswith('the port has no output for scores')
  mapped = checks.inference.judge(theirs, ours, {'scores': 'probabilities'})
  assert mapped.passed and mapped.figures['max_diff_by_output'] == {
      'scores': 0.0, 'classes': 0.0}
  shifted = checks.inference.judge(theirs, {**ours, 'classes': np.array([1, 1])},
                             {'scores': 'probabilities'})
  assert shifted.status == checks.FAILED
  assert shifted.message.startswith('classes differs by up to 1')
  evaluation = checks.evaluation.judge({'auc': 0.9, 'loss': 0.5},
                                 {'area': 0.9, 'loss': 0.5}, {'auc': 'area'}, 64)
  assert evaluation.passed
  missing = checks.evaluation.judge({'auc': 0.9, 'loss': 0.5}, {'loss': 0.5}, {}, 64)
  assert missing.message.startswith('the port reports no metric for auc')


def test_a_port_without_input_pipeline_skips_the_inputs_check():
  result = checks.inputs.judge((np.zeros((2, 3)), np.zeros(2)), None)
  assert result.status == checks.SKIPPED and not result.failed
  assert result.summary().startswith('SKIP inputs: the port gives no '
                                     'input_pipeline')


def test_a_shared_block_made_per_layer_in_the_port_is_named():
  legacy = {'shared/q/kernel': (16, 16), 'shared/q/bias': (16,),
            'shared/k/kernel': (16, 16), 'shared/k/bias': (16,),
            'embeddings/words': (40, 8)}
  port = {'embeddings/words': (40, 8)}
  for layer in range(3):
    port.update({f'layer_{layer}/q/kernel': (16, 16),
                 f'layer_{layer}/q/bias': (16,),
                 f'layer_{layer}/k/kernel': (16, 16),
                 f'layer_{layer}/k/bias': (16,)})
  with pytest.raises(KitError) as raised:
    variable_map.resolve(legacy, port, None)
  assert ('the port holds 3 copies of 2 kinds of variables the legacy model '
          'has once (e.g. a block the legacy model shares across its '
          'layers') in str(raised.value)
