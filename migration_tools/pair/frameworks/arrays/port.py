"""The port contract in arrays: a port on any framework (JAX with Keras 3,
plain JAX with optax, ...), checked from a golden bundle with no TensorFlow
in its process.

``port.Port`` hands the harness Keras objects and a Trainer that runs under
a tf.distribute strategy. A port that left TensorFlow is handed over as an
``ArrayPort`` instead: one function builds an ``ArrayModel`` on a number of
replicas, with dropout off, and everything crosses as numpy arrays, named by
the port:

  variables      {name: array} of the model's state (weights, batch-norm
                 statistics), in creation order; ``trainable`` names the
                 ones the optimizer updates.
  slots          {(variable name, token): array}: the optimizer's state per
                 variable. Tokens of an optimizer the kit knows
                 (``describe_optimizer``) follow Keras 3's names ('momentum'
                 for SGD's momentum, 'momentum' and 'velocity' for Adam's m
                 and v, in Keras 3's convention); any other optimizer's are
                 paired with the legacy slots by ``slot_map``, by name, then
                 in order, and compared by what they do.
  step           the optimizer's step count.
  features       a batch as the legacy input_fn yields it: an array or a
                 dict of arrays, the *global* batch; the model splits it over
                 its replicas, global_batch // replicas consecutive examples
                 each, as TPUEstimator split it over its cores.

The harness pairs the names with the legacy ones through the same variable
map, slot map, output map and metric map as a Keras port's
(``variable_map``), and runs the same checks with the same bars.
``kit_pair/mnist_jax.py`` is the kit's own (Keras 3 on JAX);
``tests/user_code/`` holds a plain-JAX one with optax.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from kit_core import npz_files
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import optimizers
from migration_tools.pair.frameworks.arrays import ran_on
from migration_tools.pair import variable_map

GUIDE = 'docs/MIGRATION.md, "To JAX"'

# The devices a JAX port's make(params, replicas, dropout) lays its batch
# over: the accelerator's, else host CPU devices where it has fewer than
# replicas (a bundle of 1, 2 and 4 replicas checked on one GPU). Use it in
# place of jax.devices()[:replicas].
replica_devices = ran_on.replica_devices


@runtime_checkable
class ArrayModel(Protocol):
  """One run of the port on `replicas` devices, from its initial state."""

  replicas: int

  def variables(self) -> dict[str, np.ndarray]:
    """The model's state by name, in creation order."""

  def trainable(self) -> list[str]:
    """The names of the variables the optimizer updates, in order."""

  def set_variables(self, values: dict[str, np.ndarray]) -> None:
    """Sets these variables (a subset of variables())."""

  def slots(self) -> dict[tuple[str, str], np.ndarray]:
    """The optimizer's per-variable state, {(variable, token): value}."""

  def set_slots(self, values: dict[tuple[str, str], np.ndarray]) -> None:
    """Sets these slots (a subset of slots())."""

  def step_count(self) -> int:
    """The optimizer's step: the steps taken."""

  def set_step_count(self, step: int) -> None:
    """Sets the optimizer's step."""

  def describe_optimizer(self) -> optimizers.Description | None:
    """The optimizer's kind and hyper-parameters in Keras's terms
    (optimizers.describe_port), or None: compared by what it does."""

  def learning_rate(self) -> float:
    """The learning rate the last step applied."""

  def train_step(self, features, labels) -> dict[str, Any]:
    """Takes one step on this global batch, all replicas; returns its
    'loss' (the mean per-example loss) and 'gradients' {trainable name:
    gradient of that mean}, taken before the update, and 'examples'; and
    'host_call' {name: value}, what the port logs of this step by the names
    of the tensors the legacy host_call receives, if it logs any."""

  def predict(self, features) -> dict[str, np.ndarray]:
    """The counterpart of the model_fn's PREDICT outputs, by name."""

  def evaluate(self, batches: list) -> dict[str, float]:
    """Metrics over these (features, labels) batches: 'loss' (the mean
    per-example loss) and each metric by name."""


# Optional: learning_rate_at(step) -> the rate its update applies at that
# global step, its schedule read with nothing trained (the schedule check
# compares it over the whole schedule; without it, that check says so).
MODEL_MEMBERS = ('replicas', 'variables', 'trainable',
                 'set_variables', 'slots', 'set_slots', 'step_count',
                 'set_step_count', 'describe_optimizer', 'learning_rate',
                 'train_step', 'predict', 'evaluate')


