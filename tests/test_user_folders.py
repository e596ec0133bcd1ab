"""Nothing of the user's is lost: a command that fails on a full disk or a
read-only folder removes only what it made in this run, never a folder whose
name merely looks like a temporary one (`run-1_temp`, `exp-2_temp`,
`.tmp-12345678`), and nothing above --model_dir or --output.

The disks are tmpfs mounts (root only: skipped, with the reason, elsewhere);
a folder that refuses writes is a read-only tmpfs for root, mode 0555 for
others (kit_core.stale and exits are tested here directly too).
"""
import errno
import json
import os
import re

import pytest

from conftest import estimator_checkpoint
from conftest import last_line
from conftest import read_only
from conftest import run_module
from conftest import tmpfs
from kit_core import exits
from kit_core import stale
from migration_tools.pair import flags as pair

QUICK = ('--train_steps=2', '--batch_size=8', '--noenable_predict',
         '--eval_steps=0')
# A folder of the user's with the kit's own checkpoint prefix, holding a file
# TensorFlow never writes there.
USERS_CHECKPOINT_LOOKALIKE = {'migrate': 'ckpt-3_temp',
                              'estimator_mnist': 'model.ckpt-3_temp'}


def _users_things(folder) -> dict:
  """Files of the user's in folder and in look-alike folders in it;
  {path: text}."""
  folder.mkdir(parents=True, exist_ok=True)
  made = {folder / 'notes.txt': 'my notes',
          folder / 'old-1_temp' / 'mine.txt': 'mine',
          folder / '.tmp-12345678' / 'mine.txt': 'mine too'}
  for path, text in made.items():
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
  return made


def _all_there(made: dict) -> None:
  for path, text in made.items():
    assert path.read_text() == text, f'{path} was lost'


# --- kit_core directly ------------------------------------------------------

@pytest.mark.parametrize('name', ['run-1_temp', '.tmp-12345678', 'exp-2_temp'])
def test_a_refused_write_removes_no_folder_of_the_users(tmp_path, name):
  """The line of a refused write names a path under folders whose names
  look temporary; the command ends in one line and they all stay."""
  model_dir = tmp_path / name / 'experiments' / name
  made = _users_things(model_dir)
  refused = PermissionError(errno.EACCES, 'Permission denied',
                            str(model_dir / 'train' / 'events.out'))

  def run():
    raise refused

  with pytest.raises(SystemExit) as ended:
    exits.exit_with_one_line(run)
  assert ended.value.code == 1
  _all_there(made)


def test_what_a_watch_saw_appear_is_all_that_is_removed(tmp_path):
  pattern = stale.checkpoint_temp('ckpt')
  (tmp_path / 'ckpt-3_temp').mkdir()  # There before: never this run's.
  watch = stale.watch(str(tmp_path), pattern)
  (tmp_path / 'ckpt-7_temp').mkdir()  # This run's unfinished save.
  (tmp_path / 'ckpt-8').write_text('not a temporary name')
  assert watch.new_entries() == ['ckpt-7_temp']
  assert stale.remove_this_runs() == [str(tmp_path / 'ckpt-7_temp')]
  assert sorted(os.listdir(tmp_path)) == ['ckpt-3_temp', 'ckpt-8']


def test_a_killed_runs_leftovers_go_by_name_and_content(tmp_path):
  """A checkpoint's temporary folder holds TensorFlow's shards, a data
  temporary is a file: a folder of the user's with such a name stays."""
  (tmp_path / 'ckpt-5_temp').mkdir()
  for name in ('part-00000-of-00001.data-00000-of-00001',
               'part-00000-of-00001.index.tempstate7126843571520957046'):
    (tmp_path / 'ckpt-5_temp' / name).write_bytes(b'x')
  (tmp_path / 'ckpt-6_temp').mkdir()
  (tmp_path / 'ckpt-6_temp' / 'results.csv').write_text('mine')
  assert stale.remove(str(tmp_path), stale.checkpoint_temp('ckpt'),
                      'unfinished checkpoint folders') == ['ckpt-5_temp']
  (tmp_path / '.tmp-12345678').mkdir()
  (tmp_path / '.tmp-abcdefgh.gz').write_bytes(b'half')
  from kit_core import atomic  # pylint: disable=g-import-not-at-top
  assert stale.remove(str(tmp_path), atomic.TEMP_NAME, 'temporary data files',
                      stale.FILE) == ['.tmp-abcdefgh.gz']
  (tmp_path / 'export').mkdir()
  for name, entries in (('temp-1', ['saved_model.pb', 'variables']),
                        ('temp-2', ['saved_model.pb', 'plots'])):
    for entry in entries:
      (tmp_path / 'export' / name / entry).mkdir(parents=True)
  assert stale.remove(str(tmp_path / 'export'), re.compile(r'temp-\d+'),
                      'unfinished exports', stale.SAVED_MODEL_FOLDER) == [
                          'temp-1']
  assert sorted(os.listdir(tmp_path)) == ['.tmp-12345678', 'ckpt-6_temp',
                                          'export']


