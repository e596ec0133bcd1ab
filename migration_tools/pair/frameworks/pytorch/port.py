"""The PyTorch port's contract: a ``TorchPort`` (an ``ArrayPort`` whose make
returns a ``TorchModel``), the names and layouts its weights are handed over
in (``LAYOUTS``), the batch cut into shares as DDP cuts it, and the
checkpoint file the converter writes (``CHECKPOINT``). The package's
docstring (pytorch/__init__.py) tells the whole contract; a port imports it
as ``from migration_tools.pair.frameworks import pytorch``."""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, Callable

import numpy as np

from kit_core.errors import KitError
from migration_tools.pair import optimizers
from migration_tools.pair.frameworks.arrays import port as array_port

GUIDE = 'docs/MIGRATION.md, "To PyTorch"'
# What the converter writes: torch.save({'model': ..., 'optimizer': ...,
# 'scheduler': ..., 'step': ...}).
CHECKPOINT = 'model-{step}.pt'


def _array(tensor) -> np.ndarray:
  """A tensor's values as numpy holds them: bfloat16, which numpy has no
  type for, as float32 (exactly: every bfloat16 is a float32)."""
  import torch  # pylint: disable=g-import-not-at-top
  tensor = tensor.detach().cpu()
  if tensor.dtype == torch.bfloat16:
    tensor = tensor.float()
  return tensor.numpy()


def _to_tf_kernel(weight: np.ndarray) -> np.ndarray:
  """[out, in, *window] -> [*window, in, out]; [out, in] -> [in, out]."""
  return np.transpose(weight, (*range(2, weight.ndim), 1, 0))


def _to_torch_kernel(kernel: np.ndarray) -> np.ndarray:
  rank = kernel.ndim
  return np.transpose(kernel, (rank - 1, rank - 2, *range(rank - 2)))


def _same(value: np.ndarray) -> np.ndarray:
  return value


@dataclasses.dataclass(frozen=True)
class Layout:
  """One PyTorch tensor as TF names and lays it out: TF's last name part,
  and the two ways between the layouts."""
  name: str
  to_tf: Callable[[np.ndarray], np.ndarray] = _same
  to_torch: Callable[[np.ndarray], np.ndarray] = _same


_KERNEL = Layout('kernel', _to_tf_kernel, _to_torch_kernel)
_NORM = {'weight': Layout('gamma'), 'bias': Layout('beta')}
_BATCH_NORM = {**_NORM, 'running_mean': Layout('moving_mean'),
               'running_var': Layout('moving_variance')}
# {module class name: {its tensor's name: Layout}}. A tensor of another
# module keeps its own name; a buffer named here by None is no weight
# (BatchNorm's num_batches_tracked: TF 1 has no counterpart).
LAYOUTS: dict[str, dict[str, Layout | None]] = {
    'Linear': {'weight': _KERNEL, 'bias': Layout('bias')},
    **{f'Conv{n}d': {'weight': _KERNEL, 'bias': Layout('bias')}
       for n in (1, 2, 3)},
    **{f'BatchNorm{n}d': {**_BATCH_NORM, 'num_batches_tracked': None}
       for n in (1, 2, 3)},
    'LayerNorm': _NORM,
    'Embedding': {'weight': Layout('embeddings')},
}


@dataclasses.dataclass(frozen=True)
class Entry:
  """A tensor of the module under its TF name."""
  name: str
  tensor: Any  # torch.Tensor: a parameter or a buffer.
  layout: Layout
  trainable: bool


def entries(module) -> list[Entry]:
  """The module's parameters and buffers under TF's names (LAYOUTS), in
  registration order: 'conv1.weight' -> 'conv1/kernel'."""
  found = []
  for path, sub in module.named_modules():
    table = LAYOUTS.get(type(sub).__name__, {})
    owned = [(n, t, True) for n, t in sub.named_parameters(recurse=False)]
    owned += [(n, t, False) for n, t in sub.named_buffers(recurse=False)]
    for name, tensor, is_parameter in owned:
      if tensor is None or (name in table and table[name] is None):
        continue
      layout = table.get(name) or Layout(name)
      scope = path.replace('.', '/')
      found.append(Entry(f'{scope}/{layout.name}' if scope else layout.name,
                         tensor, layout,
                         is_parameter and tensor.requires_grad))
  return found


