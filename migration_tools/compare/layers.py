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
relative to its own scale; the first over its bar is where the two sides
part: ``tolerances.LAYER_RTOL``, or the noise the port's own float32 makes
on that layer's output (noise.Forward.layer_bar) where that is larger.

Where one side applies an activation inside a layer and the other after
it (a legacy ``tf.layers.dense(..., activation=gelu)`` against a Keras
``Dense`` followed by an ``Activation``, as TF Model Garden's BERT has it),
the two outputs differ by that activation alone: a layer over its bar whose
outputs agree once one of ``ACTIVATIONS`` is applied to one side is grouped
otherwise, said in 'grouped_otherwise', and no parting.
"""
from __future__ import annotations

import math

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances


def _sigmoid(x):
  return 0.5 * (1.0 + np.tanh(0.5 * x))


_ERF = np.vectorize(math.erf, otypes=[np.float64])

# The activations a layer may apply on one side and leave to the next op on
# the other (float64, on float32 outputs), in the order they are tried.
ACTIVATIONS = {
    'relu': lambda x: np.maximum(x, 0.0),
    'gelu (tanh)': lambda x: 0.5 * x * (1.0 + np.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    'gelu (erf)': lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
    'swish': lambda x: x * _sigmoid(x),
    'sigmoid': _sigmoid,
    'tanh': np.tanh,
    'relu6': lambda x: np.clip(x, 0.0, 6.0),
    'elu': lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    'softplus': lambda x: np.logaddexp(x, 0.0),
}


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


def grouped_otherwise(theirs, ours, bar: float) -> str | None:
  """Which side applies which activation (ACTIVATIONS) inside this layer
  that the other applies after it, where the outputs then agree within bar
  (relative); None where none does."""
  theirs = np.asarray(theirs, np.float64).ravel()
  ours = np.asarray(ours, np.float64).ravel()
  with np.errstate(all='ignore'):
    for name, activation in ACTIVATIONS.items():
      if relative_diff(activation(theirs), ours) <= bar:
        return (f'{name}: the port\'s layer applies it, the legacy applies '
                'it after its layer')
      if relative_diff(theirs, activation(ours)) <= bar:
        return (f'{name}: the legacy layer applies it, the port after its '
                'layer')
  return None


def compare(legacy_outputs: dict, port_outputs: dict,
            scope_pairs: dict[str, str], noise=None) -> dict:
  """The layers' outputs compared, in the legacy order.

  Args:
    legacy_outputs: {legacy scope: output}, in the legacy model's order.
    port_outputs: {port layer: output}.
    scope_pairs: pairs(...) of the variable map.
    noise: the port's noise.Forward, with its layers' (by_layer), or None:
      each layer's bar is then tolerances.LAYER_RTOL.

  Returns:
    {'compared': [legacy scopes], 'by_layer': {scope: relative diff},
     'bar_by_layer': {scope: its bar, relative}, 'port_layers': {scope:
     port layer}, 'parting': the first scope over its bar or None,
     'last_equal': the last scope before it within its bar, 'other_sizes':
     {scope: [its size, the port layer's]} of the pairs whose outputs
     differ in size, left out, 'grouped_otherwise': {scope: the activation
     one side applies inside it and the other after it} of the layers over
     their bars that agree once it is applied (grouped_otherwise), no
     parting}.
  """
  by_layer, port_layers, sizes, bars, grouped = {}, {}, {}, {}, {}
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
    scale = float(np.abs(np.asarray(output, np.float64)).max(initial=0.0))
    bars[name] = (tolerances.LAYER_RTOL if noise is None else
                  noise.layer_bar(ours, scale))
  parting, last_equal = None, None
  for name, diff in by_layer.items():
    if not diff <= bars[name]:  # NaN too.
      grouped[name] = grouped_otherwise(
          legacy_outputs[name], port_outputs[port_layers[name]], bars[name])
      if grouped[name] is None:
        del grouped[name]
        parting = name
        break
    last_equal = name
  return {'compared': list(by_layer), 'by_layer': by_layer,
          'bar_by_layer': bars, 'port_layers': port_layers,
          'parting': parting, 'last_equal': last_equal,
          'other_sizes': sizes, 'grouped_otherwise': grouped}


def parting_text(figures: dict) -> str:
  """'equal up to X; they part at Y (port: Z) by d' or ''."""
  parting = figures.get('parting')
  if not parting:
    return ''
  before = (f'equal up to {figures["last_equal"]}; '
            if figures.get('last_equal') else '')
  bar = figures.get('bar_by_layer', {}).get(parting)
  bar = '' if bar is None else f' (bar {bar:.3g})'
  grouped = figures.get('grouped_otherwise') or {}
  # An activation on one side only shows as a grouping before it.
  grouped = ('; before it, ' + ', '.join(
      f'{k} ({v})' for k, v in grouped.items()) + ' agreed once an '
             'activation was applied: if the other side does not apply it '
             'after, that is the cause' if grouped else '')
  return (f'{before}they part at {parting} (port: '
          f'{figures["port_layers"][parting]}) by '
          f'{figures["by_layer"][parting]:.3g} of its scale{bar}{grouped}')
