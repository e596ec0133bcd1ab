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
RMSPROP, ADAGRAD, ADADELTA, FTRL = 'RMSProp', 'Adagrad', 'Adadelta', 'Ftrl'
# TF 1 optimizers no Keras optimizer reproduces: read by their ops for the
# report, compared by what they do (a port's own optimizer, its slots
# through a slot map), as BERT's AdamWeightDecayOptimizer is.
PROXIMAL_ADAGRAD = 'ProximalAdagrad'
PROXIMAL_SGD = 'ProximalGradientDescent'
ADAGRAD_DA = 'AdagradDA'
# The kinds a Keras optimizer of the same name reproduces, by its config.
KERAS_KINDS = (SGD, MOMENTUM, ADAM, RMSPROP, ADAGRAD, ADADELTA, FTRL)


@dataclasses.dataclass(frozen=True)
class ApplyOp:
  """How to read one TF 1 apply op.

  kind: the optimizer kind.
  rate, grad: the input indices of the learning rate and the gradient.
  slots: {input index: canonical slot name}.
  hyper: {hyper-parameter (its Keras config key): input index}.
  fixed: {hyper-parameter: value} this op implies (centered RMSProp's
    centered=True; Adagrad without epsilon's epsilon=0).
  attrs: {hyper-parameter: the op's boolean attribute}.
  """
  kind: str
  rate: int
  grad: int
  slots: dict[int, str]
  hyper: dict[str, int]
  fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
  attrs: dict[str, str] = dataclasses.field(default_factory=dict)


def _apply_ops(names: tuple, rule: ApplyOp) -> dict[str, ApplyOp]:
  """{op type: rule} for an op and its resource form."""
  return {prefix + name: rule for name in names
          for prefix in ('', 'Resource')}


_FTRL_HYPER = {'l1_regularization_strength': 5, 'l2_regularization_strength': 6,
               'learning_rate_power': 7}
_RMS_HYPER = {'rho': 4, 'momentum': 5, 'epsilon': 6}
_DA_SLOTS = {1: 'gradient_accumulator', 2: 'gradient_squared_accumulator'}
# The input order of each TF 1 training op (tf.raw_ops); a sparse op takes
# the indices after the gradient, which moves what follows it.
LEGACY_APPLY_OPS = {
    **_apply_ops(('ApplyGradientDescent',), ApplyOp(SGD, 1, 2, {}, {})),
    **_apply_ops(('ApplyMomentum',), ApplyOp(
        MOMENTUM, 2, 3, {1: 'momentum'}, {'momentum': 4},
        attrs={'nesterov': 'use_nesterov'})),
    **_apply_ops(('SparseApplyMomentum',), ApplyOp(
        MOMENTUM, 2, 3, {1: 'momentum'}, {'momentum': 5},
        attrs={'nesterov': 'use_nesterov'})),
    **_apply_ops(('ApplyAdam',), ApplyOp(
        ADAM, 5, 9, {1: 'm', 2: 'v'},
        {'beta_1': 6, 'beta_2': 7, 'epsilon': 8})),
    **_apply_ops(('ApplyRMSProp', 'SparseApplyRMSProp'), ApplyOp(
        RMSPROP, 3, 7, {1: 'rms', 2: 'momentum'}, _RMS_HYPER,
        fixed={'centered': False})),
    **_apply_ops(('ApplyCenteredRMSProp', 'SparseApplyCenteredRMSProp'),
                 ApplyOp(RMSPROP, 4, 8, {1: 'mg', 2: 'rms', 3: 'momentum'},
                         {k: i + 1 for k, i in _RMS_HYPER.items()},
                         fixed={'centered': True})),
    **_apply_ops(('ApplyAdagrad', 'SparseApplyAdagrad'), ApplyOp(
        ADAGRAD, 2, 3, {1: 'accumulator'}, {}, fixed={'epsilon': 0.0})),
    **_apply_ops(('ApplyAdagradV2', 'SparseApplyAdagradV2'), ApplyOp(
        ADAGRAD, 2, 4, {1: 'accumulator'}, {'epsilon': 3})),
    **_apply_ops(('ApplyAdadelta', 'SparseApplyAdadelta'), ApplyOp(
        ADADELTA, 3, 6, {1: 'accum', 2: 'accum_update'},
        {'rho': 4, 'epsilon': 5})),
    **_apply_ops(('ApplyFtrl',), ApplyOp(
        FTRL, 4, 3, {1: 'accum', 2: 'linear'}, _FTRL_HYPER,
        fixed={'l2_shrinkage_regularization_strength': 0.0})),
    **_apply_ops(('SparseApplyFtrl',), ApplyOp(
        FTRL, 5, 3, {1: 'accum', 2: 'linear'},
        {k: i + 1 for k, i in _FTRL_HYPER.items()},
        fixed={'l2_shrinkage_regularization_strength': 0.0})),
    **_apply_ops(('ApplyFtrlV2',), ApplyOp(
        FTRL, 4, 3, {1: 'accum', 2: 'linear'},
        {**_FTRL_HYPER, 'l2_shrinkage_regularization_strength': 7,
         'learning_rate_power': 8})),
    **_apply_ops(('SparseApplyFtrlV2',), ApplyOp(
        FTRL, 5, 3, {1: 'accum', 2: 'linear'},
        {'l1_regularization_strength': 6, 'l2_regularization_strength': 7,
         'l2_shrinkage_regularization_strength': 8,
         'learning_rate_power': 9})),
    **_apply_ops(('ApplyProximalAdagrad', 'SparseApplyProximalAdagrad'),
                 ApplyOp(PROXIMAL_ADAGRAD, 2, 5, {1: 'accumulator'},
                         {'l1': 3, 'l2': 4})),
    **_apply_ops(('ApplyProximalGradientDescent',
                  'SparseApplyProximalGradientDescent'),
                 ApplyOp(PROXIMAL_SGD, 1, 4, {}, {'l1': 2, 'l2': 3})),
    **_apply_ops(('ApplyAdagradDA',), ApplyOp(
        ADAGRAD_DA, 4, 3, _DA_SLOTS, {'l1': 5, 'l2': 6})),
    **_apply_ops(('SparseApplyAdagradDA',), ApplyOp(
        ADAGRAD_DA, 5, 3, _DA_SLOTS, {'l1': 6, 'l2': 7})),
}
# TF 1 slot variables are named <variable>/<suffix>, the suffix the
# optimizer's name and a count in creation order: suffix -> (kind, slot).
LEGACY_SLOT_SUFFIXES = {
    'Momentum': (MOMENTUM, 'momentum'), 'Adam': (ADAM, 'm'),
    'Adam_1': (ADAM, 'v'), 'RMSProp': (RMSPROP, 'rms'),
    'RMSProp_1': (RMSPROP, 'momentum'), 'Adagrad': (ADAGRAD, 'accumulator'),
    'Adadelta': (ADADELTA, 'accum'), 'Adadelta_1': (ADADELTA, 'accum_update'),
    'Ftrl': (FTRL, 'accum'), 'Ftrl_1': (FTRL, 'linear')}
