"""Golden bundles written as they are recorded and read as they are asked:
memory that grows with the model, not with the steps (numpy alone)."""
import os
import re
import tracemalloc
import zipfile

import numpy as np
import pytest

from kit_core import npz_files
from kit_core.errors import KitError
from migration_tools.compare import golden
from migration_tools.pair import array_codec
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


def test_a_recording_holds_no_answer_but_its_codings_references(tmp_path):
  peak = _record(tmp_path / 'b.npz')
  # The arrays the coding refers to (the first and the last RECENT), and
  # one answer at a time with its coding, writing and compression (about 6
  # of its size): never all 40.
  bound = 1 + array_codec.RECENT + 7
  assert peak < bound * MB, f'{peak / MB:.1f} MB held while recording'
  assert ANSWERS > 2 * bound
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


def _steps_of_sgd(rng, dtype=np.float32):
  """A start, a gradient and the weights after two steps of plain SGD (the
  second on another gradient), as a recording holds them."""
  start = rng.standard_normal((256, 128)).astype(dtype)
  gradient = (rng.standard_normal((256, 128)) *
              (rng.random((256, 128)) < 0.6)).astype(dtype)
  after = (start - dtype(0.05) * gradient).astype(dtype)
  later = (after - dtype(0.002) * rng.standard_normal((256, 128))).astype(
      dtype)
  return {'start': start, 'gradient': gradient, 'after': after,
          'later': later}


@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
def test_coded_arrays_come_back_bit_for_bit(dtype):
  rng = np.random.default_rng(0)
  arrays = _steps_of_sgd(rng, dtype)
  odd = arrays['later'].copy()
  odd.ravel()[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0,
                     np.finfo(dtype).tiny / 2]  # A subnormal.
  arrays['odd'] = odd
  encoder = array_codec.Encoder()
  written, codecs = {}, {}
  for key, array in arrays.items():
    written[key], codecs[key] = encoder.encode(key, array)
  # The weights after a step of SGD: the weights before plus a multiple of
  # the gradient, to the last bit or so.
  assert codecs['after']['kind'] == 'line'
  assert codecs['after']['ref'] == 'start'
  assert codecs['after']['direction'] == 'gradient'
  assert codecs['odd']['kind'] in ('xor', 'line')
  array_codec.check(codecs, {k: (v.shape, v.dtype)
                             for k, v in written.items()})
  decoded = array_codec.Decoded(written, codecs)
  for key, array in arrays.items():
    back = decoded[key]
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back.view(f'u{array.dtype.itemsize}'),
                                  array.view(f'u{array.dtype.itemsize}'))


def test_a_step_coded_against_the_one_before_takes_a_fraction_of_it(tmp_path):
  rng = np.random.default_rng(1)
  arrays = _steps_of_sgd(rng)
  coded = stored.save(str(tmp_path / 'coded.npz'), {'m': 1}, arrays,
                      deltas=True)
  plain = stored.save(str(tmp_path / 'plain.npz'), {'m': 1}, arrays)
  with zipfile.ZipFile(coded) as a, zipfile.ZipFile(plain) as b:
    sizes = {i.filename[:-4]: i.compress_size for i in a.infolist()}
    plain_sizes = {i.filename[:-4]: i.compress_size for i in b.infolist()}
  # A step of SGD from its gradient: next to nothing; a step from another
  # gradient: the bits the update changed (measured 0.67 here, 0.44 on the
  # kit's pair, where more updates are zero).
  assert sizes['after'] < 0.05 * plain_sizes['after']
  assert sizes['later'] < 0.75 * plain_sizes['later']
  manifest, found = stored.load(coded)
  assert manifest == {'m': 1, stored.CODECS: manifest[stored.CODECS]}
  for key, array in arrays.items():
    np.testing.assert_array_equal(found[key], array)


@pytest.mark.parametrize('change, said', [
    (lambda c: c['after'].update(kind='zip'), 'unknown coding'),
    (lambda c: c['after'].update(ref='nowhere'), "refers to 'nowhere'"),
    (lambda c: c['after'].update(shape=[256, 129]), re.escape(
        'coded as float32 [256, 129] and stored as uint8')),
    (lambda c: c['after'].update(dtype='<i4'), "a coding of '<i4'"),
    (lambda c: c['after'].pop('c'), 'has no factor'),
    (lambda c: c.update(start={'kind': 'xor', 'ref': 'after',
                               'dtype': '<f4', 'shape': [128, 256]}),
     'refers to one of another shape'),
])
def test_a_forged_coding_is_refused_before_anything_is_decoded(
    tmp_path, change, said):
  rng = np.random.default_rng(2)
  path = stored.save(str(tmp_path / 'b.npz'), {'m': 1}, _steps_of_sgd(rng),
                     deltas=True)
  manifest, _ = stored.load(path)
  codecs = manifest[stored.CODECS]
  change(codecs)
  with pytest.raises(ValueError, match=said):
    array_codec.check(codecs, npz_files.headers(path, 'the bundle'))


def test_a_chain_of_steps_is_decoded_within_its_depth():
  rng = np.random.default_rng(3)
  weights = rng.standard_normal(4096).astype(np.float32)
  encoder = array_codec.Encoder()
  written, codecs = {}, {}
  chain = []
  for step in range(3 * array_codec.MAX_DEPTH):
    weights = (weights - np.float32(0.01) *
               rng.standard_normal(4096).astype(np.float32))
    chain.append(weights)
    written[f's{step}'], codecs[f's{step}'] = encoder.encode(f's{step}',
                                                             weights)
  depth = {}
  for key, codec in codecs.items():
    refs = [codec[r] for r in ('ref', 'direction') if r in codec]
    depth[key] = 1 + max([depth[r] for r in refs] or [-1])
  assert max(depth.values()) <= array_codec.MAX_DEPTH
  decoded = array_codec.Decoded(written, codecs)
  for step in reversed(range(len(chain))):  # Against the grain.
    np.testing.assert_array_equal(decoded[f's{step}'], chain[step])
