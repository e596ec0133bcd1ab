"""kit_core's guards, called directly: checkpoints found by their files,
outputs that may destroy no input, one trainer per model_dir, signals that
end a block in one line."""
import json
import logging
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import tensorflow as tf

from conftest import REPO, tmpfs
from kit_core import atomic
from kit_core import checkpoint_files
from kit_core import exits
from kit_core import owners
from kit_core import paths
from kit_core import private_folders
from kit_core import process
from kit_core import room
from kit_core import timing
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line


def _object_checkpoints(directory, steps):
  """tf.train.Checkpoint's ckpt-N for each step, through a manager (which
  writes the state file)."""
  checkpoint = tf.train.Checkpoint(v=tf.Variable(0.0))
  manager = tf.train.CheckpointManager(checkpoint, str(directory),
                                       max_to_keep=5)
  for step in steps:
    checkpoint.v.assign(float(step))
    manager.save(checkpoint_number=step)


def test_checkpoints_are_found_by_their_files(tmp_path):
  _object_checkpoints(tmp_path, [0, 2, 10])
  expected = [str(tmp_path / f'ckpt-{n}') for n in (10, 2, 0)]
  assert checkpoint_files.find(str(tmp_path)) == expected
  # The state file naming a deleted checkpoint, then garbage, then gone:
  # the files still say what is there (10 after 2: by step, not by name).
  for path in tmp_path.glob('ckpt-10.*'):
    path.unlink()
  assert checkpoint_files.latest(str(tmp_path)) == expected[1]
  (tmp_path / 'checkpoint').write_text('garbage {{{')
  assert checkpoint_files.find(str(tmp_path)) == expected[1:]
  (tmp_path / 'checkpoint').unlink()
  assert checkpoint_files.latest(str(tmp_path)) == expected[1]
  assert checkpoint_files.latest(str(tmp_path / 'nothing_here')) is None


def test_record_state_names_the_checkpoint_for_tensorflow(tmp_path, caplog):
  _object_checkpoints(tmp_path, [2, 4])
  (tmp_path / 'checkpoint').unlink()
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  found = checkpoint_files.find(str(tmp_path))
  checkpoint_files.record_state(str(tmp_path), found, found[0])
  assert tf.train.latest_checkpoint(str(tmp_path)) == found[0]
  assert 'The checkpoint state file in' in caplog.text
  assert 'is missing: resuming from ckpt-4' in caplog.text
  # Written relative: the model_dir can be moved again.
  assert str(tmp_path) not in (tmp_path / 'checkpoint').read_text()


@pytest.mark.parametrize('make, folder, message', [
    (lambda t: '', False, '--out is empty'),
    (lambda t: t / 'link', False, r'--out \S+link is a symbolic link'),
    (lambda t: t / 'b_folder', False, r'--out \S+b_folder is a folder; name a '
     'file'),
    (lambda t: t / 'a_file', True, r'--out \S+a_file is a file; name a new '
     'folder'),
    (lambda t: t / 'fifo', False, r'--out \S+fifo is a special file'),
    (lambda t: t / 'source.py', False, r'--out \S+source.py would overwrite '
     r'the input --in \S+source.py'),
    (lambda t: t / 'a_folder' / 'inside.txt', False, r'--out \S+inside.txt '
     r'would overwrite the input --in \S+a_folder'),
    (lambda t: t / 'other.json', False, r'--out and --other are the same '
     'path'),
    (lambda t: t / 'missing' / 'x', False, r'--out \S+x: its folder does not '
     'exist'),
])
def test_an_output_that_would_destroy_something_is_refused(tmp_path, make,
                                                           folder, message):
  (tmp_path / 'a_file').write_text('')
  (tmp_path / 'source.py').write_text('')
  (tmp_path / 'link').symlink_to(tmp_path / 'a_file')
  (tmp_path / 'a_folder').mkdir()
  (tmp_path / 'b_folder').mkdir()
  (tmp_path / 'a_folder' / 'inside.txt').write_text('')
  os.mkfifo(tmp_path / 'fifo')
  inputs = [('the input --in', str(tmp_path / 'source.py')),
            ('the input --in', str(tmp_path / 'a_folder'))]
  with pytest.raises(KitError, match=message):
    paths.check_output(str(make(tmp_path)), '--out', inputs,
                       [('--other', str(tmp_path / 'other.json'))], folder)
  assert (tmp_path / 'link').is_symlink()
  # A new file beside the inputs is fine.
  assert paths.check_output(str(tmp_path / 'new.txt'), '--out', inputs) == str(
      tmp_path / 'new.txt')


