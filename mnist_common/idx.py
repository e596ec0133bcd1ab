"""Reader for the IDX files MNIST is distributed in (``train-images-idx3-ubyte.gz``).

The format is a big-endian header (magic number, then one uint32 per
dimension) followed by the raw data. The magic number's third byte names the
element type, its fourth the number of dimensions: MNIST's are uint8, 2051
for 3-D image files and 2049 for 1-D label files. Files of another element
type are read as that type, for sources.py to check, never reinterpreted as
bytes.
"""
import gzip
import os
import struct

import numpy as np

from mnist_common.errors import DataError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
# The element types of the IDX format, by the magic number's third byte.
DTYPES = {0x08: np.dtype('>u1'), 0x09: np.dtype('>i1'), 0x0B: np.dtype('>i2'),
          0x0C: np.dtype('>i4'), 0x0D: np.dtype('>f4'), 0x0E: np.dtype('>f8')}

# The four files of the standard distribution, by split.
FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}


def _read_bytes(path: str) -> bytes:
  try:
    if path.endswith('.gz'):
      with gzip.open(path, 'rb') as f:
        return f.read()
    with open(path, 'rb') as f:
      return f.read()
  except (OSError, EOFError) as e:
    raise DataError(f'cannot read IDX file {path}: {e}; '
                    're-download or replace it') from e


def _read_idx(path: str, magic: int) -> np.ndarray:
  data = _read_bytes(path)
  if len(data) < 4:
    raise DataError(f'{path} is too short to be an IDX file ({len(data)} bytes)')
  (found,) = struct.unpack('>I', data[:4])
  ndim = magic & 0xFF
  dtype = DTYPES.get(found >> 8 & 0xFF)
  if found >> 16 or found & 0xFF != ndim or dtype is None:
    kind = 'images' if magic == IMAGES_MAGIC else 'labels'
    raise DataError(f'{path} has magic number {found}, expected {magic} for an '
                    f'IDX {kind} file; is it the right file, and not corrupt?')
  header = 4 + 4 * ndim
  if len(data) < header:
    raise DataError(f'{path} is truncated inside its header')
  shape = struct.unpack(f'>{ndim}I', data[4:header])
  expected = header + int(np.prod(shape)) * dtype.itemsize
  if len(data) != expected:
    raise DataError(f'{path} holds {len(data)} bytes but its header '
                    f'{list(shape)} of {dtype.name} needs {expected}; the file '
                    'is truncated or corrupt, re-download it')
  return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def read_images(path: str) -> np.ndarray:
  """Returns images of shape [n, rows, cols] from an IDX images file, of the
  element type the file holds (uint8 for MNIST)."""
  return _read_idx(path, IMAGES_MAGIC)


def read_labels(path: str) -> np.ndarray:
  """Returns labels of shape [n] from an IDX labels file, of the element
  type the file holds (uint8 for MNIST)."""
  return _read_idx(path, LABELS_MAGIC)


def find_file(directory: str, stem: str) -> str | None:
  """Returns the path of ``stem`` or ``stem.gz`` in directory, if present."""
  for name in (stem + '.gz', stem):
    path = os.path.join(directory, name)
    if os.path.isfile(path):
      return path
  return None


def has_idx_files(directory: str) -> bool:
  return all(find_file(directory, stem) for pair in FILES.values()
             for stem in pair)


def load_split(directory: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  """Reads one split ('train' or 'test') from the IDX files in directory."""
  images_stem, labels_stem = FILES[split]
  paths = [find_file(directory, images_stem), find_file(directory, labels_stem)]
  if None in paths:
    raise DataError(f'{directory} lacks {images_stem}[.gz] or {labels_stem}[.gz]')
  images, labels = read_images(paths[0]), read_labels(paths[1])
  if len(images) != len(labels):
    raise DataError(f'{paths[0]} has {len(images)} images but {paths[1]} has '
                    f'{len(labels)} labels; the pair does not belong together')
  return images, labels


def write_idx(path: str, array: np.ndarray, dtype=np.uint8) -> None:
  """Writes an array as an IDX file of element type dtype (uint8 unless
  said; gzip if path ends in .gz).

  Used by tests and by users who want to hand-make a small dataset.
  """
  array = np.asarray(array, dtype=np.dtype(dtype).newbyteorder('>'))
  code = next(code for code, kind in DTYPES.items() if kind == array.dtype)
  magic = code << 8 | array.ndim
  payload = struct.pack(f'>I{array.ndim}I', magic, *array.shape) + array.tobytes()
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'wb') as f:
    f.write(payload)