def test_the_data_dir_keeps_a_folder_of_the_users_with_a_temporary_name(
    tmp_path):
  from mnist_common import prepare  # pylint: disable=g-import-not-at-top
  prepare.prepare(str(tmp_path), 'fake')
  made = _users_things(tmp_path)
  prepare.prepare(str(tmp_path), 'fake')
  _all_there(made)


# --- each command, on a full disk and on a read-only folder -----------------

TRAINERS = [
    pytest.param('migrate', ('--loop=custom',), id='migrate custom'),
    pytest.param('migrate', ('--loop=fit', '--steps_per_execution=1',
                             '--checkpoint_steps=1'), id='migrate fit'),
    pytest.param('estimator_mnist', (), id='estimator',
                 marks=pytest.mark.estimator),
]


@pytest.mark.e2e
@pytest.mark.parametrize('module, args', TRAINERS)
def test_a_full_disk_keeps_the_model_dir_and_every_folder_above_it(
    tmp_path, fake_data_dir, module, args):
  with tmpfs(tmp_path / 'disk', '1m') as disk:
    model = disk / 'job-7_temp' / 'experiments' / 'run-1_temp'
    made = _users_things(model)
    lookalike = model / USERS_CHECKPOINT_LOOKALIKE[module] / 'results.csv'
    lookalike.parent.mkdir()
    lookalike.write_text('mine')
    made[lookalike] = 'mine'
    result = run_module(module, f'--data_dir={fake_data_dir.data_dir}',
                        f'--model_dir={model}', *QUICK, *args, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r'^error: cannot write /\S+: no space left on device',
                     last_line(result.stderr)), result.stderr[-3000:]
    _all_there(made)
    # What the failed save made is gone; what the user had is not.
    unfinished = [n for n in os.listdir(model) if n.endswith('_temp')]
    assert sorted(unfinished) == sorted(['old-1_temp', lookalike.parent.name])


# The folder a resumed run writes into first, made read-only: migrate's
# TensorBoard summaries; the Estimator's export.
READ_ONLY_PART = {'migrate': 'train', 'estimator_mnist': 'export'}


@pytest.mark.e2e
@pytest.mark.parametrize('module, args', TRAINERS)
def test_a_read_only_folder_in_a_trained_model_dir_keeps_it_whole(
    tmp_path, fake_data_dir, module, args):
  model = tmp_path / 'exp-2_temp'
  common = (f'--data_dir={fake_data_dir.data_dir}', f'--model_dir={model}',
            '--batch_size=8', '--noenable_predict', '--eval_steps=0', *args)
  trained = run_module(module, *common, '--train_steps=2', timeout=300)
  assert trained.returncode == 0, trained.stderr[-3000:]
  made = _users_things(model)
  checkpoints = sorted(n for n in os.listdir(model) if 'ckpt' in n)
  assert checkpoints
  part = model / READ_ONLY_PART[module]
  with read_only(part):
    result = run_module(module, *common, '--train_steps=4', timeout=300)
  assert result.returncode == 1, result.stderr[-3000:]
  assert re.search(r'^error: cannot write /\S+: (read-only file system|'
                   'permission denied)', last_line(result.stderr)), (
                       result.stderr[-3000:])
  _all_there(made)
  assert set(checkpoints) <= set(os.listdir(model))


@pytest.mark.e2e
@pytest.mark.estimator
def test_the_converter_on_a_full_disk_keeps_the_folders_above_its_output(
    tmp_path):
  source = estimator_checkpoint(tmp_path / 'estimator')
  # Room enough by the estimate (the checkpoint is 1.8 MB, refused below
  # 80% of that), too little for the write.
  with tmpfs(tmp_path / 'disk', '1600k') as disk:
    parent = disk / 'run-1_temp' / '.tmp-12345678'
    made = _users_things(parent)
    result = run_module('migration_tools.checkpoint',
                        f'--estimator_dir={source}',
                        f'--output={parent / "converted"}')
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r'^error: cannot write /\S+: no space left on device',
                     last_line(result.stderr)), result.stderr[-3000:]
    _all_there(made)
    assert not (parent / 'converted').exists()
    assert not [n for n in os.listdir(parent) if n.startswith('.tmp-') and
                n != '.tmp-12345678']


@pytest.mark.e2e
@pytest.mark.estimator
@pytest.mark.parametrize('module, args, said', [
    ('migration_tools.checkpoint', ['--output=DISK/converted',
                                    '--estimator_dir=ESTIMATOR'],
     r'--output: the converted checkpoint would take about 1\.8 MB '
     r'\(model\.ckpt-1 is 1\.8 MB, held by the port\'s variables and slots\) '
     r'and \S+ has 1\.0 MB free; write it to another '
     r'disk$'),
    ('migration_tools.compare', ['--record_bundle=DISK/kit.npz',
                                 '--steps=3', '--replicas=1',
                                 '--report=TMP/r.json'],
     r'--record_bundle: the bundle would take about 6\.7 MB \(at least '
     r'3\.7 model-sized arrays of 1\.8 MB at --steps=3 on 1 replica count\) and '
     r'\S+ has 1\.0 MB free; record --steps=1, or a scaled-down configuration '
     r'of the same code \(fewer layers, a smaller hidden size\), or write it '
     r'to another disk$'),
])
def test_too_small_a_disk_is_refused_before_any_work_with_the_estimate(
    tmp_path, module, args, said):
  source = estimator_checkpoint(tmp_path / 'estimator')
  with tmpfs(tmp_path / 'disk', '1m') as disk:
    result = run_module(module, *[
        a.replace('DISK', str(disk)).replace('ESTIMATOR', source).replace(
            'TMP', str(tmp_path)) for a in args])
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(said, last_line(result.stderr)), last_line(
        result.stderr)
    assert os.listdir(disk) == []  # Nothing written.
    assert 'PASS' not in result.stdout  # No check ran.


