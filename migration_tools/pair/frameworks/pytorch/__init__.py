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

The rest of the ArrayModel contract is this folder's (port.py):

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
  harness asks for dropout off, as the legacy steps were recorded, but in
  the dropout check: there the port is made with its dropout on, and each
  dropout call of its step takes the legacy step's mask in place of a draw
  from PyTorch's own generator (dropout.py).
- **TPU readiness** is ``torch.export`` of the loss and of predict on the
  shapes they run on (what PyTorch/XLA and ``torch.compile(fullgraph=True)``
  need: one graph, static shapes, no value read back to Python).
- **The converter** writes the port's ``state_dict``, its optimizer's and its
  scheduler's, and the step, in one ``torch.save`` file (``CHECKPOINT``),
  which ``torch.load`` and ``load_state_dict`` restore.

``kit_pair/mnist_torch.py`` is the kit's own; docs/MIGRATION.md, "To
PyTorch", is the guide; docs/EQUIVALENCE.md, "Add a framework", walks
through this folder as the example of an adapter: the adapter here, the
contract (port.py), TPU readiness (tpu.py), where it ran (ran_on.py), the
precision (precision.py); its runner is the arrays adapter's.
"""
from __future__ import annotations

import contextlib
import os
import pickle
from typing import Any, Iterator

from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import precision as precision_lib
from migration_tools.pair.frameworks import arrays
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks import tpu as tpu_lib
from migration_tools.pair.frameworks.pytorch import precision as pytorch_precision
# The contract, at the path a port imports it from (pytorch.TorchPort).
from migration_tools.pair.frameworks.pytorch.port import CHECKPOINT
from migration_tools.pair.frameworks.pytorch.port import Entry
from migration_tools.pair.frameworks.pytorch.port import entries
from migration_tools.pair.frameworks.pytorch.port import GUIDE
from migration_tools.pair.frameworks.pytorch.port import Layout
from migration_tools.pair.frameworks.pytorch.port import LAYOUTS
from migration_tools.pair.frameworks.pytorch.port import TorchModel
from migration_tools.pair.frameworks.pytorch.port import TorchPort
from migration_tools.pair.frameworks.pytorch.ran_on import describe_torch
from migration_tools.pair.frameworks.pytorch.tpu import CAUSES
from migration_tools.pair.frameworks.pytorch.tpu import export_problems

__all__ = ['CAUSES', 'CHECKPOINT', 'Entry', 'GUIDE', 'LAYOUTS', 'Layout',
           'PyTorch', 'TorchModel', 'TorchPort', 'describe_torch', 'entries',
           'export_problems']


class PyTorch(arrays.Arrays):
  """A TorchPort: the arrays adapter's contract check, description,
  runner and converter; PyTorch's devices, seeding, precision, TPU
  readiness and checkpoint file."""

  name = 'pytorch'
  contract = 'migration_tools.pair.frameworks.pytorch.TorchPort'
  title = 'PyTorch'
  seeds_with = 'torch.manual_seed(--seed)'

  def accepts(self, port: Any) -> bool:
    return isinstance(port, TorchPort)

  def placements(self, counts: list[int], progress: progress_lib.Progress,
                 skipped: dict[str, str]) -> dict[str, Any]:
    del skipped  # One process holds any count.
    if max(counts) > 1:
      progress.line(f'{", ".join(base.label(c) for c in counts if c > 1)}: '
                    'the global batch split into consecutive shares, in one '
                    'process, their gradients combined by the model\'s '
                    'all_reduce (Ran on: says how)')
    return {base.label(count): count for count in counts}

  @contextlib.contextmanager
  def seeded(self, seed: int) -> Iterator[None]:
    import torch  # pylint: disable=g-import-not-at-top
    from migration_tools.pair import port_draws  # pylint: disable=g-import-not-at-top
    from migration_tools.pair.frameworks.pytorch import dropout  # pylint: disable=g-import-not-at-top
    torch.manual_seed(seed)
    # Its steps' own draws are named (pair/port_draws.py).
    with port_draws.recording(dropout.watching, dropout.REMEDY):
      yield

  def dropout_unaligned(self) -> str:
    return ('PyTorch draws its dropout masks from its own generator, which '
            'cannot be aligned with TF 1\'s random ops; the steps are '
            'compared without dropout')

  # The dropout check hands the legacy masks to the port's dropout calls.
  takes_masks = True

  def masks_given(self, masks: list, names: list[str]):
    from migration_tools.pair.frameworks.pytorch import dropout  # pylint: disable=g-import-not-at-top
    return dropout.given(masks, names)

  def dropout_at_inference(self):
    from migration_tools.pair.frameworks.pytorch import dropout  # pylint: disable=g-import-not-at-top
    return dropout.watched()

  def dots(self, emulate: precision_lib.Rounding | None = None) -> precision_lib.Dots:
    return pytorch_precision.TorchDots(emulate)

  rates_unread = ('its scheduler gives no closed form at a step: give its '
                  'TorchModel learning_rate_at(step) (docs/MIGRATION.md)')
  programs_are = 'TorchPort.programs: the modules of its loss and predict'
  compiling = 'exporting the loss and predict with torch.export'

  def readiness(self, programs: dict) -> tpu_lib.Readiness:
    """torch.export's reading of {part: (module, arguments)} (CAUSES)."""
    return tpu_lib.read_programs(programs, export_problems, CAUSES,
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
    except pickle.UnpicklingError as e:
      # Not torch's advice (weights_only=False runs the file's code), which
      # one line would cut before its caveat.
      raise KitError(f'{path} is not a checkpoint the converter wrote for '
                     'this port (it holds objects other than tensors, which '
                     'the kit does not load: loading them would run code '
                     'from the file); convert again') from e
    except Exception as e:  # pylint: disable=broad-except
      raise KitError(f'{path} is not a checkpoint the converter wrote for '
                     f'this port ({one_line(e)}); convert again') from e

  def ran_on(self, port: Any, runner: Any, placement: Any,
             counts: list[int], batches: list) -> dict[str, Any]:
    del port, placement, batches  # Read from the model and torch.
    return describe_torch(runner.model, counts)


base.register(PyTorch())
