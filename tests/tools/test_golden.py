"""Golden bundles: the legacy side of a comparison recorded on TF 2.15 and
replayed against the port.

The tests marked 'estimator' record bundles (TF 2.15 only);
test_across_versions.py replays one recorded on TF 2.15 on the newest TF.
"""
import dataclasses
import io
import json
import os
import re
import zipfile

import numpy as np
import pytest

import kit_bundle
from conftest import FAIL_FAST, REPO, append_zeros, failed_first
from conftest import last_line, run_compare
from kit_core import room
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from migration_tools.compare import context
from migration_tools.compare import golden
from migration_tools.pair import stored

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e


@pytest.fixture
def recorded(kit_recording):
  """A bundle of the kit's pair recorded live on TF 2.15 as the committed
  one is (once a run: conftest.kit_recording), and that run's report."""
  return kit_recording


@pytest.mark.estimator
def test_the_committed_kit_bundle_is_what_the_code_records(recorded):
  found = kit_bundle.differences(kit_bundle.BUNDLE, str(recorded[0]))
  assert not found, (
      f'{os.path.relpath(kit_bundle.BUNDLE, REPO)} no longer matches what '
      f'the code records ({"; ".join(found[:5])}'
      f'{f"; and {len(found) - 5} more" if len(found) > 5 else ""}): '
      f'refresh it with `{kit_bundle.REFRESH}` on the estimator profile and '
      'commit it')


def test_the_kit_bundle_says_what_recorded_it_and_stays_small():
  bundle = golden.load(kit_bundle.BUNDLE)
  assert bundle.versions['tensorflow'] == '2.15.1'
  assert bundle.versions['format'] == golden.FORMAT
  assert re.fullmatch(r'[0-9a-f]{40}(\+changes)?',
                      bundle.versions['kit_commit'])
  assert bundle.replica_counts == [1, 2] and bundle.options['steps'] == 2
  # 5.65 MB at 2 steps (docs/TESTING.md, "The kit's bundle"); a recording
  # that grows past this is a choice to make, not a drift.
  assert os.path.getsize(kit_bundle.BUNDLE) < 6e6


def _perturbed(tmp_path, change) -> str:
  """The kit's bundle with its arrays changed by change(key, array)."""
  manifest, arrays = stored.load(kit_bundle.BUNDLE)
  path = str(tmp_path / 'changed.npz')
  stored.save(path, manifest, {k: change(k, a) for k, a in arrays.items()},
              deltas=True)
  return path


def test_a_bundle_apart_from_the_committed_one_is_told_stale(tmp_path):
  # What the code records, moved by rounding (another CPU's kernels): the
  # same; moved by a change of the code: stale, where and by how much.
  start = stored.encode(golden.load(kit_bundle.BUNDLE).tape.answer(
      '1 replica|0|state|0')['dense/kernel'], {})['__array__']
  rounded = _perturbed(tmp_path, lambda k, a: (
      a * np.float32(1 + 2e-7)).astype(a.dtype) if a.dtype == np.float32
                       else a)
  assert kit_bundle.differences(kit_bundle.BUNDLE, rounded) == []
  changed = _perturbed(tmp_path, lambda k, a: a * np.float32(1.001)
                       if k == start else a)
  found = kit_bundle.differences(kit_bundle.BUNDLE, changed)
  assert found and all('dense/kernel: apart by' in f for f in found)
  assert any(f.startswith("1 replica|0|state|0/dense/kernel") for f in found)