@pytest.mark.e2e
@pytest.mark.estimator
def test_a_failed_verification_keeps_an_empty_output_the_user_made(tmp_path):
  """--verify fails (here: the legacy input_fn finds no data); the output
  folder the user made stays, emptied of what the run wrote."""
  source = estimator_checkpoint(tmp_path / 'estimator')
  output = tmp_path / '.tmp-12345678'
  output.mkdir()
  result = run_module(
      'migration_tools.checkpoint', f'--estimator_dir={source}',
      f'--output={output}', '--verify', '--verify_examples=8',
      '--params=' + json.dumps({**json.loads(pair.KIT_PAIR['params']),
                                'data_dir': str(tmp_path / 'no_data')}))
  assert result.returncode == 1, result.stderr[-3000:]
  assert last_line(result.stderr).endswith(
      f'; what was written to {output} was removed'), result.stderr[-3000:]
  assert output.is_dir() and os.listdir(output) == []


@pytest.mark.e2e
@pytest.mark.parametrize('flag', ['--output', '--diff'])
def test_the_scanner_on_a_read_only_folder_keeps_it(tmp_path, flag):
  code = tmp_path / 'code'
  code.mkdir()
  (code / 'train.py').write_text('import tensorflow as tf\n'
                                 'tf.logging.info("x")\n')
  with read_only(tmp_path / '.tmp-12345678') as folder:
    result = run_module('migration_tools.scanner', str(code),
                        f'{flag}={folder / "report.txt"}')
    assert result.returncode == 2, result.stderr[-3000:]
    assert re.fullmatch(rf'error: cannot write {flag} \S+: (read-only file '
                        rf'system|permission denied); point {flag} at a '
                        'folder you can write',
                        last_line(result.stderr)), result.stderr[-3000:]
    assert folder.is_dir() and os.listdir(folder) == []
  assert (code / 'train.py').exists()


def _fill(disk) -> None:
  """Fills disk (a tmpfs) to the last byte with a file of the user's."""
  with open(disk / 'filler.bin', 'wb', buffering=0) as f:
    try:
      while True:
        f.write(b'\0' * 4096)
    except OSError:
      pass  # Full.


@pytest.mark.e2e
def test_the_scanner_on_a_full_disk_keeps_the_folder_and_leaves_nothing(
    tmp_path):
  code = tmp_path / 'code'
  code.mkdir()
  (code / 'train.py').write_text('import tensorflow as tf\n' +
                                 'tf.logging.info("x")\n' * 200)
  with tmpfs(tmp_path / 'disk', '64k') as disk:
    folder = disk / '.tmp-12345678'
    made = _users_things(folder)
    _fill(disk)
    result = run_module('migration_tools.scanner', str(code),
                        f'--output={folder / "report.txt"}')
    assert result.returncode == 2, result.stderr[-3000:]
    assert re.fullmatch(r'error: cannot write --output=\S+: No space left on '
                        'device', last_line(result.stderr)), (
                            result.stderr[-3000:])
    _all_there(made)
    assert sorted(os.listdir(folder)) == ['.tmp-12345678', 'notes.txt',
                                          'old-1_temp']


@pytest.mark.e2e
@pytest.mark.parametrize('module, flag, args', [
    pytest.param('migration_tools.compare', '--report', (), id='compare'),
    pytest.param('migration_tools.checkpoint', '--output',
                 ('--estimator_dir={source}',), id='converter',
                 marks=pytest.mark.estimator),
])
def test_an_output_in_a_read_only_folder_is_refused_before_any_work(
    tmp_path, module, flag, args):
  """The tools check that an output's folder takes a file before they
  work (a comparison may run for an hour), and remove nothing."""
  source = tmp_path / 'estimator'
  if module == 'migration_tools.checkpoint':
    estimator_checkpoint(source)
  with read_only(tmp_path / 'run-1_temp') as folder:
    output = folder / ('report.json' if flag == '--report' else 'converted')
    result = run_module(module, f'{flag}={output}',
                        *(a.format(source=source) for a in args),
                        timeout=300)
    assert result.returncode != 0
    assert re.fullmatch(
        rf'error: cannot write {flag} {output}: (read-only file system|'
        rf'permission denied); point {flag} at a folder you can write',
        last_line(result.stderr)), result.stderr[-3000:]
    assert folder.is_dir() and os.listdir(folder) == []
