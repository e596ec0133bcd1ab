"""Input: the same TFRecords as estimator_mnist and migrate, read without
TensorFlow into numpy batches of the *global* batch.

TPUEstimator handed each input_fn ``params['batch_size']``, a core's share;
here each batch is the global one, and keras.distribution's DataParallel
splits it over the devices: the share of each is the global batch divided by
their number, as it was per core.
"""
import keras
import numpy as np

from mnist_common import prepare
from mnist_common import tfrecords


def scale_image(image: np.ndarray) -> np.ndarray:
  """uint8 pixels [0, 255] -> float32 [-0.5, 0.5], as estimator_mnist does."""
  return image.astype(np.float32) / np.float32(255.0) - np.float32(0.5)


def load(info: prepare.DatasetInfo, split: str) -> tuple[np.ndarray,
                                                         np.ndarray]:
  """One split's (scaled images, int32 labels), every record checked."""
  images, labels = tfrecords.read_split(info.path(split))
  return scale_image(images), labels


class TrainingBatches:
  """The global batch of each training step, in a seeded order that a
  resumed run takes up.

  Each pass over the split is a permutation of its own (seeded by the seed
  and the pass's number), and batches run on across passes, as
  ``shuffle().repeat().batch()`` does. The batch of step s depends only on s
  and the seed, so a run resumed at step s reads the batches the
  uninterrupted run read from there, and Keras may read ahead as it likes.
  """

  def __init__(self, images: np.ndarray, labels: np.ndarray,
               batch_size: int, seed: int):
    self.images, self.labels = images, labels
    self.batch_size, self.seed = batch_size, seed
    self._orders: dict[int, np.ndarray] = {}

  def _order(self, this_pass: int) -> np.ndarray:
    if this_pass not in self._orders:
      if len(self._orders) > 2:  # Steps go forward: keep the latest few.
        del self._orders[min(self._orders)]
      self._orders[this_pass] = np.random.default_rng(
          [self.seed, this_pass]).permutation(len(self.labels))
    return self._orders[this_pass]

  def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of the step-th batch (0 is the first)."""
    start = step * self.batch_size
    passes, offsets = np.divmod(np.arange(start, start + self.batch_size),
                                len(self.labels))
    index = np.empty(self.batch_size, np.int64)
    for this_pass in np.unique(passes):
      mask = passes == this_pass
      index[mask] = self._order(int(this_pass))[offsets[mask]]
    return self.images[index], self.labels[index]


class Steps(keras.utils.PyDataset):
  """Keras's view of the batches of steps [first, first + count)."""

  def __init__(self, batches: TrainingBatches, first: int, count: int):
    super().__init__()
    self._batches, self._first, self._count = batches, first, count

  def __len__(self) -> int:
    return self._count

  def __getitem__(self, index: int):
    return self._batches.batch(self._first + index)