@pytest.mark.estimator
def test_bundle_replays_as_the_live_comparison_on_2_15(tmp_path, recorded):
  bundle, live = recorded
  result, replayed = run_compare(tmp_path / 'replay.json',
                                 f'--bundle={bundle}')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert re.search(r'recorded with TensorFlow 2\.15\.1 at kit commit '
                   r'[0-9a-f]{12}; replicas 1,2$', result.stdout, re.M)
  assert list(replayed) == list(live) and len(live) == 21
  for name, check in live.items():
    assert replayed[name]['status'] == check['status'] == 'passed', name
    assert replayed[name].get('max_abs_diff') == check.get('max_abs_diff')
  # On one replica the port is bit-identical to the recorded legacy run.
  for name in ('inference', 'one_step (1 replica)', 'trajectory (1 replica)',
               'stepwise (1 replica)', 'dropout (1 replica)'):
    assert replayed[name]['max_abs_diff'] == 0, name
  # Where the time went: the legacy side's phases live, none of them here.
  with open(tmp_path / 'replay.json', encoding='utf-8') as f:
    phases = json.load(f)['time']
  with open(recorded[0].parent / 'live.json', encoding='utf-8') as f:
    live_phases = json.load(f)['time']
  assert {'legacy graph building', 'legacy Session.run', 'exports',
          'writing the bundle', 'XLA compiles (tpu_ready)', 'port building',
          'port steps'} <= set(live_phases)
  assert {'reading the bundle', 'port steps'} <= set(phases) and not any(
      p.startswith('legacy') for p in phases)
  assert abs(sum(phases.values()) - 2 * phases['total']) < 1e-6
  assert f'Time: {phases["total"]:.0f} s: ' in result.stdout


@pytest.mark.estimator
def test_the_port_passes_on_an_emulated_bfloat16_device(tmp_path, recorded):
  # Its math at float32, as without the flag; its outputs with every dot's
  # operands rounded to bfloat16 within what that rounding explains.
  result, checks = run_compare(tmp_path / 'bf16.json',
                               f'--bundle={recorded[0]}', '--replicas=1',
                               '--emulate_precision=bf16', '--notpu_ready')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  assert "as deployed, its dots' operands rounded to bf16 (emulated)" in (
      result.stdout)
  drift = checks['device_drift']
  assert drift['rounding'] == 'bf16' and drift['dots_rounded'] > 0
  assert 0 < drift['ratio_to_bar'] < 1
  assert checks['inference']['max_abs_diff'] == 0
  # Every forward check says the noise its bar was measured against.
  for name in ('inference', 'beyond_init', 'evaluation'):
    noise = checks[name]['noise']
    assert noise['multiple'] == 4 and noise['measured_by'].startswith(
        "the port's outputs again"), name


@pytest.mark.estimator
def test_broken_port_fails_the_bundle_in_the_check_for_its_bug(tmp_path,
                                                                recorded):
  # On an emulated TF32 device too: the bug is in the port's math, which
  # is checked at float32 whatever the device.
  result, checks = run_compare(
      tmp_path / 'broken.json', f'--bundle={recorded[0]}',
      '--port=broken_ports:loss_averaged_per_replica',
      '--emulate_precision=tf32', FAIL_FAST)
  failed_first(result, checks, 'one_step (2 replicas)',
               'gradients are 2x the legacy ones')
  assert checks['trajectory (1 replica)']['passed']
  assert checks['device_drift']['passed']


@pytest.mark.estimator
def test_speed_from_a_bundle_times_the_port_alone(tmp_path, recorded):
  bundle, _ = recorded
  result, checks = run_compare(tmp_path / 'replay.json', f'--bundle={bundle}',
                               '--speed', '--speed_windows=1')
  assert result.returncode == 0, result.stdout + result.stderr[-2000:]
  for label in ('1 replica', '2 replicas'):
    speed = checks[f'speed ({label})']
    assert speed['status'] == 'skipped'
    assert speed['port']['examples_per_s'] > 0 and 'ratio' not in speed
    assert 'the legacy step is timed live only' in speed['message']


@pytest.mark.estimator
def test_bundle_holds_each_array_once_and_exactly(recorded):
  bundle = golden.load(str(recorded[0]))
  assert bundle.replica_counts == [1, 2] and bundle.serving
  assert bundle.options['steps'] == 2
  assert bundle.versions['tensorflow'] == '2.15.1'
  start = bundle.tape.answer('1 replica|0|state|0')
  after_one = bundle.tape.answer('1 replica|1|state|0')
  assert start.keys() == after_one.keys()
  assert all(start[k].dtype == np.float32 for k in start)
  # The first step keeps its gradients, later ones only their loss and rate.
  assert 'gradients' in bundle.tape.answer('1 replica|0|step|0')
  assert 'gradients' not in bundle.tape.answer('1 replica|1|step|0')
  assert isinstance(bundle.tape.answer('1 replica|0|step|0')['loss'],
                    np.floating)
  manifest, arrays = stored.load(str(recorded[0]))
  digests = {a.tobytes() for a in arrays.values()}
  assert len(digests) == len(arrays)  # No array stored twice.
  # A step of plain SGD is stored as the weights before plus a multiple of
  # the gradient (array_codec): the bits rounding leaves, next to nothing.
  def key(answer, name):
    return stored.encode(bundle.tape.answer(answer)[name], {})['__array__']
  codec = manifest[stored.CODECS][key('1 replica|1|state|0', 'dense/kernel')]
  assert codec['kind'] == 'line' and codec['ref'] == key(
      '1 replica|0|state|0', 'dense/kernel')
  assert codec['direction'] == stored.encode(bundle.tape.answer(
      '1 replica|0|step|0')['gradients']['dense/kernel'], {})['__array__']


