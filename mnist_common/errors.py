"""The errors of the example's two halves: its data, its TPU, its training."""
import math

from kit_core.errors import KitError


class DataError(KitError):
  """Missing, malformed or inconsistent data files."""


class TPUNotFoundError(KitError):
  """A TPU was asked for and none could be reached."""


class DivergedError(KitError):
  """Training diverged: its loss, gradients or weights stopped being finite.

  Raised before anything is saved or exported from such weights, so the
  latest checkpoint stays the last good one.
  """

  def __init__(self, what: str, step: int, last_checkpoint: str | None):
    """what: 'the training loss became nan', 'the weights became non-finite
    (conv1/kernel)', ..."""
    kept = (f'the latest checkpoint, {last_checkpoint}, is the last good one'
            if last_checkpoint else 'no checkpoint was saved')
    super().__init__(
        f'{what} by step {step}: training stopped, {kept}, nothing was '
        'exported; lower --learning_rate or check the data')

  @classmethod
  def found(cls, non_finite: list[str], loss: float | None, step: int,
            last_checkpoint: str | None) -> 'DivergedError | None':
    """The error for what a check found, or None if all was finite.

    non_finite: the names of the weights that are not finite; loss: the
    training loss, None where it was not looked at.
    """
    what = []
    if non_finite:
      what.append(f'the weights became non-finite '
                  f'({describe_names(non_finite)})')
    if loss is not None and not math.isfinite(loss):
      what.append(f'the training loss became {loss}')
    return cls(' and '.join(what), step, last_checkpoint) if what else None


class NonFiniteExportError(KitError):
  """The weights about to be exported are not finite: nothing is written."""

  def __init__(self, names: list[str]):
    super().__init__(
        f'the weights to export are not finite ({describe_names(names)}): '
        'nothing was exported; train from a checkpoint whose weights are '
        'finite, or lower --learning_rate')


def describe_names(names: list[str], limit: int = 3) -> str:
  """'a, b, c and 4 more': a list of variable names for a one-line message."""
  shown = ', '.join(names[:limit])
  return shown + (f' and {len(names) - limit} more' if len(names) > limit
                  else '')