def test_one_trainer_holds_a_model_dir_until_its_block_ends(tmp_path):
  with paths.one_trainer(str(tmp_path)):
    # Another open file description conflicts as another process would.
    with pytest.raises(KitError, match=rf'--model_dir {tmp_path} is in use by '
                       rf'another trainer \(pid {os.getpid()}\); wait for it '
                       'to end, or use another --model_dir'):
      with paths.one_trainer(str(tmp_path)):
        pass
  with paths.one_trainer(str(tmp_path)):
    pass  # Free again.
  assert os.listdir(tmp_path) == []  # Nothing written for the lock.


def test_interruptible_turns_a_signal_into_one_line_and_restores_handlers():
  before = signal.getsignal(signal.SIGTERM)
  with pytest.raises(Interrupted) as raised:
    with exits.interruptible('nothing was written'):
      os.kill(os.getpid(), signal.SIGTERM)  # Handled as this call returns.
      pytest.fail('the signal did not stop the block')
  assert exits.exit_message(raised.value) == (
      'stopped: SIGTERM received: nothing was written', 143)
  assert signal.getsignal(signal.SIGTERM) == before


def test_a_file_written_whole_gets_the_mode_the_umask_gives(tmp_path):
  """mkstemp makes 0600: a report a CI uploader running as another user
  reads must get what any new file gets, and a replaced file keeps its
  own mode."""
  from kit_core import atomic  # pylint: disable=g-import-not-at-top
  before = os.umask(0o022)
  try:
    atomic.write_text(str(tmp_path / 'report.txt'), 'x')
    assert (tmp_path / 'report.txt').stat().st_mode & 0o777 == 0o644
    with atomic.temporary_path(str(tmp_path / 'bundle'), directory=True) as d:
      open(os.path.join(d, 'a'), 'w').close()
    assert (tmp_path / 'bundle').stat().st_mode & 0o777 == 0o755
    os.umask(0o077)
    atomic.write_text(str(tmp_path / 'private.txt'), 'x')
    assert (tmp_path / 'private.txt').stat().st_mode & 0o777 == 0o600
    (tmp_path / 'report.txt').chmod(0o640)
    atomic.write_text(str(tmp_path / 'report.txt'), 'y')
    assert (tmp_path / 'report.txt').stat().st_mode & 0o777 == 0o640
  finally:
    os.umask(before)


def test_room_refuses_only_what_clearly_does_not_fit(tmp_path):
  estimate = room.Estimate('the bundle', 10_000_000, 4_000_000,
                           '5 arrays of 2 MB')
  target = str(tmp_path / 'new' / 'bundle.npz')  # Its folder not made yet.
  room.check(estimate, '--record_bundle', target, 'record less',
             free=8_000_000, available=3_200_000)  # 80%: may fit.
  with pytest.raises(KitError, match=re.escape(
      '--record_bundle: the bundle would take about 10.0 MB (5 arrays of 2 '
      f'MB) and {tmp_path}/new has 7.9 MB free; record less, or write it to '
      'another disk')):
    room.check(estimate, '--record_bundle', target, 'record less',
               free=7_900_000, available=10**12)
  with pytest.raises(KitError, match=re.escape(
      '--output: the bundle would hold about 4.0 MB in memory (5 arrays of 2 '
      'MB) and 3.1 MB is available; run it where more memory is free')):
    room.check(estimate, '--output', target, '', free=10**12,
               available=3_100_000)
  # Read from the system: the nearest folder that exists.
  assert room.free_disk(target) == room.free_disk(str(tmp_path)) > 0
  assert room.available_memory() > 0
  assert [room.size_text(n) for n in (512, 2048, 3_800_000_000)] == [
      '512 bytes', '2.0 kB', '3.8 GB']


def _dead_pid() -> int:
  child = subprocess.Popen([sys.executable, '-c', ''])
  child.wait()
  return child.pid


_TAILS = iter(f'abcd{n:04d}' for n in range(10000))


def _orphan(parent, prefix, pid, record=None, entries=('handler',)):
  """A private folder as a killed process left it: its owner file (record,
  or the process's own owner record), and entries."""
  folder = parent / f'{prefix}{pid}_{next(_TAILS)}'
  folder.mkdir()
  if record is not False:
    (folder / private_folders.OWNER_FILE).write_text(json.dumps(
        record or owners.owner(pid)))
  for entry in entries:
    if '.' in entry:
      (folder / entry).write_text('the user\'s')
    else:
      (folder / entry).mkdir()
  return folder.name


