"""Turns whatever MNIST the user has into the TFRecord files both halves read.

``prepare()`` looks in the data directory for, in order: the four IDX files,
Keras' ``mnist.npz``, and ready ``train.tfrecords``/``test.tfrecords``. When the
directory is the kit's default one and holds none of them, it uses the
handwritten digits that scikit-learn ships, so that everything runs offline.
"""
import contextlib
import dataclasses
import fcntl
import json
import os

from absl import logging

from kit_core import atomic
from kit_core import stale
from mnist_common import download
from mnist_common import idx
from mnist_common import sources
from mnist_common import tfrecords
from mnist_common.errors import DataError

SOURCES = ('auto', 'idx', 'npz', 'download', 'digits', 'fake')
DEFAULT_DATA_DIR = os.path.join(
    os.environ.get('XDG_CACHE_HOME', os.path.expanduser('~/.cache')),
    'tpu_migration_kit', 'mnist')
NPZ_NAME = 'mnist.npz'
INFO_NAME = 'dataset_info.json'
SPLITS = ('train', 'test')

_DESCRIPTIONS = {
    'idx': 'real MNIST, from IDX files',
    'npz': 'real MNIST, from mnist.npz',
    'download': 'real MNIST, downloaded IDX files',
    'digits': ('scikit-learn handwritten digits (1,797 real 8x8 images resized '
               'to 28x28; the offline default, not MNIST)'),
    'fake': 'synthetic images (smoke runs only)',
    'tfrecords': 'TFRecord files found in the data directory',
}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What prepare() found or made."""
  data_dir: str
  source: str
  train_examples: int
  test_examples: int

  @property
  def description(self) -> str:
    return _DESCRIPTIONS[self.source]

  def path(self, split: str) -> str:
    return tfrecords.split_path(self.data_dir, split)


def _read_info(data_dir: str) -> dict:
  """What the kit recorded when it wrote data_dir's records; {} if nothing.

  Raises:
    DataError: the file is there but is not what the kit writes.
  """
  path = os.path.join(data_dir, INFO_NAME)
  try:
    with open(path, encoding='utf-8') as f:
      info = json.load(f)
  except FileNotFoundError:
    return {}
  except (OSError, ValueError) as e:
    raise _bad_info(path, f'it cannot be read as JSON: {e}') from e
  if not isinstance(info, dict):
    raise _bad_info(path, f'it holds a JSON {type(info).__name__}, not an '
                    'object')
  if info.get('source', 'tfrecords') not in _DESCRIPTIONS:
    raise _bad_info(path, f'it names source {info["source"]!r}, none of '
                    f'{", ".join(_DESCRIPTIONS)}')
  for key in (f'{split}_examples' for split in SPLITS):
    count = info.get(key, 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
      raise _bad_info(path, f'its {key} is {count!r}, not a count')
  return info


def _bad_info(path: str, reason: str) -> DataError:
  return DataError(f'{path} is not the record of the data the kit wrote '
                   f'({reason}); remove it, and the next run writes it again '
                   'from the files beside it')


def _write_info(data_dir: str, info: dict) -> None:
  atomic.write_json(os.path.join(data_dir, INFO_NAME), info, indent=2)


def _records_exist(data_dir: str) -> bool:
  return all(os.path.isfile(tfrecords.split_path(data_dir, s)) for s in SPLITS)


def _choose_source(data_dir: str, is_default_dir: bool) -> str:
  """The source 'auto' stands for, given what data_dir holds."""
  if idx.has_idx_files(data_dir):
    return 'idx'
  if os.path.isfile(os.path.join(data_dir, NPZ_NAME)):
    return 'npz'
  if _records_exist(data_dir):
    return _read_info(data_dir).get('source', 'tfrecords')
  if is_default_dir:
    return 'digits'
  if not os.path.isdir(data_dir):
    raise DataError(f'--data_dir {data_dir} does not exist; point it at MNIST '
                    'data, or add --data_source=digits|download|fake to '
                    'create data there')
  raise DataError(f'--data_dir {data_dir} holds no MNIST data (train.tfrecords '
                  'and test.tfrecords, the four IDX files, or mnist.npz); put '
                  'them there, or add --data_source=digits|download|fake')


def _load(source: str, data_dir: str, url: str, seed: int) -> sources.Splits:
  if source == 'download':
    download.download_idx(url, data_dir)
    return sources.load_idx(data_dir)
  if source == 'idx':
    return sources.load_idx(data_dir)
  if source == 'npz':
    return sources.load_npz(os.path.join(data_dir, NPZ_NAME))
  if source == 'digits':
    return sources.load_digits()
  return sources.load_fake(seed=seed)


def prepare(data_dir: str | None = None, source: str = 'auto',
            url: str = download.DEFAULT_URL, seed: int = 0) -> DatasetInfo:
  """Makes sure data_dir holds valid train/test TFRecords; returns what it holds.

  Args:
    data_dir: the directory; None for the kit's default, where 'auto' falls
      back to scikit-learn's digits when nothing else is there.
    source: one of SOURCES. 'auto' uses what data_dir holds.
    url: where 'download' fetches the IDX files from.
    seed: seed of the 'fake' data.

  Raises:
    DataError: the data is missing, malformed, or cannot be fetched.
  """
  if source not in SOURCES:
    raise DataError(f'unknown data source {source!r}; use one of {SOURCES}')
  is_default_dir = data_dir is None
  data_dir = os.path.abspath(os.path.expanduser(data_dir or DEFAULT_DATA_DIR))
  if os.path.exists(data_dir) and not os.path.isdir(data_dir):
    raise DataError(f'--data_dir {data_dir} is a file, not a folder; point it '
                    'at the folder that holds the data')
  if source == 'auto':
    source = _choose_source(data_dir, is_default_dir)
  if source != 'tfrecords':
    try:
      os.makedirs(data_dir, exist_ok=True)
    except OSError as e:
      raise DataError(f'cannot create --data_dir {data_dir}: {e.strerror}') from e

  with _exclusive(data_dir):
    info = _prepare_locked(data_dir, source, url, seed)
  logging.info('Data: %s in %s (%d train, %d test examples)', info.description,
               data_dir, info.train_examples, info.test_examples)
  return info


@contextlib.contextmanager
def _exclusive(data_dir: str):
  """Holds data_dir's lock: one process at a time checks, cleans and writes
  it (workers of one job may share it). Under the lock, a temporary file of
  ours can only be an interrupted run's, so it is removed. A directory that
  cannot be written is only read, without the lock."""
  try:
    lock = open(os.path.join(data_dir, '.prepare.lock'), 'a')  # pylint: disable=consider-using-with
  except OSError:
    yield
    return
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    stale.remove(data_dir, atomic.TEMP_NAME, 'temporary data files',
                 stale.FILE)
    yield


def _check_counts(data_dir: str, counts: dict, info: dict) -> None:
  """A file cut exactly between two records passes every CRC: the counts
  recorded when it was written catch it."""
  for split in SPLITS:
    expected = info.get(f'{split}_examples')
    if expected is not None and counts[split] != expected:
      raise DataError(
          f'{tfrecords.split_path(data_dir, split)} holds {counts[split]} '
          f'records but {INFO_NAME} says {expected} were written: it is '
          'truncated or was replaced; put the complete file back, or remove '
          'it to have the kit write it again from its source')


def _prepare_locked(data_dir: str, source: str, url: str,
                    seed: int) -> DatasetInfo:
  info = _read_info(data_dir)
  if source == 'tfrecords' or (info.get('source') == source and
                               _records_exist(data_dir)):
    counts = {s: tfrecords.count_records(tfrecords.split_path(data_dir, s))
              for s in SPLITS}
    _check_counts(data_dir, counts, info)
  else:
    splits = _load(source, data_dir, url, seed)
    logging.info('Writing TFRecords to %s from %s', data_dir,
                 _DESCRIPTIONS[source])
    for split, (images, labels) in splits.items():
      tfrecords.write_records(tfrecords.split_path(data_dir, split), images,
                              labels)
    counts = {split: len(labels) for split, (_, labels) in splits.items()}
    _write_info(data_dir, {'source': source, 'train_examples': counts['train'],
                           'test_examples': counts['test']})
  return DatasetInfo(data_dir, source, counts['train'], counts['test'])
