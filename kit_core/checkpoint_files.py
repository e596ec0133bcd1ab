"""Reading a checkpoint in full, so that a truncated or corrupt one fails at
once, in one line, rather than halfway through a restore or a conversion."""
import numpy as np
import tensorflow as tf

from kit_core.errors import KitError
from kit_core.errors import one_line

# What TensorFlow raises for a checkpoint it cannot read: its OpErrors,
# OSError, and IndexError for data cut short ('Read less bytes than
# requested').
READ_ERRORS = (tf.errors.OpError, OSError, IndexError)


class UnreadableCheckpoint(KitError):
  """A checkpoint that cannot be read in full; reason is one line."""

  def __init__(self, path: str, reason: str):
    super().__init__(f'checkpoint {path} cannot be read ({reason}); point at '
                     'a complete checkpoint')
    self.reason = reason


def read_all(path: str) -> dict[str, np.ndarray]:
  """Every tensor of the checkpoint at path, by name (each CRC checked).

  Raises:
    UnreadableCheckpoint: a file is missing, truncated or corrupt.
  """
  try:
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}
  except READ_ERRORS as e:
    raise UnreadableCheckpoint(path, one_line(e)) from e
