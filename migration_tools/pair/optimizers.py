"""The optimizers the harness and the converter read on both sides, as tables.

A TF 1 optimizer leaves one apply op per variable in the training graph; its
inputs hold the slots, the learning rate applied at that step and the
hyper-parameters (``LEGACY_APPLY_OPS``). A Keras optimizer names its slot
variables after the variable and a token (``PORT_SLOTS``, one row per Keras
major version) and holds its hyper-parameters in its config. Slots are compared and converted under one canonical name
per optimizer kind; where the two conventions store a slot differently,
``to_port``/``to_legacy`` convert it (``SLOT_SCALES``). Adding an optimizer is
a row in each table and a test pair that uses it.
"""
import dataclasses
import math
from typing import Any

import numpy as np

from kit_core import keras_compat

SGD, MOMENTUM, ADAM = 'SGD', 'Momentum', 'Adam'


@dataclasses.dataclass(frozen=True)
class ApplyOp:
  """How to read one TF 1 apply op: input indices of what it applies."""
  kind: str
  rate: int
  grad: int
  slots: dict[int, str]
  hyper: dict[str, int]


_SGD_OP = ApplyOp(SGD, 1, 2, {}, {})
_MOMENTUM_OP = ApplyOp(MOMENTUM, 2, 3, {1: 'momentum'}, {'momentum': 4})
_ADAM_OP = ApplyOp(ADAM, 5, 9, {1: 'm', 2: 'v'},
                   {'beta_1': 6, 'beta_2': 7, 'epsilon': 8})
LEGACY_APPLY_OPS = {
    'ApplyGradientDescent': _SGD_OP,
    'ResourceApplyGradientDescent': _SGD_OP,
    'ApplyMomentum': _MOMENTUM_OP,
    'ResourceApplyMomentum': _MOMENTUM_OP,
    'ApplyAdam': _ADAM_OP,
    'ResourceApplyAdam': _ADAM_OP,
}
# Attributes of the apply ops that are hyper-parameters too.
LEGACY_APPLY_ATTRS = {MOMENTUM: {'nesterov': 'use_nesterov'}}
# TF 1 slot variables are named <variable>/<suffix>: suffix -> (kind, slot).
LEGACY_SLOT_SUFFIXES = {'Momentum': (MOMENTUM, 'momentum'),
                        'Adam': (ADAM, 'm'), 'Adam_1': (ADAM, 'v')}
# TF 1 optimizer variables a Keras optimizer derives from its step instead.
LEGACY_DERIVED = ('beta1_power', 'beta2_power')

# Keras major version -> {(kind, the slot's token in its variable's name):
# canonical slot name}; keras_compat.slot_name places the token.
PORT_SLOTS = {
    2: {(MOMENTUM, 'm'): 'momentum', (ADAM, 'm'): 'm', (ADAM, 'v'): 'v'},
    3: {(MOMENTUM, 'momentum'): 'momentum', (ADAM, 'momentum'): 'm',
        (ADAM, 'velocity'): 'v'},
}
# Slots a Keras version keeps that carry no state: Keras 2's SGD without
# momentum still stores each step's update in 'm', and multiplies it by 0.
PORT_UNUSED_SLOTS = {2: {(SGD, 'm')}, 3: set()}
# Hyper-parameters each kind has, with the Keras config key they live under;
# TF 1's Adam has no nesterov.
HYPER = {SGD: (), MOMENTUM: ('momentum', 'nesterov'),
         ADAM: ('beta_1', 'beta_2', 'epsilon')}
# TF 1's MomentumOptimizer accumulates gradients (a = m*a + g; w -= lr*a),
# Keras's SGD accumulates steps (v = m*v - lr*g; w += v): v = -lr * a, exact
# only while the rate is constant.
SLOT_SCALES = {(MOMENTUM, 'momentum'): lambda rate: -rate}


@dataclasses.dataclass(frozen=True)
class Description:
  """An optimizer as the checks compare it: kind and hyper-parameters."""
  kind: str
  hyper: dict[str, Any]

  def __str__(self) -> str:
    shown = ', '.join(f'{k}={v:.6g}' if isinstance(v, float) else f'{k}={v}'
                      for k, v in sorted(self.hyper.items()))
    return f'{self.kind}({shown})'


