"""Where MNIST-shaped arrays come from: IDX files, Keras' mnist.npz, scikit-learn's
handwritten digits (the offline default), or synthetic images for smoke runs.

Every loader returns ``{'train': (images, labels), 'test': (images, labels)}``
with uint8 images of shape [n, 28, 28] and integer labels in 0..9. A user's
arrays are taken as what they mean, or refused: never cast into something
else (a float image in [0, 1] cast to uint8 is black).
"""
from absl import logging
import numpy as np

from mnist_common import idx
from mnist_common.errors import DataError

IMAGE_SIZE = 28
NUM_CLASSES = 10

Splits = dict[str, tuple[np.ndarray, np.ndarray]]


def check_arrays(images: np.ndarray, labels: np.ndarray, origin: str) -> None:
  """Raises DataError unless images/labels look like one MNIST split."""
  if images.ndim != 3 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
    raise DataError(f'{origin}: images have shape {list(images.shape)}, '
                    f'expected [n, {IMAGE_SIZE}, {IMAGE_SIZE}]')
  if labels.shape != (images.shape[0],):
    raise DataError(f'{origin}: {images.shape[0]} images but labels of shape '
                    f'{list(labels.shape)}')
  if len(labels) == 0:
    raise DataError(f'{origin}: the split is empty')


def as_pixels(images: np.ndarray, origin: str) -> np.ndarray:
  """uint8 pixels 0-255 from images of any numeric dtype, as they were meant.

  Integers must lie in 0-255. Floats in [0, 1] (a normalised dump) are
  scaled by 255, floats in 0-255 rounded, each with a line saying so.

  Raises:
    DataError: a dtype that is no pixel, a value outside those ranges.
  """
  kind = images.dtype.kind
  if kind not in 'uif':
    raise DataError(f'{origin}: images are of dtype {images.dtype}; expected '
                    'uint8 pixels 0-255 (or floats in [0, 1])')
  if kind == 'f' and not np.all(np.isfinite(images)):
    raise DataError(f'{origin}: images hold NaN or infinite values; expected '
                    'uint8 pixels 0-255 (or floats in [0, 1])')
  low, high = images.min(), images.max()
  if low < 0 or high > 255:
    raise DataError(f'{origin}: images of dtype {images.dtype} hold values '
                    f'from {low:g} to {high:g}; expected pixels 0-255 (or '
                    'floats in [0, 1]): convert them, the kit does not guess '
                    'a scale')
  if kind != 'f':
    return images.astype(np.uint8)
  if high <= 1:
    logging.warning('%s: images are %s in [0, 1]: scaled by 255 to pixels '
                    '0-255', origin, images.dtype)
    images = images * 255.0
  elif np.any(images != np.rint(images)):
    logging.warning('%s: images are %s in 0-255 with fractions: rounded to '
                    'whole pixels', origin, images.dtype)
  return np.rint(images).astype(np.uint8)


def as_labels(labels: np.ndarray, origin: str) -> np.ndarray:
  """int64 labels 0-9 from integer labels, or floats that hold integers.

  Raises:
    DataError: labels that are not numbers, not whole, or outside 0-9.
  """
  kind = labels.dtype.kind
  if kind not in 'uif':
    raise DataError(f'{origin}: labels are of dtype {labels.dtype}; expected '
                    'integers 0-9: convert them to integers')
  if kind == 'f':
    whole = np.isfinite(labels) & (labels == np.round(labels))
    if not np.all(whole):
      first = int(np.flatnonzero(~whole)[0])
      raise DataError(f'{origin}: label {labels[first]:g} at index {first} '
                      f'is not a whole number ({np.sum(~whole)} such labels); '
                      'expected integers 0-9')
  bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
  if bad.size:
    raise DataError(f'{origin}: label {labels[bad[0]]:g} at index '
                    f'{int(bad[0])} is outside 0-9 ({bad.size} such labels)')
  return labels.astype(np.int64)


def _checked(splits: Splits, origin: str) -> Splits:
  checked = {}
  for name, (images, labels) in splits.items():
    where = f'{origin} [{name}]'
    check_arrays(images, labels, where)
    checked[name] = (as_pixels(images, where), as_labels(labels, where))
  return checked


def load_idx(directory: str) -> Splits:
  """The four standard IDX files (optionally gzipped) in directory."""
  return _checked({s: idx.load_split(directory, s) for s in idx.FILES},
                  f'IDX files in {directory}')


def load_npz(path: str) -> Splits:
  """Keras' mnist.npz: arrays x_train, y_train, x_test, y_test."""
  names = ('x_train', 'y_train', 'x_test', 'y_test')
  try:
    with np.load(path, allow_pickle=False) as data:
      missing = [name for name in names if name not in data.files]
      if missing:
        raise DataError(f'{path} lacks array {", ".join(missing)}; expected '
                        f'{", ".join(names)} as in Keras\' mnist.npz')
      splits = {'train': (data['x_train'], data['y_train']),
                'test': (data['x_test'], data['y_test'])}
  except (OSError, ValueError) as e:
    raise DataError(f'cannot read {path} as an .npz file: {e}') from e
  return _checked(splits, path)


# scikit-learn's digits are 8x8 with values 0..16. MNIST centres each digit in a
# 20x20 box inside a 28x28 frame, so the digits are resized to 20x20 and padded.
DIGITS_BOX = 20
DIGITS_TEST_SIZE = 497  # 1797 = 1300 train + 497 test, a 72/28 split.