@dataclasses.dataclass(frozen=True)
class ArrayPort:
  """A port as arrays (see module).

  make: (params, replicas, dropout) -> ArrayModel, from the same initial
    state each time (the seed of its initialisation is the port's). The
    harness asks for dropout=False: TF 1's masks cannot be drawn on another
    framework, so the steps are compared without dropout, as the legacy
    steps were recorded.
  export: optional (model, base_dir) -> the path of what the port serves
    with; serve: (that path, {receiver input: array}) -> {output: array},
    loaded without the model's code. Both or neither.
  averages: optional (model) -> {variable name: its moving average}, with
    set_averages (model, {name: value}); the port's counterpart of the
    model_fn's ExponentialMovingAverage.
  layer_outputs: optional (model, features) -> {layer scope: its output on
    the first example, flattened, at the layer's last call (a layer called
    again, as ALBERT's shared one)}, in the model's order; inference and
    beyond_init judge each.
  input_batch: optional (params) -> (features, labels): the first global
    batch of the port's own input pipeline, over the examples and in the
    order of the legacy input_fn given those params (the inputs check).
  programs: optional (model, features, labels) -> {part: (function,
    arguments)}: the jit-compiled functions of the training step and of
    predict, with arguments of the shapes they run on, for tpu_ready
    (pair/frameworks/arrays/tpu.py); None: tpu_ready is SKIP.
  save_weights: optional (model, directory) -> the path of the file the
    port restores from, written into that (new) directory: the model's
    variables, the optimizer's slots and step (the kit's Keras port: Keras's
    .weights.h5, its optimizer included); load_weights: (model, that path).
    Both or neither; neither: migration-convert-checkpoint writes named
    arrays (write_state), which the port reads with read_state.
  The maps are ``port.Port``'s.
  """
  make: Callable[[dict, int, bool], ArrayModel]
  # What runs it, for the output and the report: 'JAX 0.12.0.1, Keras 3.15.1'.
  framework: str = 'a port on arrays'
  export: Callable[[ArrayModel, str], str] | None = None
  serve: Callable[[str, dict], dict] | None = None
  averages: Callable[[ArrayModel], dict] | None = None
  set_averages: Callable[[ArrayModel, dict], None] | None = None
  layer_outputs: Callable[[ArrayModel, Any], dict] | None = None
  programs: Callable[[ArrayModel, Any, Any], dict] | None = None
  input_batch: Callable[[dict], tuple] | None = None
  save_weights: Callable[[ArrayModel, str], str] | None = None
  load_weights: Callable[[ArrayModel, str], None] | None = None
  variable_map: dict[str, str] | None = None
  output_map: dict[str, str] = dataclasses.field(default_factory=dict)
  metric_map: dict[str, str] = dataclasses.field(default_factory=dict)
  slot_map: dict[str, str] = dataclasses.field(default_factory=dict)
  not_compared: dict[str, str] = dataclasses.field(default_factory=dict)
  # A Keras port's fields that an ArrayPort has no use for: its summaries
  # come back from train_step ('host_call').
  host_call = None


def check_array_port(port: Any, where: str) -> ArrayPort:
  """Returns port if it follows the contract; else one line naming what
  falls short.

  Raises:
    KitError: a field of the wrong kind.
  """
  if not callable(port.make):
    raise KitError(f'--port {where}: ArrayPort.make must be a callable '
                   f'(params, replicas, dropout) -> ArrayModel (see {GUIDE})')
  for first, second in (('export', 'serve'), ('averages', 'set_averages'),
                        ('save_weights', 'load_weights')):
    if (getattr(port, first) is None) != (getattr(port, second) is None):
      raise KitError(f'--port {where}: ArrayPort.{first} and .{second} go '
                     f'together; give both or neither (see {GUIDE})')
  variable_map.check_maps(port, f'--port {where}: ArrayPort.')
  return port


def check_model(model: Any, where: str) -> ArrayModel:
  """The model make() returned, if it has every method of ArrayModel."""
  missing = [name for name in MODEL_MEMBERS if not hasattr(model, name)]
  if missing:
    raise KitError(f'{where}: the model ArrayPort.make returned '
                   f'({type(model).__name__}) lacks {", ".join(missing)}: '
                   'implement the ArrayModel protocol of '
                   f'migration_tools.pair.array_port (see {GUIDE})')
  return model


STATE_FILE = 'state-{step}.npz'
_MANIFEST = '__manifest__'


def write_state(model: ArrayModel, directory: str) -> str:
  """Writes the model's variables, the optimizer's slots and step into
  directory as named arrays (one .npz: each array under a short key, the
  names in a JSON manifest); returns the file's path. What the converter
  writes for a port without save_weights."""
  arrays, names = {}, {'variables': [], 'slots': []}
  for index, (name, value) in enumerate(model.variables().items()):
    arrays[f'v{index}'] = np.asarray(value)
    names['variables'].append(name)
  for index, (key, value) in enumerate(model.slots().items()):
    arrays[f's{index}'] = np.asarray(value)
    names['slots'].append(list(key))
  names['step'] = int(model.step_count())
  arrays[_MANIFEST] = np.array(json.dumps(names))
  path = os.path.join(directory, STATE_FILE.format(step=names['step']))
  with open(path, 'wb') as f:
    np.savez(f, **arrays)
  return path


def read_state(model: ArrayModel, path: str) -> None:
  """Sets the model's variables, slots and step from write_state's file.

  Raises:
    KitError: the file is not one write_state wrote.
  """
  try:
    # Each size the file declares checked before anything is read.
    arrays = npz_files.load(path, 'the converted state')
    names = json.loads(str(arrays[_MANIFEST]))
    variables = {name: arrays[f'v{i}']
                 for i, name in enumerate(names['variables'])}
    slots = {tuple(key): arrays[f's{i}']
             for i, key in enumerate(names['slots'])}
    step = names['step']
  except Exception as e:  # pylint: disable=broad-except
    # A cut or damaged .npz raises OSError, BadZipFile, EOFError, zlib.error
    # or ValueError; another file lacks the manifest or its keys.
    raise KitError(f'{path} is not a state the converter wrote '
                   f'({one_line(e)}); convert again') from e
  model.set_variables(variables)
  model.set_slots(slots)
  model.set_step_count(step)