def test_a_private_folder_outlives_no_killed_process(tmp_path, monkeypatch):
  """What a SIGKILLed trainer left in the temporary folder goes at the next
  start; only that: its owner file names a process provably gone, and it
  holds nothing else than the kit puts there."""
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
  dead, alive = _dead_pid(), os.getppid()
  gone = {
      _orphan(tmp_path, 'kit_x_', dead),
      # The id taken again by a process that started later.
      _orphan(tmp_path, 'kit_x_', alive,
              {**owners.owner(alive), 'start': -1}),
      # Made before this boot.
      _orphan(tmp_path, 'kit_x_', alive,
              {**owners.owner(alive), 'boot': 'another-boot'}),
  }
  kept = {
      _orphan(tmp_path, 'kit_x_', alive),  # A live process's.
      # TD01: a user's file in a folder of the kit's name and a dead pid.
      _orphan(tmp_path, 'kit_x_', dead, entries=('handler', 'thesis.tex')),
      _orphan(tmp_path, 'kit_x_', _dead_pid(), record=False),  # No owner.
      # TD06: a process of another pid namespace, which may be alive.
      _orphan(tmp_path, 'kit_x_', _dead_pid(),
              {**owners.owner(), 'pid_namespace': 'pid:[1]', 'pid': 0}),
      _orphan(tmp_path, 'kit_y_', _dead_pid()),  # Another prefix.
  }
  (tmp_path / f'kit_x_{dead}_file0000').write_text('a file')
  (tmp_path / f'kit_x_{dead}_toolongname').mkdir()
  kept |= {f'kit_x_{dead}_file0000', f'kit_x_{dead}_toolongname'}
  mine = private_folders.private_folder('kit_x_', contents='handler')
  assert os.path.basename(mine).startswith(f'kit_x_{os.getpid()}_')
  assert set(os.listdir(tmp_path)) == kept | {os.path.basename(mine)}
  assert not gone & set(os.listdir(tmp_path))
  # This process's own folder is left to its exit, even by a second call;
  # it says whose it is.
  assert os.path.isdir(mine) and os.path.isdir(
      private_folders.private_folder('kit_x_', contents='handler'))
  with open(os.path.join(mine, private_folders.OWNER_FILE)) as f:
    assert json.load(f) == owners.owner()


def test_timing_counts_each_second_once_for_the_innermost_phase():
  now = [0.0]
  ledger = timing.Ledger(clock=lambda: now[0])
  with ledger.spent('graph building'):
    now[0] += 2
    with ledger.spent('Session.run'):
      now[0] += 3
    now[0] += 1
  with ledger.spent('Session.run'):
    now[0] += 4
  now[0] += 5  # No phase claims it.
  assert ledger.totals() == {'Session.run': 7, 'graph building': 3,
                             'other': 5, 'total': 15}
  assert ledger.line() == ('Time: 15 s: 7 s Session.run, 3 s graph building, '
                           '5 s other')
  with pytest.raises(ValueError), ledger.spent('exports'):
    now[0] += 1
    raise ValueError  # A phase that raises still counts.
  assert ledger.totals()['exports'] == 1
  ledger.restart()
  assert ledger.totals() == {'other': 0, 'total': 0}


def test_a_kit_error_is_shown_whole_and_a_foreign_one_cut():
  long = 'x' * 400
  assert one_line(KitError(f'cannot pair {long} (left: a, b)')).endswith(
      '(left: a, b)')
  assert len(one_line(ValueError(long))) == len('ValueError: ') + 300


def test_held_back_framework_logs_go_to_the_file_and_errors_still_show(
    tmp_path, caplog):
  from kit_core import framework_logs  # pylint: disable=import-outside-toplevel
  logger = logging.getLogger('tensorflow')
  held = framework_logs.HeldBack(str(tmp_path / 'report.log'))
  logger.addFilter(held)
  try:
    with caplog.at_level(logging.INFO, logger='tensorflow'):
      logger.warning('calling %s is deprecated', 'TPUEstimator')
      logger.info('loss = 2.3')
      logger.error('the step failed')
  finally:
    logger.removeFilter(held)
  assert [r.getMessage() for r in caplog.records] == ['the step failed']
  assert held.count == 2
  assert (tmp_path / 'report.log').read_text().splitlines() == [
      'WARNING:tensorflow: calling TPUEstimator is deprecated',
      'INFO:tensorflow: loss = 2.3']


