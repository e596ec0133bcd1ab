"""The example's batches against its splits: what both halves must get the
same (the per-replica share is kit_core.batching's)."""
import dataclasses

from kit_core.errors import KitError


def eval_batch_size(batch_size: int, test_examples: int, replicas: int) -> int:
  """The training batch, shrunk to fit a small test split in whole batches.

  Stays a multiple of the number of replicas, so every replica gets the same
  static shape.
  """
  size = min(batch_size, test_examples)
  return max(replicas, size - size % replicas)


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """How the test split is read after training."""
  batch: int
  steps: int


def plan(batch_size: int, eval_steps: int | None, train_examples: int,
         test_examples: int, replicas: int,
         predictions: int = 0) -> Evaluation:
  """Checks the batch and the predictions against the splits; returns the
  evaluation's batch and steps (eval_steps None: one pass over the test
  split).

  Raises:
    KitError: a batch larger than the train split, eval_steps batches more
      than the test split holds, or more predictions than it holds.
  """
  check_batch_fits_split(batch_size, train_examples)
  if predictions > test_examples:
    raise KitError(f'--num_predictions={predictions} is more than the test '
                   f'split holds ({test_examples} examples); use '
                   f'--num_predictions={test_examples} or less')
  batch = eval_batch_size(batch_size, test_examples, replicas)
  steps = test_examples // batch if eval_steps is None else eval_steps
  check_eval_steps(steps, batch, test_examples)
  return Evaluation(batch, steps)


def check_eval_steps(eval_steps: int, eval_batch: int,
                     test_examples: int) -> None:
  """Raises KitError when eval_steps batches need more than the test split."""
  if eval_steps * eval_batch > test_examples:
    raise KitError(
        f'--eval_steps={eval_steps} needs {eval_steps * eval_batch} test '
        f'examples at {eval_batch} per batch, but the test split has '
        f'{test_examples}; use --eval_steps={test_examples // eval_batch} or '
        'less, or leave it unset for one pass')


def check_batch_fits_split(batch_size: int, train_examples: int) -> None:
  """Raises KitError when one batch is larger than the train split (every
  batch would repeat examples)."""
  if batch_size > train_examples:
    raise KitError(f'--batch_size={batch_size} is larger than the train split '
                   f'({train_examples} examples): each batch would repeat '
                   f'examples; use --batch_size={train_examples} or less')
