"""Which port variable holds which legacy variable: given, read or inferred.

A map is {legacy variable name: port variable name} over the model's state,
trainable or not (batch-norm moving statistics included). The port gives it
(``Port.variable_map``), a JSON file gives it (``--variable_map``), or it is
inferred: equal names first, then names equal after normalisation, then,
among variables of the same shape and the same last name part (kernel, bias,
moving_mean, ...), pairing in creation order. Whatever cannot be paired one
to one is an error that lists it, so a guess is never silent.
"""
import dataclasses
import json
import re

from kit_core.errors import KitError


@dataclasses.dataclass(frozen=True)
class Resolved:
  """A map and how each pair was found ('given', 'name', 'order')."""
  pairs: dict[str, str]
  how: dict[str, str]

  def by_order(self) -> list[str]:
    """The pairs made by shape and creation order, for the report."""
    return [f'{k} -> {v}' for k, v in self.pairs.items()
            if self.how[k] == 'order']


def read(path: str) -> dict[str, str]:
  """A JSON object {legacy name: port name} from path.

  Raises:
    KitError: unreadable, not JSON, or not an object of strings.
  """
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise KitError(f'--variable_map {path}: {e}') from e
  if not isinstance(value, dict) or not all(
      isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
    raise KitError(f'--variable_map {path}: expected a JSON object '
                   '{"legacy/name": "port/name", ...}')
  return value


def _normal(name: str) -> str:
  """A name without ':0', a leading 'model/', layer-number suffixes."""
  name = name.removesuffix(':0').lower()
  name = re.sub(r'^(model|sequential|functional)(_\d+)?/', '', name)
  return re.sub(r'_\d+(?=/)', '', name)


def _last(name: str) -> str:
  return name.rsplit('/', 1)[-1]


def infer(legacy: dict[str, tuple], port: dict[str, tuple]) -> Resolved:
  """Pairs legacy and port variables (both {name: shape}, creation order).

  Raises:
    KitError: variables left without a partner, listed with their shapes.
  """
  pairs, how = {}, {}
  left_legacy = dict(legacy)
  left_port = dict(port)

  def take(theirs, ours, why):
    pairs[theirs], how[theirs] = ours, why
    del left_legacy[theirs], left_port[ours]

  for name in list(left_legacy):
    if name in left_port and tuple(left_port[name]) == tuple(legacy[name]):
      take(name, name, 'name')
  normal = {}
  for name in left_port:
    normal.setdefault(_normal(name), []).append(name)
  for name in list(left_legacy):
    candidates = [c for c in normal.get(_normal(name), [])
                  if c in left_port and tuple(port[c]) == tuple(legacy[name])]
    if len(candidates) == 1:
      take(name, candidates[0], 'name')
  groups: dict[tuple, tuple[list, list]] = {}
  for side, names in ((0, left_legacy), (1, left_port)):
    source = legacy if side == 0 else port
    for name in names:
      key = (tuple(source[name]), _last(name))
      groups.setdefault(key, ([], []))[side].append(name)
  for theirs, ours in groups.values():
    if len(theirs) == len(ours):
      for a, b in zip(theirs, ours):
        take(a, b, 'order')
  if left_legacy or left_port:
    shown = [f'{label} {", ".join(f"{n} {list(s)}" for n, s in items[:4])}'
             f'{" ..." if len(items) > 4 else ""}'
             for label, items in (('legacy', list(left_legacy.items())),
                                  ('port', list(left_port.items()))) if items]
    raise KitError('cannot pair every variable by name or by shape and order '
                   f'(left: {"; ".join(shown)}){_shared_text(groups)}; give '
                   'the map explicitly (Port.variable_map or '
                   '--variable_map=map.json)')
  return Resolved({k: pairs[k] for k in legacy}, how)


def _shared_text(groups: dict[tuple, tuple[list, list]]) -> str:
  """Where the port holds k copies of several kinds of legacy variables (a
  block the legacy model shares across its layers, made per layer in the
  port): said, else ''."""
  factors = [len(ours) // len(theirs) for theirs, ours in groups.values()
             if theirs and len(ours) > len(theirs) and
             len(ours) % len(theirs) == 0]
  if len(factors) < 2 or len(set(factors)) != 1:
    return ''
  return (f': the port holds {factors[0]} copies of {len(factors)} kinds of '
          'variables the legacy model has once (e.g. a block the legacy '
          'model shares across its layers, one variable scope reused, made '
          'once per layer in the port: call one layer instance in each)')


def resolve(legacy: dict[str, tuple], port: dict[str, tuple],
            given: dict[str, str] | None) -> Resolved:
  """The given map checked against both sides, or an inferred one.

  Raises:
    KitError: a given map naming a variable either side lacks.
  """
  if given is None:
    return infer(legacy, port)
  for label, names, side in (('legacy model', given, legacy),
                             ('port\'s model', given.values(), port)):
    unknown = sorted(n for n in names if n not in side)
    if unknown:
      raise KitError(
          f'the variable map names {", ".join(unknown[:4])}'
          f'{" ..." if len(unknown) > 4 else ""}, which the {label} does not '
          f'have (it has {", ".join(list(side)[:6])}'
          f'{" ..." if len(side) > 6 else ""}); give each Keras layer a fixed '
          'name (name=...) and map the legacy names onto those')
  return Resolved(dict(given), {k: 'given' for k in given})


MAP_FIELDS = ('variable_map', 'output_map', 'metric_map', 'slot_map',
              'not_compared')


def check_maps(port, owner: str) -> None:
  """Raises KitError unless every map of a port (a Port or an ArrayPort)
  is a dict of strings (variable_map may be None: inferred); owner starts
  the message ("the port's ", "--port X: ArrayPort.")."""
  for field in MAP_FIELDS:
    value = getattr(port, field)
    if field == 'variable_map' and value is None:
      continue
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
      raise KitError(f'{owner}{field} must be a dict of strings ' + (
          '{legacy variable name or pattern: why it is left out}'
          if field == 'not_compared' else '{legacy name: port name}'))