def test_held_back_logs_wait_for_the_file_named_later(tmp_path, monkeypatch,
                                                     capsys):
  """The example names its log once its model_dir is known: what was held
  before goes there first; a resumed run's is appended; what waits is
  bounded."""
  from kit_core import framework_logs  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(framework_logs, 'PENDING_LINES', 3)
  logger = logging.getLogger('tensorflow')
  log = tmp_path / 'tensorflow.log'
  for run in range(2):
    held = framework_logs.hold_back()
    try:
      for n in range(5):
        logger.warning('before %d', n)
      assert framework_logs.write_held_back_to(str(log))
      logger.warning('after')
      framework_logs.hold_native_lines('I0000 a native line\n')
    finally:
      logger.removeFilter(held)
  lines = log.read_text().splitlines()
  assert [re.sub(r'^--- .*: a new run$', '---', n) for n in lines] == 2 * [
      '---', 'WARNING:tensorflow: before 2', 'WARNING:tensorflow: before 3',
      'WARNING:tensorflow: before 4', 'WARNING:tensorflow: after',
      'I0000 a native line']
  # Nothing held back (--verbose): nothing is written.
  assert not framework_logs.write_held_back_to(str(tmp_path / 'other.log'))
  assert not (tmp_path / 'other.log').exists()
  framework_logs.hold_native_lines('I0000 shown\n')
  assert capsys.readouterr().err == 'I0000 shown\n'


@pytest.mark.parametrize('make', ['symlink', 'fifo', 'folder'])
def test_the_held_back_log_follows_no_link_blocks_on_nothing_and_says_why(
    tmp_path, make):
  # A user's diary.txt behind a link named tensorflow.log got TensorFlow's
  # notices appended; a FIFO there hung the example after its Data: line.
  from kit_core import framework_logs  # pylint: disable=import-outside-toplevel
  log = tmp_path / 'tensorflow.log'
  diary = tmp_path / 'diary.txt'
  diary.write_text('mine\n')
  if make == 'symlink':
    log.symlink_to(diary)
  elif make == 'fifo':
    os.mkfifo(log)
  else:
    log.mkdir()
  logger = logging.getLogger('tensorflow')
  held = framework_logs.hold_back()
  try:
    assert framework_logs.write_held_back_to(str(log))  # Returns at once.
    logger.warning('a notice')
    failure = framework_logs.failure()
  finally:
    logger.removeFilter(held)
  assert failure is not None and failure.startswith(f'{log}: '), failure
  assert diary.read_text() == 'mine\n'
  assert log.is_symlink() or log.is_fifo() or log.is_dir()


def test_the_held_back_log_keeps_its_newest_half_past_its_bound(
    tmp_path, monkeypatch):
  from kit_core import framework_logs  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(framework_logs, 'MAX_BYTES', 4096)
  log = tmp_path / 'tensorflow.log'
  log.write_text(''.join(f'line {n}\n' for n in range(1000)))  # ~8.9 KB
  logger = logging.getLogger('tensorflow')
  held = framework_logs.hold_back()
  try:
    framework_logs.write_held_back_to(str(log))
    logger.warning('newest')
    assert framework_logs.failure() is None
  finally:
    logger.removeFilter(held)
  lines = log.read_text().splitlines()
  assert lines[0] == ('--- older lines trimmed: this log keeps its newest '
                      '2 KB')
  assert lines[1].startswith('line ') and 'line 999' in lines
  assert lines[-1] == 'WARNING:tensorflow: newest'
  assert log.stat().st_size < 4096


def test_a_refused_write_names_the_file_asked_for_and_the_commands_flags(
    tmp_path, monkeypatch):
  # A full disk under migration-compare --report named no file and pointed
  # at --model_dir, --data_dir and --output, which it has none of.
  with tmpfs(tmp_path / 'disk', '64k') as disk:
    target = disk / 'report.json'
    with pytest.raises(OSError) as raised:
      atomic.write_bytes(str(target), b'x' * 200_000)
    assert os.listdir(disk) == []  # Nothing half-written.
  assert raised.value.filename == str(target)
  monkeypatch.setattr(exits, '_OUTPUT_FLAGS', list(exits._OUTPUT_FLAGS))  # pylint: disable=protected-access
  exits.output_flags('--report (or --record_bundle)')
  assert str(exits.storage_error(raised.value)) == (
      f'cannot write {target}: no space left on device; free space there, '
      'or point --report (or --record_bundle) elsewhere')


