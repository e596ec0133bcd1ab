"""Where two models' outputs part: each layer's output, legacy against port.

A 400-line model_fn that computes a little otherwise shows it in its
outputs, or only in its gradients; this says which lines to read. Each side
names a layer by the variables it owns: a legacy layer is a variable's
name scope ('bert/encoder/layer_0/attention/output/LayerNorm' for its
'.../gamma'), its output the last tensor made in that scope; a port layer is
the Keras layer that owns the variable the map pairs with it, its output
what its call returned. Both are compared on one example, flattened (a
legacy dense on [batch * seq, hidden] and a port's on [batch, seq, hidden]
hold the same numbers in the same order), in the legacy model's order, each
relative to its own scale; the first over ``tolerances.LAYER_RTOL`` is where
the two sides part.
"""
import numpy as np

from migration_tools import outputs
from migration_tools import tolerances


def scope(name: str) -> str:
  """A variable's layer: its name without the last part ('' at the top)."""
  return name.rpartition('/')[0]


def pairs(variable_pairs: dict[str, str]) -> dict[str, str]:
  """{legacy scope: port layer} that the variable map pairs: the scope
  of each legacy variable with that of its port variable (the first pairing
  of a scope wins; variables at the top level name no layer)."""
  found = {}
  for theirs, ours in variable_pairs.items():
    if scope(theirs) and scope(ours):
      found.setdefault(scope(theirs), scope(ours))
  return found


def relative_diff(theirs: np.ndarray, ours: np.ndarray) -> float:
  """max |a - b| over max |a| (inf if the sizes differ)."""
  theirs = np.asarray(theirs, np.float64).ravel()
  ours = np.asarray(ours, np.float64).ravel()
  if theirs.size != ours.size:
    return float('inf')
  difference = outputs.output_diff(theirs, ours)  # inf where not finite.
  if not np.isfinite(difference):
    return difference
  scale = max(float(np.abs(theirs).max(initial=0.0)), 1e-30)
  return difference / scale


def compare(legacy_outputs: dict, port_outputs: dict,
            scope_pairs: dict[str, str]) -> dict:
  """The layers' outputs compared, in the legacy order.

  Args:
    legacy_outputs: {legacy scope: output}, in the legacy model's order.
    port_outputs: {port layer: output}.
    scope_pairs: pairs(...) of the variable map.

  Returns:
    {'compared': [legacy scopes], 'by_layer': {scope: relative diff},
     'port_layers': {scope: port layer}, 'parting': the first scope over the
     bar or None, 'last_equal': the last scope before it within the bar,
     'other_sizes': {scope: [its size, the port layer's]} of the pairs whose
     outputs differ in size, left out}.
  """
  by_layer, port_layers, sizes = {}, {}, {}
  for name, output in legacy_outputs.items():
    ours = scope_pairs.get(name)
    if ours is None or ours not in port_outputs:
      continue
    size, port_size = np.size(output), np.size(port_outputs[ours])
    if size != port_size:
      # The two group their operations otherwise (a port's layer that also
      # projects, say): no output of one is the other's to compare.
      sizes[name] = [int(size), int(port_size)]
      continue
    by_layer[name] = relative_diff(output, port_outputs[ours])
    port_layers[name] = ours
  parting, last_equal = None, None
  for name, diff in by_layer.items():
    if diff > tolerances.LAYER_RTOL:
      parting = name
      break
    last_equal = name
  return {'compared': list(by_layer), 'by_layer': by_layer,
          'port_layers': port_layers, 'parting': parting,
          'last_equal': last_equal, 'other_sizes': sizes}


def parting_text(figures: dict) -> str:
  """'equal up to X; they part at Y (port: Z) by d' or ''."""
  parting = figures.get('parting')
  if not parting:
    return ''
  before = (f'equal up to {figures["last_equal"]}; '
            if figures.get('last_equal') else '')
  return (f'{before}they part at {parting} (port: '
          f'{figures["port_layers"][parting]}) by '
          f'{figures["by_layer"][parting]:.3g} of its scale')