def load_digits() -> Splits:
  """scikit-learn's 1,797 real handwritten digits, resized to MNIST's 28x28.

  Made without TensorFlow, byte for byte what ``tf.image.resize(...,
  method='bicubic')`` made of them (resize_bicubic), so that every profile,
  the jax one included, prepares the same files.
  """
  import sklearn.datasets  # Heavy, and only this path needs it.

  digits = sklearn.datasets.load_digits()
  small = digits.images.astype(np.float32) * np.float32(255.0 / 16.0)
  big = resize_bicubic(small, DIGITS_BOX, DIGITS_BOX)
  big = np.clip(np.rint(big), 0, 255).astype(np.uint8)
  pad = (IMAGE_SIZE - DIGITS_BOX) // 2
  images = np.pad(big, ((0, 0), (pad, pad), (pad, pad)))
  labels = digits.target.astype(np.int64)
  # The file is ordered by writer; a fixed permutation mixes writers into both
  # splits. RandomState(0) is stable across numpy versions.
  order = np.random.RandomState(0).permutation(len(labels))
  images, labels = images[order], labels[order]
  n_train = len(labels) - DIGITS_TEST_SIZE
  return _checked({'train': (images[:n_train], labels[:n_train]),
                   'test': (images[n_train:], labels[n_train:])},
                  'scikit-learn digits')


# TensorFlow's bicubic resize (tensorflow/core/kernels/image/
# resize_bicubic_op.cc, half-pixel centres, as tf.image.resize calls it),
# step for step in float32: the kernel's weights come from a table of 1,024
# steps of Keys' cubic (a = -0.5), weights outside the image are zeroed and
# the rest renormalised, and each output sums four products in order, along
# the rows first, then along the columns.
_TABLE_STEPS = 1024
_KEYS_A = -0.5


def _cubic_table() -> tuple[np.ndarray, np.ndarray]:
  """The kernel at distances t (near) and t + 1 (far), t = i / 1024: computed
  in double from a float t, as the kernel's table is, then rounded."""
  a = _KEYS_A
  t = (np.arange(_TABLE_STEPS + 1) / _TABLE_STEPS).astype(np.float32)
  x = t.astype(np.float64)
  near = ((a + 2) * x - (a + 3)) * x * x + 1
  x = (t + np.float32(1.0)).astype(np.float64)
  far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
  return near.astype(np.float32), far.astype(np.float32)


def _bicubic_taps(in_size: int, out_size: int
                  ) -> tuple[np.ndarray, np.ndarray]:
  """For each output position, the four input indices [out, 4] and their
  float32 weights [out, 4]."""
  near, far = _cubic_table()
  f32 = np.float32
  scale = f32(in_size) / f32(out_size)
  where = (np.arange(out_size, dtype=f32) + f32(0.5)) * scale - f32(0.5)
  base = np.floor(where).astype(np.int64)
  offset = np.rint((where - base.astype(f32)) * f32(_TABLE_STEPS)).astype(
      np.int64)  # lrintf: to nearest, ties to even, as np.rint.
  wanted = base[:, None] + np.arange(-1, 3)
  weights = np.stack([far[offset], near[offset],
                      near[_TABLE_STEPS - offset],
                      far[_TABLE_STEPS - offset]], axis=1)
  inside = (wanted >= 0) & (wanted < in_size)
  weights = np.where(inside, weights, f32(0.0))
  total = ((weights[:, 0] + weights[:, 1]) + weights[:, 2]) + weights[:, 3]
  weights = weights * (f32(1.0) / total)[:, None]
  return np.clip(wanted, 0, in_size - 1), weights


def _taps_sum(values: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
  """v0 * w0 + v1 * w1 + v2 * w2 + v3 * w3, each step rounded to float32."""
  total = values[0] * weights[0]
  for value, weight in zip(values[1:], weights[1:]):
    total = total + value * weight
  return total


def resize_bicubic(images: np.ndarray, height: int, width: int
                   ) -> np.ndarray:
  """float32 images [n, h, w] resized to [n, height, width] as
  ``tf.image.resize(images[..., None], [height, width], 'bicubic')`` does
  on a CPU, bit for bit."""
  images = np.asarray(images, np.float32)
  rows, row_weights = _bicubic_taps(images.shape[1], height)
  cols, col_weights = _bicubic_taps(images.shape[2], width)
  # Along the rows: [n, height, w]; each output row from four input rows.
  by_rows = _taps_sum([images[:, rows[:, k], :] for k in range(4)],
                      [row_weights[:, k][None, :, None] for k in range(4)])
  return _taps_sum([by_rows[:, :, cols[:, k]] for k in range(4)],
                   [col_weights[:, k][None, None, :] for k in range(4)])


def load_fake(num_train: int = 2048, num_test: int = 512,
              seed: int = 0) -> Splits:
  """Synthetic, learnable images: noise plus a bright bar whose row is the label.

  For smoke runs only; accuracy on them says nothing about the model.
  """
  rng = np.random.RandomState(seed)

  def make(n):
    labels = rng.randint(0, NUM_CLASSES, size=n).astype(np.int64)
    images = rng.randint(0, 64, size=(n, IMAGE_SIZE, IMAGE_SIZE))
    rows = 2 + 2 * labels
    images[np.arange(n), rows, 4:24] = 255
    return images.astype(np.uint8), labels

  return _checked({'train': make(num_train), 'test': make(num_test)},
                  'fake data')