class TorchModel:
  """An ArrayModel over a torch.nn.Module and a torch.optim optimizer (see
  module). A subclass sets module, optimizer, scheduler (or None) and
  replicas in its __init__, and writes loss, predict and evaluate."""

  module: Any
  optimizer: Any
  scheduler: Any = None
  replicas: int = 1
  # Where the batches go: the module's device ('cuda' on a GPU).
  device: str = 'cpu'

  # What the port writes ------------------------------------------------

  def loss(self, features, labels):
    """The mean loss of one replica's share of the batch (a scalar)."""
    raise NotImplementedError

  def predict(self, features) -> dict[str, np.ndarray]:
    """The model_fn's PREDICT outputs, by name."""
    raise NotImplementedError

  def evaluate(self, batches: list) -> dict[str, float]:
    """'loss' (the mean per-example loss) and each metric, by name."""
    raise NotImplementedError

  def all_reduce(self, gradients: list) -> Any:
    """One tensor's gradients from each replica, reduced as DDP reduces
    them: their mean."""
    return sum(gradients) / len(gradients)

  # The arrays ------------------------------------------------------------

  def _entries(self) -> list[Entry]:
    if not hasattr(self, '_entry_list'):
      self._entry_list = entries(self.module)
    return self._entry_list

  def variables(self) -> dict[str, np.ndarray]:
    return {e.name: e.layout.to_tf(_array(e.tensor))
            for e in self._entries()}

  def trainable(self) -> list[str]:
    return [e.name for e in self._entries() if e.trainable]

  def set_variables(self, values: dict[str, np.ndarray]) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      for e in self._entries():
        if e.name in values:
          e.tensor.copy_(torch.as_tensor(e.layout.to_torch(
              np.asarray(values[e.name])), device=e.tensor.device))

  def _slot_tensors(self) -> dict[tuple[str, str], tuple[Entry, Any]]:
    """{(variable, token): (its entry, the optimizer's tensor)}: each
    per-parameter state of the parameter's shape (torch's names:
    'momentum_buffer', 'exp_avg', 'exp_avg_sq')."""
    found = {}
    for e in self._entries():
      for token, value in self.optimizer.state.get(e.tensor, {}).items():
        if hasattr(value, 'shape') and value.shape == e.tensor.shape:
          found[(e.name, token)] = (e, value)
    return found

  def slots(self) -> dict[tuple[str, str], np.ndarray]:
    return {key: e.layout.to_tf(_array(value))
            for key, (e, value) in self._slot_tensors().items()}

  def set_slots(self, values: dict[tuple[str, str], np.ndarray]) -> None:
    import torch  # pylint: disable=g-import-not-at-top
    with torch.no_grad():
      for key, (e, value) in self._slot_tensors().items():
        if key in values:
          value.copy_(torch.as_tensor(e.layout.to_torch(
              np.asarray(values[key])), device=value.device))

  def step_count(self) -> int:
    return getattr(self, '_steps', 0)

  def set_step_count(self, step: int) -> None:
    self._steps = int(step)
    if self.scheduler is not None:
      self.scheduler.last_epoch = self._steps
      for group, rate in zip(self.optimizer.param_groups,
                             self._scheduled_rates()):
        group['lr'] = rate

  def _scheduled_rates(self) -> list[float]:
    """The scheduler's rates at its last_epoch (LambdaLR's closed form)."""
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # get_lr outside step() warns.
      return (self.scheduler._get_closed_form_lr()  # pylint: disable=protected-access
              if hasattr(self.scheduler, '_get_closed_form_lr') else
              self.scheduler.get_lr())

  def learning_rate_at(self, step: int) -> float | None:
    """The rate the optimizer applies at this step: its scheduler's at
    that step (the scheduler left as it was), else its constant rate; None
    for a scheduler whose rate at a step follows from its past (chained:
    MultiplicativeLR, SequentialLR, ReduceLROnPlateau ...)."""
    if self.scheduler is None:
      return float(self.optimizer.param_groups[0]['lr'])
    import torch  # pylint: disable=g-import-not-at-top
    closed = (torch.optim.lr_scheduler.LambdaLR,
              torch.optim.lr_scheduler.OneCycleLR)
    if not (isinstance(self.scheduler, closed) or
            hasattr(self.scheduler, '_get_closed_form_lr')):
      return None
    saved = self.scheduler.last_epoch
    try:
      self.scheduler.last_epoch = int(step)
      return float(self._scheduled_rates()[0])
    finally:
      self.scheduler.last_epoch = saved

  def describe_optimizer(self) -> optimizers.Description:
    """Plain SGD as the tables name it; another optimizer by its class
    and hyper-parameters (its slots are compared by what they do)."""
    defaults = self.optimizer.defaults
    kind = type(self.optimizer).__name__
    if kind == 'SGD' and not defaults.get('momentum') and not defaults.get(
        'weight_decay'):
      return optimizers.Description(optimizers.SGD, {})
    hyper = {k: v for k, v in defaults.items()
             if isinstance(v, (int, float, bool)) and k != 'lr'}
    return optimizers.Description(f'torch.optim.{kind}', hyper)

  def learning_rate(self) -> float:
    return getattr(self, '_rate', 0.0)

  # The step ----------------------------------------------------------------

  def tensor(self, array):
    """An array of the batch as a tensor (a dict of them, for a dict)."""
    import torch  # pylint: disable=g-import-not-at-top
    if isinstance(array, dict):
      return {k: self.tensor(v) for k, v in array.items()}
    return torch.as_tensor(np.asarray(array), device=self.device)

  def shares(self, array) -> list:
    """The global batch cut into `replicas` consecutive shares."""
    if isinstance(array, dict):
      cut = {k: self.shares(v) for k, v in array.items()}
      return [{k: cut[k][i] for k in cut} for i in range(self.replicas)]
    return np.split(np.asarray(array), self.replicas)

  def train_step(self, features, labels) -> dict[str, Any]:
    if labels is None:
      raise KitError(
          f'{_where(type(self))}: the input_fn gives its labels inside the '
          'features (labels is None), and TorchModel.train_step cuts the '
          'labels into the replicas\' shares: override train_step in '
          f'{type(self).__name__} to take them from the features')
    self.module.train()
    parameters = [e.tensor for e in self._entries() if e.trainable]
    losses, gradients = [], [[] for _ in parameters]
    for share, share_labels in zip(self.shares(features),
                                   self.shares(labels)):
      self.optimizer.zero_grad(set_to_none=True)
      loss = self.loss(self.tensor(share), self.tensor(share_labels))
      loss.backward()
      losses.append(float(loss.detach()))
      for found, parameter in zip(gradients, parameters):
        found.append(parameter.grad.detach().clone())
    for parameter, found in zip(parameters, gradients):
      parameter.grad = self.all_reduce(found)
    self._rate = float(self.optimizer.param_groups[0]['lr'])
    reported = {e.name: e.layout.to_tf(_array(e.tensor.grad))
                for e in self._entries() if e.trainable}
    self.optimizer.step()
    if self.scheduler is not None:
      self.scheduler.step()
    self._steps = self.step_count() + 1
    return {'loss': float(np.mean(losses)), 'gradients': reported,
            'examples': len(np.asarray(labels))}

  # The converter -------------------------------------------------------

  def state_dict(self) -> dict[str, Any]:
    """What the converter writes: the module's, optimizer's and
    scheduler's state_dict, and the step."""
    state = {'model': self.module.state_dict(),
             'optimizer': self.optimizer.state_dict(),
             'step': self.step_count()}
    if self.scheduler is not None:
      state['scheduler'] = self.scheduler.state_dict()
    return state

  def load_state_dict(self, state: dict[str, Any]) -> None:
    self.module.load_state_dict(state['model'])
    self.optimizer.load_state_dict(state['optimizer'])
    if self.scheduler is not None and 'scheduler' in state:
      self.scheduler.load_state_dict(state['scheduler'])
    self.set_step_count(state['step'])


@dataclasses.dataclass(frozen=True)
class TorchPort(array_port.ArrayPort):
  """A port on PyTorch: make(params, replicas, dropout) -> a TorchModel.

  programs: optional (model, features, labels) -> {part: (torch.nn.Module,
    arguments)}: the modules whose forward computes the loss and predict,
    for tpu_ready (torch.export); None: tpu_ready is SKIP. The other fields
  are ArrayPort's; save_weights and load_weights, if given, replace the
  converter's state_dict file.
  """
  framework: str = 'PyTorch'


def _where(cls: type) -> str:
  """'file.py:12 (ClassName)': where a port's class is written."""
  try:
    return (f'{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]} '
            f'({cls.__name__})')
  except (OSError, TypeError):
    return cls.__name__