@pytest.mark.parametrize('args, message', [
    (('--bundle=/nonexistent/kit.npz',), 'cannot read the bundle '
     '/nonexistent/kit.npz'),
    (('--bundle=x.npz', '--record_bundle=y.npz'), '--bundle checks against a '
     'recorded bundle and --record_bundle records one: give one of them'),
    (('--record_bundle=/nonexistent/kit.npz',), '--record_bundle '
     '/nonexistent/kit.npz: its folder does not exist'),
    # A name cannot forge a line nor drive the terminal: escaped.
    (('--bundle=/nonexistent/ev\nil\x1b[2J.npz',), 'cannot read the bundle '
     '/nonexistent/ev\\nil\\x1b[2J.npz'),
])
def test_bad_bundle_flags_fail_in_one_line(tmp_path, args, message):
  result, _ = run_compare(tmp_path / 'r.json', *args)
  assert result.returncode == 1
  assert message in last_line(result.stderr), result.stderr[-1500:]
  assert '\x1b' not in result.stderr and 'il\n' not in result.stderr


def test_a_file_that_is_no_bundle_is_refused(tmp_path):
  path = tmp_path / 'other.npz'
  np.savez(path, weights=np.zeros(3))
  result, _ = run_compare(tmp_path / 'r.json', f'--bundle={path}')
  assert result.returncode == 1
  assert 'is not a golden bundle (no manifest)' in last_line(result.stderr)
  # The report asked for holds the error, and nothing else.
  report = json.loads((tmp_path / 'r.json').read_text())
  assert report['passed'] is False and report['checks'] == []
  assert report['error'] == last_line(result.stderr).removeprefix('error: ')


def _forged(source, tmp_path, change):
  """The bundle at source with its manifest changed by change(manifest)."""
  manifest, arrays = stored.load(str(source))
  change(manifest)
  path = tmp_path / 'forged.npz'
  stored.save(str(path), manifest, arrays)
  return path


def _options(change):
  def forge(manifest):
    options = dict(stored.decode(manifest['options'], {}))
    change(options)
    manifest['options'] = stored.encode(options, {})
  return forge


def _nested(manifest):
  deep = 1
  for _ in range(900):
    deep = [deep]
  manifest['options'] = deep


@pytest.mark.estimator
@pytest.mark.parametrize('change, message', [
    # A bundle that says it takes 10**9 steps would grow for ever.
    (_options(lambda o: o.update(steps=10**9)),
     'option steps is 1000000000, and the bundle holds'),
    (_options(lambda o: o.update(global_batch='64')),
     "option global_batch is '64'"),
    (_options(lambda o: o.update(surprise=1)),
     "options surprise are none of this kit's"),
    (lambda m: m.update(replica_counts=[2, 1]), 'replica_counts is [2, 1]'),
    (_nested, 'maximum recursion depth'),
    (lambda m: m.update(format='3'),
     "is a bundle of format '3'; this kit reads formats 3 and 4"),
])
def test_a_forged_bundle_is_refused_in_one_line(recorded, tmp_path, change,
                                                message):
  path = _forged(recorded[0], tmp_path, change)
  with pytest.raises(KitError) as raised:
    golden.load(str(path))
  assert message in str(raised.value), str(raised.value)
  assert '\n' not in str(raised.value)


