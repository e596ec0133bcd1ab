"""The port contract: what breaks it is named in one line, in-process."""
import dataclasses
import os

import pytest

import broken_ports
from conftest import cpu_strategy
from migrate import custom_loop
from migration_tools import checks
from migration_tools import harness
from migration_tools import kit_pair
from migration_tools import port as port_lib
from migration_tools import port_runner
from mnist_common.errors import KitError


def test_the_kit_pair_follows_the_contract():
  port = port_lib.load_port(kit_pair.PORT)
  assert isinstance(port, port_lib.Port)
  assert set(port_lib.TRAINER_METHODS) <= set(dir(custom_loop.Trainer))


class _NoEval(custom_loop.Trainer):
  eval_steps = None


@pytest.mark.parametrize('spec, message', [
    ('broken_ports:not_a_port',
     "--port broken_ports:not_a_port returned a dict, not a "
     "migration_tools.port.Port"),
    ('no_such_module:make_port', '--port: cannot import no_such_module'),
    ('broken_ports:nothing_here', '--port: broken_ports has no nothing_here'),
    ('broken_ports', "--port 'broken_ports': expected package.module:name"),
])
def test_load_port_names_what_is_wrong(spec, message):
  with pytest.raises(KitError) as error:
    port_lib.load_port(spec)
  assert str(error.value).startswith(message), str(error.value)


def test_a_trainer_without_a_method_is_named():
  port = dataclasses.replace(kit_pair.make_port(), trainer_class=_NoEval)
  with pytest.raises(KitError, match='trainer_class _NoEval lacks eval_steps: '
                     'implement the Trainer protocol'):
    port_lib.check_port(port, 'test')


def test_a_map_naming_a_missing_variable_is_named(fake_data_dir):
  port = broken_ports.auto_named_layers()
  with pytest.raises(KitError, match=r'variable_map names conv1/bias, '
                     r'conv1/kernel, conv2/bias, conv2/kernel \.\.\., which its '
                     r'model does not have \(it has conv2d/bias'):
    port_runner.PortRunner(port, cpu_strategy(1), fake_data_dir.data_dir, 64,
                           0.05)


def test_recorder_isolates_a_raising_check_and_lists_the_rest():
  rec = harness.Recorder(['a', 'b', 'c', 'd'])
  rec.run('a', lambda: checks.judged('a', 0.0, 1.0, {}, ''))
  rec.run('b', lambda: 1 / 0)
  rec.error(['c'], 'c could not run')
  results = rec.results()
  assert [r.status for r in results] == [checks.PASSED, checks.ERROR,
                                         checks.ERROR, checks.NOT_RUN]
  assert results[1].message == 'ZeroDivisionError: division by zero'
  assert results[2].message == 'c could not run'
  assert results[1].summary().startswith('ERROR b: ZeroDivisionError')


def test_planned_checks_match_the_report_of_the_kit_pair():
  names = harness.planned_checks(['1 replica', '2 replicas', '4 replicas'],
                                 serving=True)
  assert len(names) == 17 and len(set(names)) == 17
  assert names[:3] == ['inventory', 'inputs', 'inference']
  assert names[-1] == 'dropout (1 replica)'


def test_importing_the_harness_leaves_the_environment_alone():
  # Only the command turns oneDNN off for itself; a process that imports the
  # library (these tests, and the subprocesses they start) keeps its default.
  assert os.environ.get('TF_ENABLE_ONEDNN_OPTS') != '0'