def test_native_stderr_is_held_and_given_back_on_an_error(capfd):
  """What native code writes to descriptor 2 goes where the command says;
  if the block raised, back to stderr, beside the error."""
  taken = []
  with process.native_stderr_held(taken.append):
    os.write(2, b'I0000 device_compiler.h:186] Compiled cluster\n')
  assert taken == ['I0000 device_compiler.h:186] Compiled cluster\n']
  assert capfd.readouterr().err == ''
  with pytest.raises(ValueError):
    with process.native_stderr_held(taken.append):
      os.write(2, b'why it failed\n')
      raise ValueError('compile failed')
  assert capfd.readouterr().err == 'why it failed\n' and len(taken) == 1


def _scan(tmp_path, **kwargs):
  source = tmp_path / 'legacy.py'
  source.write_text('import tensorflow as tf\ns = tf.Session()\n')
  return subprocess.run([sys.executable, '-m', 'migration_tools.scanner',
                         str(source)], cwd=REPO, text=True, timeout=120,
                        check=False, **kwargs)


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='no /dev/full')
def test_a_full_stdout_is_one_true_line_not_a_full_disk(tmp_path):
  with open('/dev/full', 'w') as full:
    ran = _scan(tmp_path, stdout=full, stderr=subprocess.PIPE)
  assert ran.returncode != 0
  assert ran.stderr.strip().splitlines() == [
      "error: stdout refused the command's output ([Errno 28] No space left "
      'on device): its work may be done, but what it printed is lost; send '
      'the output where it can be written'], ran.stderr


def test_a_closed_stdout_ends_quietly(tmp_path):
  _scan(tmp_path, capture_output=True)  # Writes the file scanned.
  # >&- : the command starts with no descriptor 1.
  ran = subprocess.run(
      ['sh', '-c', f'exec "{sys.executable}" -m migration_tools.scanner '
       f'"{tmp_path / "legacy.py"}" >&-'], cwd=REPO, capture_output=True,
      text=True, timeout=120, check=False)
  assert ran.returncode == 1, ran.stderr  # Findings, as with a stdout.
  assert ran.stderr == ''


_KILLED_AFTER_AUTOGRAPH = """
import os, signal, sys, tempfile
import tensorflow as tf
from kit_core import process

def main():
  @tf.function
  def twice_if_positive(x):
    if x > 0:  # AutoGraph writes this function's converted module.
      x = 2 * x
    return x
  print(tempfile.gettempdir(), twice_if_positive(tf.constant(1.0)).numpy())
  sys.stdout.flush()
  # A folder of tempfile's with a file in it, as a library's work leaves.
  with open(os.path.join(tempfile.mkdtemp(), 'part.bin'), 'wb') as f:
    f.write(b'0')
  if sys.argv[1] == 'kill':
    os.kill(os.getpid(), signal.SIGKILL)

process.run_command(main)
"""


@pytest.mark.parametrize('users', [
    (), ('tmpq1w2e3r4.csv',), ('{made}/notes.txt',),
    ('__pycache__/notes.txt',)])
def test_a_killed_commands_temporary_files_go_with_the_next_command(
    tmp_path, users):
  """AutoGraph's generated modules and tempfile's files go into the
  command's own folder: removed at its end, or, once it was SIGKILLed, by
  the next command, only if everything in it is in the manifest its process
  wrote: a user's file there, even under a name of tempfile's or in a
  folder the command made, keeps it."""
  script = tmp_path / 'command.py'
  script.write_text(_KILLED_AFTER_AUTOGRAPH)
  temp = tmp_path / 'tmp'
  temp.mkdir()
  env = {**os.environ, 'TMPDIR': str(temp),
         'PYTHONPATH': os.pathsep.join([REPO, os.environ.get('PYTHONPATH',
                                                             '')])}

  def run(how):
    ran = subprocess.run([sys.executable, str(script), how], env=env,
                         capture_output=True, text=True, timeout=120,
                         check=False)
    return ran, pathlib.Path(ran.stdout.split()[0])

  killed, its_folder = run('kill')
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
  assert its_folder.parent == temp
  assert its_folder.name.startswith(private_folders.TEMPORARY_FILES)
  left = sorted(p.name for p in its_folder.iterdir())
  assert any(n.startswith('__autograph_generated_file') for n in left), left
  made = next(p.name for p in its_folder.iterdir() if (p / 'part.bin').exists())
  (temp / 'user_file.txt').write_text('not the kit\'s')
  for user in users:
    path = its_folder / user.format(made=made)
    path.parent.mkdir(exist_ok=True)
    path.write_text('not the kit\'s')
  ended, its_own = run('end')
  assert ended.returncode == 0, ended.stderr[-2000:]
  assert ended.stdout.split()[1] == '2.0'
  assert its_own != its_folder and not its_own.exists()
  assert sorted(p.name for p in temp.iterdir()) == sorted(
      ['user_file.txt'] + ([its_folder.name] if users else []))
  for user in users:
    assert (its_folder / user.format(made=made)).read_text() == (
        'not the kit\'s')


