"""PyTorch: a port written with ``torch.nn`` and ``torch.optim``, checked
against the legacy model_fn from a golden bundle, with no TensorFlow and no
JAX in its process.

A PyTorch port is a ``TorchPort``: an ``array_port.ArrayPort`` whose make
returns a ``TorchModel``, which holds the port's ``module`` and
``optimizer`` (and its ``scheduler``, if any). Subclass ``TorchModel`` and
write three things, as the training code has them:

  loss(features, labels)  the mean loss of one replica's share (a tensor);
  predict(features)       the model_fn's PREDICT outputs, by name;
  evaluate(batches)       the eval metrics: 'loss' and each metric by name.

The rest of the ArrayModel contract is this file's:

- **Names and layouts.** Each weight is handed over under TF's name and in
  TF's layout (``LAYOUTS``): a ``Conv2d`` named ``conv1`` gives
  ``conv1/kernel`` as [kh, kw, in, out] (PyTorch keeps [out, in, kh, kw]),
  a ``Linear`` gives ``dense/kernel`` as [in, out], a ``BatchNorm`` its
  gamma, beta and moving statistics, an ``Embedding`` its embeddings.
- **Replicas, as DDP splits a batch.** The global batch is cut into
  ``replicas`` consecutive shares, as TPUEstimator cut it over its cores and
  as ``DistributedSampler`` with a per-rank batch does; each share's loss is
  differentiated alone and the gradients are averaged (``all_reduce``), as
  DDP's gloo or NCCL all-reduce averages them. One process does the same
  arithmetic: no process group is needed to check it.
- **Seeding and dropout.** make is called under ``torch.manual_seed``; the
  harness asks for dropout off, as the legacy steps were recorded: PyTorch
  draws its masks from its own generator.
- **TPU readiness** is ``torch.export`` of the loss and of predict on the
  shapes they run on (what PyTorch/XLA and ``torch.compile(fullgraph=True)``
  need: one graph, static shapes, no value read back to Python).
- **The converter** writes the port's ``state_dict``, its optimizer's and its
  scheduler's, and the step, in one ``torch.save`` file (``CHECKPOINT``),
  which ``torch.load`` and ``load_state_dict`` restore.

``kit_pair/mnist_torch.py`` is the kit's own; docs/MIGRATION.md, "To
PyTorch", is the guide; docs/EQUIVALENCE.md, "Add a framework", walks
through this file as the example of an adapter.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import array_port
from migration_tools.pair import optimizers
from migration_tools.pair import precision
from migration_tools.pair import runs_on
from migration_tools.pair.frameworks import arrays
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks import pytorch_precision
from migration_tools.pair.frameworks import tpu

GUIDE = 'docs/MIGRATION.md, "To PyTorch"'
# What the converter writes: torch.save({'model': ..., 'optimizer': ...,
# 'scheduler': ..., 'step': ...}).
CHECKPOINT = 'model-{step}.pt'


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
    return {e.name: e.layout.to_tf(e.tensor.detach().cpu().numpy())
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
    return {key: e.layout.to_tf(value.detach().cpu().numpy())
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
      # The schedule's rates at that step (LambdaLR's closed form).
      self.scheduler.last_epoch = self._steps
      with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # get_lr outside step() warns.
        rates = (self.scheduler._get_closed_form_lr()  # pylint: disable=protected-access
                 if hasattr(self.scheduler, '_get_closed_form_lr') else
                 self.scheduler.get_lr())
      for group, rate in zip(self.optimizer.param_groups, rates):
        group['lr'] = rate

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
    reported = {e.name: e.layout.to_tf(e.tensor.grad.cpu().numpy())
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


class PyTorch(arrays.Arrays):
  """A TorchPort: the arrays adapter's contract check, description,
  runner and converter; PyTorch's devices, seeding, precision, TPU
  readiness and checkpoint file."""

  name = 'pytorch'
  contract = 'migration_tools.pair.frameworks.pytorch.TorchPort'

  def accepts(self, port: Any) -> bool:
    return isinstance(port, TorchPort)

  def placements(self, counts: list[int], progress: progress_lib.Progress,
                 skipped: dict[str, str]) -> dict[str, Any]:
    del skipped  # One process holds any count.
    if max(counts) > 1:
      progress.line(f'{", ".join(base.label(c) for c in counts if c > 1)}: '
                    'the global batch split into consecutive shares and the '
                    'gradients averaged, as DDP does, in one process')
    return {base.label(count): count for count in counts}

  @contextlib.contextmanager
  def seeded(self, seed: int) -> Iterator[None]:
    import torch  # pylint: disable=g-import-not-at-top
    torch.manual_seed(seed)
    yield

  def dropout_unaligned(self) -> str:
    return ('PyTorch draws its dropout masks from its own generator, which '
            'cannot be aligned with TF 1\'s random ops; the steps are '
            'compared without dropout')

  def dots(self, emulate: precision.Rounding | None = None) -> precision.Dots:
    return pytorch_precision.TorchDots(emulate)

  programs_are = 'TorchPort.programs: the modules of its loss and predict'
  compiling = 'exporting the loss and predict with torch.export'

  def readiness(self, programs: dict) -> tpu.Readiness:
    """torch.export's reading of {part: (module, arguments)} (CAUSES)."""
    return tpu.read_programs(programs, export_problems, CAUSES,
                             'export with torch.export as one graph of '
                             'static shapes')

  def save_state(self, port: Any, model: Any, directory: str) -> str:
    if port.save_weights is not None:
      return port.save_weights(model, directory)
    import torch  # pylint: disable=g-import-not-at-top
    path = os.path.join(directory,
                        CHECKPOINT.format(step=model.step_count()))
    torch.save(model.state_dict(), path)
    return path

  def load_state(self, port: Any, model: Any, path: str) -> None:
    if port.load_weights is not None:
      port.load_weights(model, path)
      return
    import torch  # pylint: disable=g-import-not-at-top
    try:
      state = torch.load(path, map_location='cpu', weights_only=True)
      model.load_state_dict(state)
    except Interrupted:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise KitError(f'{path} is not a checkpoint the converter wrote for '
                     f'this port ({one_line(e)}); convert again') from e

  def ran_on(self, port: Any, runner: Any, placement: Any,
             counts: list[int], batches: list) -> dict[str, Any]:
    del port, placement, batches  # Read from the model and torch.
    return describe_torch(runner.model, counts)


