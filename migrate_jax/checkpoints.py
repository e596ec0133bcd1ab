"""Checkpoints as named arrays: every variable of the model (dropout's random
state among them) and of the optimizer (its step among them), by path, in
one ``ckpt-<step>.npz`` per save.

A framework-neutral form on purpose: numpy reads it, and its names are
Keras's variable paths (``conv1/kernel``, ``sgd/iteration``), the ones
migration-compare pairs with the Estimator checkpoint's. Keras's own
``.weights.h5`` leaves the random state out, and a resumed run would then
draw other dropout masks than the whole run drew.
"""
import os
import re
import stat

from absl import logging
import numpy as np

from kit_core import atomic
from kit_core import npz_files
from kit_core.errors import KitError

_NAME = re.compile(r'^ckpt-(\d+)\.npz$')


def state(model, optimizer) -> dict[str, np.ndarray]:
  """{'model/<path>' or 'optimizer/<path>': value} of every variable."""
  arrays = {f'model/{v.path}': np.asarray(v.value) for v in model.variables}
  arrays.update({f'optimizer/{v.path}': np.asarray(v.value)
                 for v in optimizer.variables})
  return arrays


def step_of(optimizer) -> int:
  return int(np.asarray(optimizer.iterations.value))


def find(model_dir: str) -> list[str]:
  """The checkpoints in model_dir, oldest first."""
  try:
    names = os.listdir(model_dir)
  except FileNotFoundError:
    return []
  found = sorted((int(m.group(1)), name) for name in names
                 if (m := _NAME.match(name)))
  return [os.path.join(model_dir, name) for _, name in found]


def check_regular(model_dir: str) -> None:
  """Refuses a checkpoint name that is not a regular file (a FIFO named
  ckpt-9.npz would block the restore for ever, holding the lock)."""
  for path in find(model_dir):
    if not stat.S_ISREG(os.lstat(path).st_mode):
      raise KitError(f'{path} is not a regular file (a FIFO, a link, a '
                     'folder): not a checkpoint this kit wrote; remove it, or '
                     'use another --model_dir')


def save(model_dir: str, step: int, arrays: dict[str, np.ndarray],
         keep: int) -> str:
  """Writes ckpt-<step>.npz atomically; keeps the newest `keep`."""
  path = os.path.join(model_dir, f'ckpt-{step}.npz')
  with atomic.temporary_path(path) as tmp:
    try:
      with open(tmp, 'wb') as f:
        np.savez(f, **arrays)
    except OSError as e:
      # A write to an open file names no file: the line must name this one.
      raise OSError(e.errno, e.strerror, path) from e
  for old in find(model_dir)[:-keep]:
    os.remove(old)
  return path


def restore(model_dir: str, model, optimizer) -> str | None:
  """Loads model_dir's newest checkpoint into the variables; returns it, or
  None when there is none.

  Raises:
    KitError: it cannot be read, or its variables are not this model's and
      optimizer's; nothing is changed.
  """
  check_regular(model_dir)
  found = find(model_dir)
  if not found:
    return None
  path = found[-1]
  variables = {f'model/{v.path}': v for v in model.variables}
  variables.update({f'optimizer/{v.path}': v for v in optimizer.variables})
  instead = ('remove it to resume from the one before, or use another '
             '--model_dir')
  try:
    # Each size the file declares is checked before anything is read, and
    # only this model's arrays are (kit_core/npz_files.py).
    declared = npz_files.headers(path, 'checkpoint')
    _check_matches(path, {k: v[0] for k, v in declared.items()}, variables)
    arrays = npz_files.load(path, 'checkpoint', sorted(variables))
  except KitError as e:
    raise KitError(f'{e}; {instead}') from e
  _check_values(path, arrays, variables, instead)
  for name, variable in variables.items():
    variable.assign(arrays[name])
  logging.info('Restored %s', path)
  return path


def _check_values(path: str, arrays: dict, variables: dict,
                  instead: str) -> None:
  """Refuses arrays of another dtype than their variables' (a float64
  kernel, an int8 one), and weights that are not finite: a NaN checkpoint
  would be restored and trained on."""
  for name, variable in variables.items():
    dtype = np.dtype(variable.dtype)
    if arrays[name].dtype != dtype:
      raise KitError(f'checkpoint {path} holds {name} as {arrays[name].dtype}'
                     f', the model\'s is {dtype}: it is not this kit\'s; '
                     f'{instead}')
    if dtype.kind == 'f' and not np.all(np.isfinite(arrays[name])):
      raise KitError(f'checkpoint {path} holds non-finite values (NaN or '
                     f'Inf) in {name}: training diverged before it was '
                     f'saved, or it is damaged; {instead}')


def _check_matches(path: str, shapes: dict, variables: dict) -> None:
  """shapes: {name: shape} of the checkpoint's arrays."""
  missing = sorted(set(variables) - set(shapes))
  extra = sorted(set(shapes) - set(variables))
  wrong = [f'{name} {tuple(shapes[name])} (the model\'s is '
           f'{tuple(v.shape)})' for name, v in variables.items()
           if name in shapes and tuple(shapes[name]) != tuple(v.shape)]
  if missing or extra or wrong:
    what = (f'lacks {", ".join(missing[:3])}' if missing else
            f'has {", ".join(extra[:3])} that the model lacks' if extra else
            f'has {", ".join(wrong[:3])}')
    raise KitError(f'checkpoint {path} is not this model\'s: it {what}; use '
                   'another --model_dir, or the flags it was trained with')