def _swallowed_sigterm():
  """A SIGTERM whose Interrupted is swallowed, as a weakref callback, a
  TensorFlow error wrapping it, or a broad except would."""
  try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(2)  # The handler runs here.
  except Exception:  # pylint: disable=broad-except
    pass


def test_a_signal_whose_exception_was_swallowed_still_stops_the_block(
    tmp_path):
  target = tmp_path / 'bundle.npz'
  with pytest.raises(Interrupted, match='SIGTERM'):
    with exits.interruptible('nothing was written'):
      _swallowed_sigterm()
      # What would stand as finished is never put in place.
      atomic.write_text(str(target), 'half of it')
  assert list(tmp_path.iterdir()) == []
  # The block's normal end raises it too; any other error becomes it.
  with pytest.raises(Interrupted, match='SIGTERM'):
    with exits.interruptible('nothing was written'):
      _swallowed_sigterm()
  with pytest.raises(Interrupted, match='SIGTERM'):
    with exits.interruptible('nothing was written'):
      _swallowed_sigterm()
      raise ValueError('a check raised after it')
  # Once its block ended, a signal is forgotten.
  with exits.interruptible('nothing was written'):
    atomic.write_text(str(target), 'whole')
  assert target.read_text() == 'whole'


def test_two_runs_writing_one_folder_end_in_one_line(tmp_path):
  """The second of two runs given one output (both saw it empty) finds it
  written when it renames: one line, the first run's output kept whole."""
  output = tmp_path / 'converted'
  with pytest.raises(KitError, match='was written by another run while '
                     'this one worked'):
    with atomic.temporary_path(str(output), directory=True) as second:
      (pathlib.Path(second) / 'mine').write_text('second')
      with atomic.temporary_path(str(output), directory=True) as first:
        (pathlib.Path(first) / 'mine').write_text('first')
  assert (output / 'mine').read_text() == 'first'
  assert sorted(os.listdir(tmp_path)) == ['converted']


def test_what_a_killed_writer_left_goes_at_the_next_write_there(tmp_path):
  """SIGKILL mid-write (a bundle, a conversion) leaves a temporary name
  beside the output; the next write into that folder removes it, and only
  it: a live writer's, one of another pid namespace (a container sharing
  the folder, whose ids mean nothing here), a name that does not say where
  its writer ran, another user's file stay."""
  dead = _dead_pid()
  start = owners.process_start(os.getpid())
  here = owners.pid_namespace_number()
  left = tmp_path / f'.tmp-{dead}.0.{here}-abcd1234.npz'
  left.write_bytes(b'half a bundle')
  left_folder = tmp_path / f'.tmp-{dead}.0.{here}-abcd5678'
  (left_folder / 'variables').mkdir(parents=True)
  reused = tmp_path / f'.tmp-{os.getppid()}.1.{here}-abcd0000.npz'  # Id reused.
  reused.write_bytes(b'half')
  live = tmp_path / f'.tmp-{os.getpid()}.{start}.{here}-abcd9999.npz'
  live.write_bytes(b'being written')
  elsewhere = tmp_path / f'.tmp-{dead}.0.{here + 1}-abcd4444.npz'
  elsewhere.write_bytes(b'another container is writing this')
  unplaced = tmp_path / f'.tmp-{dead}.0-abcd3333.npz'  # No namespace.
  unplaced.write_bytes(b'half')
  old = tmp_path / '.tmp-abcdefgh.npz'
  old.write_bytes(b'no writer named')
  with atomic.temporary_path(str(tmp_path / 'report.json')) as writing:
    # This writer's own name says where it runs.
    assert atomic.TEMP_NAME.fullmatch(os.path.basename(writing)).groups()[
        :3] == (str(os.getpid()), str(start), str(here))
    pathlib.Path(writing).write_text('{}')
  assert sorted(os.listdir(tmp_path)) == sorted(
      [live.name, elsewhere.name, unplaced.name, old.name, 'report.json'])
