"""What torch.export refuses in a PyTorch port's programs, and why: its TPU
readiness (what PyTorch/XLA and ``torch.compile(fullgraph=True)`` need: one
graph, static shapes, no value read back to Python). The rule table
(``CAUSES``) apart from its reading (``export_problems``)."""
from __future__ import annotations

from kit_core.errors import Interrupted
from kit_core.errors import one_line
from migration_tools.pair.frameworks import tpu as tpu_lib

CAUSES = {
    'data_dependent': tpu_lib.Cause(
        'reads a value back to Python or makes a shape from the data',
        'a TPU compiles one graph of static shapes: keep values as tensors '
        '(no .item(), .tolist() or Python branches on them), and mask '
        'instead of dropping (torch.where(mask, x, 0))'),
    'graph_break': tpu_lib.Cause(
        'breaks the graph',
        'PyTorch/XLA and torch.compile(fullgraph=True) need one graph: '
        'move the Python it runs (print, numpy, a callback) out of the '
        'forward'),
    'export': tpu_lib.Cause(
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


def export_problems(part: str, module, args: tuple) -> list[tpu_lib.Problem]:
  """What torch.export refuses in one program, as one Problem (see CAUSES)."""
  import torch  # pylint: disable=g-import-not-at-top
  try:
    torch.export.export(module, tuple(args), strict=True)
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    return [tpu_lib.Problem(part, _cause(e), type(e).__name__, part,
                        one_line(e)[:300])]
  return []
