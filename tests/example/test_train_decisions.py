"""migrate/train.py's decisions, fast: which loop can train as configured,
where a run resumes, what an export writes and refuses, how a stopped run
says to resume. Models are built, never trained;
tests/example/test_migrate_train.py trains end to end."""
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import cpu_strategy
from kit_core import errors
from kit_core.errors import KitError
from migrate import checkpoints
from migrate import config as config_lib
from migrate import train
from mnist_common.errors import NonFiniteExportError


def _config(**changes) -> config_lib.Config:
  return config_lib.Config(**changes)


def test_the_configs_defaults_are_the_flags_one_place():
  # Nothing to name for a default run: every field has its flag's default.
  config = _config()
  assert (config.batch_size, config.loop, config.steps_per_execution,
          config.checkpoint_steps) == (1024, 'fit', 50, 100)


@pytest.mark.parametrize('changes, refused', [
    ({'loop': 'fit', 'checkpoint_steps': 100, 'steps_per_execution': 50},
     None),
    ({'loop': 'fit', 'checkpoint_steps': 30, 'steps_per_execution': 20},
     'is not a multiple of --steps_per_execution=20'),
    # The custom loop saves at any step.
    ({'loop': 'custom', 'checkpoint_steps': 30, 'steps_per_execution': 20},
     None),
])
def test_fit_saves_only_between_executions(changes, refused):
  check = lambda: train._check_loop(_config(**changes), cpu_strategy(1))  # pylint: disable=protected-access
  if refused is None:
    check()
  else:
    with pytest.raises(KitError, match=refused):
      check()


def test_xla_on_cpus_compiles_one_replica_only():
  train._check_jit_compile(_config(jit_compile=True), cpu_strategy(1))  # pylint: disable=protected-access
  train._check_jit_compile(_config(), cpu_strategy(2))  # pylint: disable=protected-access
  with pytest.raises(KitError, match='cannot compile a step of 2 replicas'):
    train._check_jit_compile(_config(jit_compile=True), cpu_strategy(2))  # pylint: disable=protected-access


def test_a_run_resumes_at_the_step_its_model_dir_saved(tmp_path):
  config = _config(model_dir=str(tmp_path), train_steps=40)
  strategy = cpu_strategy(1)
  model, optimizer, manager = train._build_and_restore(  # pylint: disable=protected-access
      config, strategy, str(tmp_path))
  assert int(optimizer.iterations.numpy()) == 0
  optimizer.iterations.assign(17)
  model.get_layer('logits').bias.assign(tf.fill([10], 0.25))
  checkpoints.save_final(manager, 17)
  _, resumed, _ = train._build_and_restore(config, strategy, str(tmp_path))  # pylint: disable=protected-access
  assert int(resumed.iterations.numpy()) == 17


def test_an_export_serves_and_two_in_a_second_do_not_collide(tmp_path):
  strategy = cpu_strategy(1)
  model, _, _ = train._build_and_restore(  # pylint: disable=protected-access
      _config(), strategy, str(tmp_path))
  first = train.export(model, str(tmp_path), strategy)
  second = train.export(model, str(tmp_path), strategy)
  assert first != second and os.path.dirname(first) == str(tmp_path /
                                                           'export')
  serve = tf.saved_model.load(first).signatures['serving_default']
  served = serve(image=tf.zeros([2, 28, 28, 1], tf.uint8))
  assert served['class_ids'].shape == (2,)
  np.testing.assert_allclose(served['probabilities'].numpy().sum(axis=1),
                             1.0, rtol=1e-5)


def test_a_model_that_is_not_finite_is_never_exported(tmp_path):
  strategy = cpu_strategy(1)
  model, _, _ = train._build_and_restore(  # pylint: disable=protected-access
      _config(), strategy, str(tmp_path))
  model.get_layer('logits').bias.assign(tf.fill([10], np.nan))
  with pytest.raises(NonFiniteExportError):
    train.export(model, str(tmp_path), strategy)
  assert not (tmp_path / 'export').exists()  # Refused before any folder.


@pytest.mark.parametrize('flag, expected', [
    ('/data/run', 'run the same command again'),
    (None, 'run again with --model_dir=/tmp/migrate_x1'),
    (None, "run again with --model_dir='/tmp/my runs/migrate_x1'"),
])
def test_a_stopped_run_says_how_to_resume(flag, expected):
  folder = (flag or ('/tmp/my runs/migrate_x1' if 'my runs' in expected
                     else '/tmp/migrate_x1'))
  assert errors.run_again(flag, folder) == expected
  said = str(errors.Preempted(5, f'{folder}/ckpt-5', 'SIGTERM',
                              errors.run_again(flag, folder)))
  assert said.endswith(f'{expected} to resume from it')
