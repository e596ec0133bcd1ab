"""The divergence guard: a run whose loss or weights stop being finite stops
before anything is saved or exported from them, as migrate's does
(migrate/divergence.py says why the weights are watched, not only the loss).
"""
import numpy as np

from mnist_common.errors import DivergedError
from mnist_common.errors import NonFiniteExportError


def non_finite(arrays: dict[str, np.ndarray]) -> list[str]:
  """The names of the floating-point arrays that hold a NaN or infinity."""
  return [name for name, value in arrays.items()
          if np.issubdtype(value.dtype, np.floating) and
          not np.isfinite(value).all()]


def check(arrays: dict[str, np.ndarray], loss: float | None, step: int,
          last_checkpoint: str | None) -> None:
  """After an execution of steps, and before every save.

  Raises:
    DivergedError: the weights or the loss are not finite.
  """
  error = DivergedError.found(non_finite(arrays), loss, step,
                              last_checkpoint)
  if error:
    raise error


def check_export(arrays: dict[str, np.ndarray]) -> None:
  """Raises NonFiniteExportError before an export of non-finite weights."""
  names = non_finite(arrays)
  if names:
    raise NonFiniteExportError(names)
