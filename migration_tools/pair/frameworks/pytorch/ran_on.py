"""Where a PyTorch port ran: the report's 'port_ran_on' (runs_on.line writes
it as one line), read from its module's device and torch's settings."""
from __future__ import annotations

from typing import Any

from migration_tools.pair import runs_on
from migration_tools.pair.frameworks import base
from migration_tools.pair.frameworks.pytorch.port import TorchModel

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
  combined = gradients_combined(model)
  return {
      'framework': 'pytorch', 'platform': device.type, 'device_kind': kind,
      'devices': devices,
      'replicas': {base.label(c): f'{device.type} ({kind}) x1, the batch in '
                                  f'{c} share{"s" if c > 1 else ""}'
                   for c in counts},
      # What its all_reduce does, read from what it gives (not assumed).
      **({'gradients': f'the shares\' gradients {combined}'}
         if max(counts) > 1 else {}),
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


def gradients_combined(model: TorchModel) -> str:
  """How the model's all_reduce combines the replicas' gradients, read
  from its answer on two known ones (1 and 3): 'averaged, as DDP does'
  (2), 'summed, where DDP averages them' (4), or what it gave."""
  import torch  # pylint: disable=g-import-not-at-top
  given = model.all_reduce([torch.ones(1), torch.full((1,), 3.0)])
  value = float(torch.as_tensor(given).reshape(-1)[0])
  return {2.0: 'averaged, as DDP does',
          4.0: 'summed, where DDP averages them'}.get(
              value, f'combined into {value:g} from 1 and 3 (DDP averages '
              'them: 2)')