def describe_port(optimizer) -> Description:
  """The kind and hyper-parameters of a Keras optimizer, from its config."""
  config = optimizer.get_config()
  # The class, not config['name']: Keras 3 lower-cases it, and a user may
  # name an optimizer anything.
  name = type(optimizer).__name__
  kind = name
  if name == 'SGD':
    kind = MOMENTUM if config.get('momentum') else SGD
  hyper = {key: config[key] for key in HYPER.get(kind, ()) if key in config}
  return Description(kind, hyper)


def port_slots(optimizer, model_names: dict[str, str]) -> dict[tuple, Any]:
  """{(harness name, canonical slot): slot variable} of a Keras optimizer.

  Args:
    optimizer: a built Keras optimizer.
    model_names: {the variable's path (keras_compat.variable_path): the name
      the harness uses for it}.
  """
  kind = describe_port(optimizer).kind
  wanted = {}
  for (slot_kind, token), slot in PORT_SLOTS[
      keras_compat.keras_major()].items():
    if slot_kind == kind:
      for path, name in model_names.items():
        wanted[keras_compat.slot_name(path, token)] = (name, slot)
  found = {}
  for variable in optimizer.variables:
    # Keras 2 puts the optimizer's name in front when it builds its slots
    # inside fit ('Adam/m/dense/kernel'), not when built by hand.
    name = variable.name.removesuffix(':0').removeprefix(f'{optimizer.name}/')
    if name in wanted:
      found[wanted[name]] = variable
  return found


def legacy_slot(name: str, owners) -> tuple[str, str, str] | None:
  """(owner, kind, canonical slot) if name is a TF 1 slot of a variable in
  owners (by TF 1's default slot names), else None."""
  owner, _, suffix = name.rpartition('/')
  if owner in owners and suffix in LEGACY_SLOT_SUFFIXES:
    return (owner, *LEGACY_SLOT_SUFFIXES[suffix])
  return None


def scale(kind: str, slot: str, rate: float) -> float:
  """The factor from a TF 1 slot value to the Keras one at this rate."""
  factor = SLOT_SCALES.get((kind, slot))
  return 1.0 if factor is None else factor(rate)


def to_port(kind: str, slot: str, value: np.ndarray, rate: float
            ) -> np.ndarray:
  return value * np.asarray(scale(kind, slot, rate), value.dtype)


def to_legacy(kind: str, slot: str, value: np.ndarray, rate: float
              ) -> np.ndarray:
  factor = scale(kind, slot, rate)
  if factor == 0:
    raise ValueError(f'a {kind} slot cannot be carried at a learning rate of 0')
  return value / np.asarray(factor, value.dtype)


def differences(legacy: Description, port: Description) -> list[str]:
  """What differs between the two optimizers, as phrases; [] if nothing."""
  if legacy.kind != port.kind:
    return [f'the legacy optimizer is {legacy}, the port\'s {port}']
  said = []
  for key, theirs in legacy.hyper.items():
    ours = port.hyper.get(key)
    same = (ours == theirs if isinstance(theirs, bool) or ours is None else
            math.isclose(float(theirs), float(ours), rel_tol=1e-6))
    if not same:
      said.append(f'{key} is {theirs:.6g} in the legacy {legacy.kind} and '
                  f'{ours:.6g} in the port\'s' if not isinstance(theirs, bool)
                  else f'{key} is {theirs} in the legacy {legacy.kind} and '
                  f'{ours} in the port\'s')
  return said