# Centered RMSProp makes its 'mg' slot second, which moves momentum's count.
CENTERED_RMSPROP_SUFFIXES = {'RMSProp': (RMSPROP, 'rms'),
                             'RMSProp_1': (RMSPROP, 'mg'),
                             'RMSProp_2': (RMSPROP, 'momentum')}
# TF 1 optimizer variables a Keras optimizer derives from its step instead.
LEGACY_DERIVED = ('beta1_power', 'beta2_power')

# Keras major version -> {(kind, the slot's token in its variable's name):
# canonical slot name}; keras_compat.slot_name places the token.
_KERAS_SLOTS = {
    (RMSPROP, 'velocity'): 'rms', (RMSPROP, 'momentum'): 'momentum',
    (RMSPROP, 'average_gradient'): 'mg',
    (ADAGRAD, 'accumulator'): 'accumulator',
    (ADADELTA, 'accumulated_grad'): 'accum',
    (ADADELTA, 'accumulated_delta_var'): 'accum_update',
    (FTRL, 'accumulator'): 'accum', (FTRL, 'linear'): 'linear'}
PORT_SLOTS = {
    2: {(MOMENTUM, 'm'): 'momentum', (ADAM, 'm'): 'm', (ADAM, 'v'): 'v',
        **_KERAS_SLOTS},
    3: {(MOMENTUM, 'momentum'): 'momentum', (ADAM, 'momentum'): 'm',
        (ADAM, 'velocity'): 'v', **_KERAS_SLOTS},
}
# Slots a Keras version keeps that carry no state: Keras 2's SGD without
# momentum still stores each step's update in 'm', and multiplies it by 0.
PORT_UNUSED_SLOTS = {2: {(SGD, 'm')}, 3: set()}
# Hyper-parameters each kind has, with the Keras config key they live under;
# TF 1's Adam has no nesterov. Ftrl's beta is folded into the l2 strength
# both apply (l2 + beta / (2 * rate)): a port's beta is compared so.
HYPER = {SGD: (), MOMENTUM: ('momentum', 'nesterov'),
         ADAM: ('beta_1', 'beta_2', 'epsilon'),
         RMSPROP: ('rho', 'momentum', 'epsilon', 'centered'),
         ADAGRAD: ('epsilon',), ADADELTA: ('rho', 'epsilon'),
         FTRL: ('learning_rate_power', 'l1_regularization_strength',
                'l2_regularization_strength',
                'l2_shrinkage_regularization_strength')}