@pytest.mark.estimator
def test_a_bundle_of_the_format_before_the_coding_is_read(recorded,
                                                           tmp_path):
  # Format 3 stored every array as it is: a bundle recorded so on TF 2.15
  # stays the proof once TF 2.15 is gone.
  path = _forged(recorded[0], tmp_path, lambda m: m.update(format=3))
  with zipfile.ZipFile(path) as archive:
    assert stored.CODECS not in json.loads(
        str(np.load(path)[stored.MANIFEST]))
    assert len(archive.namelist()) > 10
  old, new = golden.load(str(path)), golden.load(str(recorded[0]))
  assert sorted(old.tape.keys()) == sorted(new.tape.keys())
  for key in new.tape.keys():
    # Arrays are encoded by the hash of their bits: equal JSON, equal bits.
    assert (stored.encode(old.tape.answer(key), {}) ==
            stored.encode(new.tape.answer(key), {})), key


def _with_entry(source, tmp_path, name, header_shape=None, data=b''):
  """source with one more entry: an .npy whose header declares
  header_shape (float32) followed by data, or data as it is."""
  path = tmp_path / 'grown.npz'
  path.write_bytes(source.read_bytes())
  with zipfile.ZipFile(path, 'a', zipfile.ZIP_DEFLATED) as archive:
    if header_shape is not None:
      buffer = io.BytesIO()
      np.lib.format.write_array_header_2_0(buffer, {
          'descr': '<f4', 'fortran_order': False, 'shape': header_shape})
      data = buffer.getvalue() + data
    archive.writestr(name, data)
  return path


@pytest.mark.estimator
def test_sizes_a_bundle_declares_are_checked_before_anything_is_read(
    recorded, tmp_path, monkeypatch):
  # An array that declares 2**40 floats (4 TB), its bytes absent.
  huge = _with_entry(recorded[0], tmp_path, 'huge.npy', (2**40,))
  with pytest.raises(KitError, match=r'cannot read the bundle \S+ \(ValueError:'
                     ' huge.npy declares 4398046511104 bytes'):
    golden.load(str(huge))
  huge.unlink()
  # A zip bomb: zeros that deflate 1000 to 1, declared as what they are,
  # more than the memory free (here made 50 MB): refused before one is
  # inflated.
  monkeypatch.setattr(room, 'available_memory', lambda: 50_000_000)
  bomb = tmp_path / 'bomb.npz'
  bomb.write_bytes(recorded[0].read_bytes())
  append_zeros(bomb, 'bomb', 2**25)
  assert bomb.stat().st_size < recorded[0].stat().st_size + 1_000_000
  with pytest.raises(KitError, match='declares 134.2 MB of arrays, more '
                     'than the 50.0 MB of memory free here'):
    golden.load(str(bomb))
  monkeypatch.undo()
  # A pickle is never read.
  buffer = io.BytesIO()
  np.save(buffer, np.array([{'a': 1}], dtype=object), allow_pickle=True)
  pickled = _with_entry(recorded[0], tmp_path, 'objects.npy',
                        data=buffer.getvalue())
  with pytest.raises(KitError, match='holds Python objects'):
    golden.load(str(pickled))


def test_a_fifo_as_bundle_is_refused_not_opened(tmp_path):
  fifo = tmp_path / 'bundle.npz'
  os.mkfifo(fifo)
  result, _ = run_compare(tmp_path / 'r.json', f'--bundle={fifo}')
  assert result.returncode == 1
  assert last_line(result.stderr) == (
      f'error: the bundle {fifo} is not a regular file (a FIFO, a socket or '
      'a device): give the file itself'), result.stderr[-2000:]


def test_the_bundle_options_checked_are_the_harness_options():
  assert set(golden._OPTION_TYPES) == {  # pylint: disable=protected-access
      f.name for f in dataclasses.fields(context.Options)}


def test_a_signal_while_a_bundle_loads_is_a_stop_not_a_damaged_bundle(
    tmp_path, monkeypatch):
  def interrupted(path, what='the bundle'):
    raise Interrupted('SIGINT', 'the comparison was stopped')
  monkeypatch.setattr(stored, 'open_lazily', interrupted)
  with pytest.raises(Interrupted):
    golden.load(str(tmp_path / 'kit.npz'))