# Any other optimizer: slots found by name and paired through a slot map.
def generic_slots(shapes: dict[str, Any], owners=None) -> dict[tuple, str]:
  """{(variable, suffix): name} of the names <variable>/<suffix> after a
  variable in owners of the same shape (the longest such owner): the slots of
  an optimizer the tables do not hold (BERT's '<variable>/adam_m').

  Args:
    shapes: {name: shape} of every variable (or checkpoint entry).
    owners: the names that may own slots (e.g. the trainable variables);
      None (a checkpoint, which does not say): every name that is not itself
      '<another name of its shape>/<suffix>'.
  """
  def owned_by(name, candidates):
    return [o for o in candidates if name.startswith(o + '/') and
            tuple(shapes[o]) == tuple(shapes[name])]

  if owners is None:
    owners = [n for n in shapes if not owned_by(n, shapes)]
  owners = set(owners)
  slots = {}
  for name in shapes:
    candidates = [] if name in owners else owned_by(name, owners)
    if candidates:
      owner = max(candidates, key=len)
      slots[(owner, name[len(owner) + 1:])] = name
  return slots


def port_slot_variables(optimizer, model_names: dict[str, str]
                        ) -> dict[tuple, Any]:
  """{(harness name, token): variable} of every optimizer variable named as
  Keras names a slot of a model variable (keras_compat.slot_name), in the
  optimizer's order; the longest matching variable path wins.

  Args:
    optimizer: a built Keras optimizer.
    model_names: {the variable's path: the name the harness uses for it}.
  """
  found = {}
  for variable in optimizer.variables:
    name = variable.name.removesuffix(':0').removeprefix(f'{optimizer.name}/')
    best = None
    for path, harness_name in model_names.items():
      token = _slot_token(name, path)
      if token and (best is None or len(path) > len(best[0])):
        best = (path, harness_name, token)
    if best:
      found[(best[1], best[2])] = variable
  return found


def _slot_token(name: str, path: str) -> str | None:
  """The token if name is keras_compat.slot_name(path, token), else None."""
  if keras_compat.is_keras3():
    prefix = path.replace('/', '_') + '_'
    return name[len(prefix):] or None if name.startswith(prefix) else None
  suffix = '/' + path
  return name[:-len(suffix)] or None if name.endswith(suffix) else None


@dataclasses.dataclass(frozen=True)
class SlotMap:
  """{legacy slot suffix: port slot token}, how each pair was made ('given',
  'name', 'order'), and what stayed unpaired on each side."""
  pairs: dict[str, str]
  how: dict[str, str]
  legacy_only: list[str]
  port_only: list[str]

  def __str__(self) -> str:
    shown = [f'{k} -> {v} ({self.how[k]})' for k, v in self.pairs.items()]
    shown += [f'{k} -> none' for k in self.legacy_only]
    return ', '.join(shown) or 'no slots'


def slot_tokens(slots) -> list[str]:
  """The slot names of {(variable, slot): ...} keys, once each, in order."""
  return list(dict.fromkeys(slot for _, slot in slots))


def pair_slots(legacy_slots, port_slots, given: dict[str, str] | None
               ) -> 'SlotMap':
  """The slot map between two {(variable, slot): ...} (resolve_slot_map)."""
  return resolve_slot_map(slot_tokens(legacy_slots), slot_tokens(port_slots),
                          given)


def map_slots(found: dict[tuple, Any], pairs: dict[str, str]
              ) -> dict[tuple, Any]:
  """{(variable, legacy slot): value} of found {(variable, port token):
  value}, through pairs {legacy slot: port token}; unpaired tokens left out."""
  suffix = {token: theirs for theirs, token in pairs.items()}
  return {(name, suffix[token]): value
          for (name, token), value in found.items() if token in suffix}


def resolve_slot_map(legacy: list[str], port: list[str],
                     given: dict[str, str] | None) -> SlotMap:
  """Pairs slot suffixes (both in creation order): given, then equal names,
  then what is left in order when as many are left on each side."""
  pairs, how = {}, {}
  for theirs, ours in (given or {}).items():
    if theirs in legacy and ours in port:
      pairs[theirs], how[theirs] = ours, 'given'
  for theirs in legacy:
    if theirs not in pairs and theirs in port and theirs not in pairs.values():
      pairs[theirs], how[theirs] = theirs, 'name'
  left = [t for t in legacy if t not in pairs]
  free = [o for o in port if o not in pairs.values()]
  if len(left) == len(free):
    for theirs, ours in zip(left, free):
      pairs[theirs], how[theirs] = ours, 'order'
    left, free = [], []
  return SlotMap(pairs, how, left, free)