def describe_torch(model: TorchModel, counts: list[int]) -> dict[str, Any]:
  """The report's 'port_ran_on' for a PyTorch port: its module's device,
  and the precision torch's settings give float32 there (TF32 for matmuls
  at float32_matmul_precision 'high', bf16 at 'medium'; cuDNN's TF32 for
  convolutions, on by default), or the module's own dtype."""
  import torch  # pylint: disable=g-import-not-at-top
  device = next(model.module.parameters()).device
  dtype = str(next(model.module.parameters()).dtype).replace('torch.', '')
  matmul = convolution = dtype
  if device.type == 'cuda' and dtype == 'float32':
    matmul = {'highest': 'float32', 'high': 'tf32',
              'medium': 'bfloat16'}[torch.get_float32_matmul_precision()]
    convolution = 'tf32' if torch.backends.cudnn.allow_tf32 else 'float32'
  kind = (torch.cuda.get_device_name(device) if device.type == 'cuda'
          else device.type)
  devices = torch.cuda.device_count() if device.type == 'cuda' else 1
  return {
      'framework': 'pytorch', 'platform': device.type, 'device_kind': kind,
      'devices': devices,
      'replicas': {base.label(c): f'{device.type} ({kind}) x1, the batch in '
                                  f'{c} share{"s" if c > 1 else ""}'
                   for c in counts},
      'versions': runs_on.versions('torch', 'numpy'),
      'precision': {'matmul': matmul, 'convolution': convolution},
      'precision_from': (
          f'the module\'s dtype ({dtype}) on the {device.type.upper()}'
          if device.type != 'cuda' else
          'torch\'s float32_matmul_precision '
          f'({torch.get_float32_matmul_precision()}), cuDNN\'s allow_tf32 '
          f'({torch.backends.cudnn.allow_tf32}) and the module\'s dtype '
          f'({dtype})'),
  }

CAUSES = {
    'data_dependent': tpu.Cause(
        'reads a value back to Python or makes a shape from the data',
        'a TPU compiles one graph of static shapes: keep values as tensors '
        '(no .item(), .tolist() or Python branches on them), and mask '
        'instead of dropping (torch.where(mask, x, 0))'),
    'graph_break': tpu.Cause(
        'breaks the graph',
        'PyTorch/XLA and torch.compile(fullgraph=True) need one graph: '
        'move the Python it runs (print, numpy, a callback) out of the '
        'forward'),
    'export': tpu.Cause(
        'is refused by torch.export',
        'make the forward traceable with static shapes '
        '(torch.export.export(module, args) shows the same error)'),
}


def _cause(error: Exception) -> str:
  """The key of CAUSES an export error falls under, by its type's name."""
  name = type(error).__name__
  text = str(error)
  if 'DataDependent' in name or 'data-dependent' in text or (
      'data dependent' in text):
    return 'data_dependent'
  if name in ('Unsupported', 'UserError') or 'graph break' in text.lower():
    return 'graph_break'
  return 'export'


def export_problems(part: str, module, args: tuple) -> list[tpu.Problem]:
  """What torch.export refuses in one program, as one Problem (see CAUSES)."""
  import torch  # pylint: disable=g-import-not-at-top
  try:
    torch.export.export(module, tuple(args), strict=True)
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    return [tpu.Problem(part, _cause(e), type(e).__name__, part,
                        one_line(e)[:300])]
  return []


base.register(PyTorch())