# The Keras class of each kind (SGD covers plain and momentum).
KERAS_CLASSES = {'SGD': SGD, 'Adam': ADAM, 'RMSprop': RMSPROP,
                 'Adagrad': ADAGRAD, 'Adadelta': ADADELTA, 'Ftrl': FTRL}
# TF 1's MomentumOptimizer accumulates gradients (a = m*a + g; w -= lr*a),
# Keras's SGD accumulates steps (v = m*v - lr*g; w += v): v = -lr * a, exact
# only while the rate is constant. RMSProp's momentum holds the steps on
# both (mom = m*mom + lr*g/sqrt(ms + eps); w -= mom): no scale.
SLOT_SCALES = {(MOMENTUM, 'momentum'): lambda rate: -rate}


def legacy_unused_slots(description: 'Description') -> set[str]:
  """The legacy slots that carry no state under these hyper-parameters:
  TF 1's RMSProp without momentum still stores each step in its momentum
  slot (mom = 0 * mom + step), where Keras's RMSprop keeps no such slot."""
  if description.kind == RMSPROP and not description.hyper.get('momentum'):
    return {'momentum'}
  return set()


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
  config = _config(optimizer)
  kind = keras_kind(optimizer)
  if kind == SGD and config.get('momentum'):
    kind = MOMENTUM
  hyper = {key: config[key] for key in HYPER.get(kind, ()) if key in config}
  rate = config.get('learning_rate')
  if kind == FTRL and config.get('beta') and isinstance(rate, float):
    # TF 1 hands its Ftrl op l2 + beta / (2 * rate), as Keras applies it.
    hyper['l2_regularization_strength'] += config['beta'] / (2 * rate)
  return Description(kind, hyper)


def _config(optimizer) -> dict:
  """Its config; where that cannot be made because a learning-rate schedule
  of the port's own has no get_config (Keras raises NotImplementedError),
  its hyper-parameters read as attributes: the schedule is the
  learning_rate check's, which reads the rate each step applied."""
  try:
    return optimizer.get_config()
  except NotImplementedError:
    names = {name for kind in HYPER.values() for name in kind}
    return {name: _plain(getattr(optimizer, name)) for name in sorted(names)
            if hasattr(optimizer, name)}


def _plain(value):
  """A hyper-parameter as its config gives it: a bool, or a float (a
  Keras 2 optimizer may hold a variable)."""
  if isinstance(value, bool) or value is None:
    return value
  try:
    return float(np.asarray(value))
  except (TypeError, ValueError):
    return value


def keras_kind(optimizer) -> str:
  """The kind of a Keras optimizer: its class's, or that of the Keras
  optimizer it subclasses (e.g. an RMSprop whose slots start at 1); else
  its class's own name (an optimizer the tables do not hold). By class, not
  config['name']: Keras 3 lower-cases it, and a user may name it anything."""
  for cls in type(optimizer).__mro__:
    if cls.__name__ in KERAS_CLASSES and cls.__module__.startswith(
        ('keras', 'tf_keras')):
      return KERAS_CLASSES[cls.__name__]
  return type(optimizer).__name__


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


def legacy_slot(name: str, owners, names=()) -> tuple[str, str, str] | None:
  """(owner, kind, canonical slot) if name is a TF 1 slot of a variable in
  owners (by TF 1's default slot names), else None.

  Args:
    names: every variable's name; a variable with a third RMSProp slot
      ('<owner>/RMSProp_2') is a centered RMSProp's, whose 'mg' comes
      second.
  """
  owner, _, suffix = name.rpartition('/')
  if owner not in owners:
    return None
  table = LEGACY_SLOT_SUFFIXES
  if f'{owner}/RMSProp_2' in names:
    table = {**table, **CENTERED_RMSPROP_SUFFIXES}
  if suffix in table:
    return (owner, *table[suffix])
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


def _start(values: list) -> float | None:
  """The one value every element of values holds, else None."""
  flat = np.concatenate([np.ravel(v) for v in values]) if values else None
  if flat is None or not flat.size or not np.all(flat == flat[0]):
    return None
  return float(flat[0])


def initial_slot_differences(legacy: dict, port: dict) -> list[str]:
  """Slots that start at another value on each side, as phrases: both
  {(variable, slot): value} before any step, in the TF 1 convention
  (TF 1's RMSProp starts its 'rms' at 1, Keras's RMSprop at 0)."""
  said = []
  for slot in slot_tokens(legacy):
    theirs = _start([v for (_, s), v in legacy.items() if s == slot])
    ours = _start([v for (_, s), v in port.items() if s == slot])
    if theirs is not None and ours is not None and theirs != ours:
      said.append(f'the {slot} slots start at {theirs:g} in the legacy '
                  f'optimizer and at {ours:g} in the port\'s')
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
