"""Golden bundles written as they are recorded and read as they are asked:
memory that grows with the model, not with the steps (numpy alone)."""
import os
import tracemalloc
import zipfile

import numpy as np
import pytest

from kit_core.errors import KitError
from migration_tools.compare import golden
from migration_tools.pair import recorded
from migration_tools.pair import stored

MB = 1 << 20
ANSWERS = 40  # Of 1 MB each: 40 MB if a side held them all.


def _answer(i: int) -> dict:
  return {'state': {'w': np.full(MB // 4, i, np.float32)},
          'loss': np.float32(i), 'note': f'step {i}'}


def _bundle(tape, steps: int = ANSWERS) -> golden.Bundle:
  # A bundle answers at least once a step (golden.load holds it to that).
  return golden.Bundle({'steps': steps}, [1], False,
                       [({'x': np.ones((2, 3), np.float32)}, None)], tape,
                       {'tensorflow': 'test'})


def _record(path) -> int:
  """Records ANSWERS answers into path; the peak traced memory meanwhile."""
  with golden.recording(str(path)) as tape:
    tape.shards['1 replica'] = 1
    tracemalloc.start()
    try:
      for i in range(ANSWERS):
        tape.keep(f'1 replica|{i}|step|0', _answer(i))
      peak = tracemalloc.get_traced_memory()[1]
    finally:
      tracemalloc.stop()
    tape.finish(_bundle(tape))
  return peak


def test_a_recording_holds_no_answer_it_has_written(tmp_path):
  peak = _record(tmp_path / 'b.npz')
  # One answer at a time (1 MB and its compression), never all 40.
  assert peak < 6 * MB, f'{peak / MB:.1f} MB held while recording'
  with zipfile.ZipFile(tmp_path / 'b.npz') as archive:
    # Each distinct array once, the manifest, the batch's array.
    assert len(archive.namelist()) == ANSWERS * 2 + 2


def test_a_loaded_bundle_reads_each_answer_when_asked(tmp_path):
  _record(tmp_path / 'b.npz')
  tracemalloc.start()
  try:
    bundle = golden.load(str(tmp_path / 'b.npz'))
    loaded = tracemalloc.get_traced_memory()[0]
  finally:
    tracemalloc.stop()
  assert loaded < 4 * MB, f'{loaded / MB:.1f} MB held after loading'
  assert len(bundle.tape) == ANSWERS and bundle.options == {'steps': ANSWERS}
  replayed = recorded.ReplayedRunner(bundle.tape, '1 replica')
  for i in range(ANSWERS):
    answer = replayed.step(None, None)
    assert answer['note'] == f'step {i}' and answer['loss'] == np.float32(i)
    np.testing.assert_array_equal(answer['state']['w'], _answer(i)['state']['w'])
  np.testing.assert_array_equal(bundle.batches[0][0]['x'], np.ones((2, 3)))


def test_a_tape_held_in_memory_saves_as_a_recording_does(tmp_path):
  tape = recorded.Tape(shards={'1 replica': 1})
  for i in range(3):
    tape.keep(f'1 replica|{i}|step|0', _answer(i))
  golden.save(str(tmp_path / 'b.npz'), _bundle(tape, steps=3))
  bundle = golden.load(str(tmp_path / 'b.npz'))
  assert sorted(bundle.tape.keys()) == sorted(tape.keys())
  assert bundle.tape.answer('1 replica|2|step|0')['note'] == 'step 2'


@pytest.mark.parametrize('stop', [KeyboardInterrupt, ValueError, None])
def test_a_recording_stopped_or_unfinished_leaves_nothing(tmp_path, stop):
  path = tmp_path / 'b.npz'
  with pytest.raises(stop or KitError):
    with golden.recording(str(path)) as tape:
      tape.keep('1 replica|0|step|0', _answer(0))
      if stop:
        raise stop()
  assert os.listdir(tmp_path) == []


def test_damage_anywhere_in_a_bundle_is_refused_when_it_is_loaded(tmp_path):
  _record(tmp_path / 'b.npz')
  data = bytearray((tmp_path / 'b.npz').read_bytes())
  data[len(data) // 2] ^= 0xFF  # Inside one of the answers' arrays.
  (tmp_path / 'damaged.npz').write_bytes(bytes(data))
  with pytest.raises(KitError, match=r'cannot read the bundle .*damaged\.npz '
                     r'\(.*record it again'):
    golden.load(str(tmp_path / 'damaged.npz'))


def test_a_bundle_missing_an_array_is_refused_when_it_is_loaded(tmp_path):
  _record(tmp_path / 'b.npz')
  with zipfile.ZipFile(tmp_path / 'b.npz') as source, zipfile.ZipFile(
      tmp_path / 'short.npz', 'w') as short:
    names = source.namelist()
    dropped = next(n for n in names if n != '__manifest__.npy')
    for name in names:
      if name != dropped:
        short.writestr(name, source.read(name))
  with pytest.raises(KitError, match='is incomplete .*record it again'):
    golden.load(str(tmp_path / 'short.npz'))


def test_what_would_not_deflate_much_is_stored_as_it_is(tmp_path):
  """Trained floats deflate by under 10%, slowly: stored; zeros, repeats and
  small arrays deflated; all read back exactly."""
  rng = np.random.default_rng(0)
  arrays = {'weights': rng.standard_normal((1024, 768)).astype(np.float32),
            'unused_rows': np.zeros((2048, 768), np.float32),
            'mostly_unused': np.zeros((2048, 768), np.float32),
            'small': rng.standard_normal(1000).astype(np.float32),
            'strided': rng.standard_normal((768, 2048)).astype(np.float32).T}
  arrays['mostly_unused'][:40] = rng.standard_normal((40, 768))
  path = stored.save(str(tmp_path / 'b.npz'), {'m': 1}, arrays)
  with zipfile.ZipFile(path) as archive:
    kinds = {i.filename[:-4]: i.compress_type for i in archive.infolist()}
  assert kinds == {
      'weights': zipfile.ZIP_STORED, 'strided': zipfile.ZIP_STORED,
      'unused_rows': zipfile.ZIP_DEFLATED,
      'mostly_unused': zipfile.ZIP_DEFLATED, 'small': zipfile.ZIP_DEFLATED,
      stored.MANIFEST: zipfile.ZIP_DEFLATED}
  manifest, found = stored.load(path)
  assert manifest == {'m': 1} and sorted(found) == sorted(arrays)
  for key, array in arrays.items():
    np.testing.assert_array_equal(found[key], array)
