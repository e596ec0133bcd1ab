"""One interface for both sides of a pair: what the checks ask of each.

``Side`` asks every question both sides answer, with one signature: the
state and slots by legacy name, the step on a batch, predictions, layers,
metrics, served outputs. ``LegacySide`` adds what only the model_fn has (its
serving receiver); ``PortSide`` what only the port has (pairing its names,
setting its slots and step, its own input pipeline, its step timed).

  legacy.LegacyRunner      LegacySide: the model_fn, as TPUEstimator ran it
  recorded.RecordingRunner LegacySide: a LegacySide, each answer taped
  recorded.ReplayedRunner  LegacySide: the answers of a tape
  frameworks/keras_tf/runner.PortRunner, frameworks/arrays/runner.ArrayRunner
                           PortSide: the port's pieces, run by its framework

They are abstract base classes: a runner that leaves a question unanswered
cannot be made (TypeError names it), and ``QUESTIONS`` (what a tape records
and replays) is read from ``LegacySide`` itself.
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
from typing import Any, Protocol

import numpy as np

from kit_core.errors import KitError
from kit_core.lazy import tensorflow as tf
from migration_tools.pair import optimizers


@dataclasses.dataclass
class Data:
  """Batches of a legacy input_fn: numpy (features, labels) in order.

  spec: the input_fn's (features spec, labels spec or None); None when the
  batches were replayed from a bundle.
  """
  spec: tuple | None
  batches: list

  @property
  def global_batch(self) -> int:
    return batch_size(self.batches[0][0])


def first_array(structure):
  """The first array of an array, or of a dict or tuple of them, in
  tf.nest's order (a dict's keys sorted): no TensorFlow needed."""
  while isinstance(structure, (dict, list, tuple)):
    structure = (structure[sorted(structure)[0]] if isinstance(structure, dict)
                 else structure[0])
  return structure


def batch_size(features) -> int:
  """The examples in a batch of features (an array or a structure)."""
  return len(first_array(features))


def check_in_order(batches: list, taken: int, features, labels) -> None:
  """A port runner feeds the legacy batches in order: the batch a step is
  asked to take must be the next one (taken so far: `taken`).

  Raises:
    KitError: another batch was asked.
  """
  expected = batches[taken % len(batches)]
  if features is not expected[0] or labels is not expected[1]:
    raise KitError('the port runner takes the legacy batches in the order '
                   f'it was given; step {taken + 1} was asked another batch')


def example_order(examples: int, replicas: int, seed: int = 0) -> np.ndarray:
  """A permutation of a global batch that keeps each example in its
  replica's share (consecutive shares, as the batch is split): per-replica
  statistics (batch norm) stay the same."""
  share = examples // replicas
  generator = np.random.default_rng(seed)
  return np.concatenate([r * share + generator.permutation(share)
                         for r in range(replicas)] +
                        [np.arange(replicas * share, examples)])


def reordered(structure: Any, index: np.ndarray) -> Any:
  """structure (an array, or a dict, list or tuple of them) with its
  examples taken in index's order."""
  if isinstance(structure, dict):
    return {k: reordered(v, index) for k, v in structure.items()}
  if isinstance(structure, (list, tuple)):
    return type(structure)(reordered(v, index) for v in structure)
  if structure is None:
    return None
  return np.asarray(structure)[index]


def split_element(element):
  """(features, labels) of a dataset element; labels None if absent."""
  if isinstance(element, tuple) and len(element) == 2:
    return element
  return element, None


class Side(abc.ABC):
  """One side of a pair in one run, trained step by step on the batches of
  the legacy input_fn, in order. State is named by the legacy names."""

  @property
  @abc.abstractmethod
  def replicas(self) -> int:
    """The replicas (TPU cores) its steps are taken as on."""

  @abc.abstractmethod
  def state(self) -> dict[str, np.ndarray]:
    """The model's variables, trainable or not, by legacy name."""

  @abc.abstractmethod
  def set_state(self, values: dict[str, np.ndarray]) -> None:
    """Sets the model's variables from legacy-named values."""

  @abc.abstractmethod
  def slots(self, rate: float) -> dict[tuple, np.ndarray]:
    """{(variable name, canonical slot name): value} of the optimizer, in the
    TF 1 convention; rate: the learning rate a port's slots are converted
    with (the legacy side's are in that convention already)."""

  @abc.abstractmethod
  def averages(self) -> dict[str, np.ndarray]:
    """{variable's legacy name: its moving average}: the legacy model_fn's
    tf.train.ExponentialMovingAverage shadows, the port's averages
    (Port.averages, or its Keras optimizer's use_ema); {} if none."""

  @abc.abstractmethod
  def global_step(self) -> int:
    """The steps taken."""

  @abc.abstractmethod
  def describe_optimizer(self) -> optimizers.Description | None:
    """The optimizer, as the checks compare it; None if the kit does not
    read it by its ops."""

  @abc.abstractmethod
  def describe_run(self) -> dict[str, Any]:
    """How this run takes its steps and where it started: 'reference'
    (e.g. 'as on 2 TPU cores', or why on the whole batch), 'warm_start'
    ({checkpoint: variables initialised from it}), 'optimizer' (its class),
    'rate_source' (where its rate is read, or why it cannot be); the legacy
    side's also 'evaluates_with' and 'exports' (what its evaluation and its
    export restore: legacy_state.EVALUATES_WEIGHTS or EVALUATES_AVERAGES),
    'random_ops' and 'clipping' (each clip the model_fn made:
    legacy_clipping.Clip.to_json)."""

  @abc.abstractmethod
  def step(self, features, labels) -> dict[str, Any]:
    """Takes one training step on this batch (the next one): its 'loss',
    'gradients' (by legacy name, summed over replicas), 'learning_rate' and
    'examples'; the legacy side's also 'clipping' where the model_fn clips
    ([norm, threshold] per clip, in describe_run's order)."""

  @abc.abstractmethod
  def predict(self, features) -> dict[str, np.ndarray]:
    """The PREDICT outputs at the current state, by name."""

  @abc.abstractmethod
  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    """Each layer's output on the first example, by name scope, in the
    model's order, at the layer's last call (compare/layers.py)."""

  @abc.abstractmethod
  def evaluate(self, batches: list) -> dict[str, float]:
    """The eval metrics and mean loss over batches."""

  @abc.abstractmethod
  def serve(self, base_dir: str, inputs: dict) -> dict[str, np.ndarray]:
    """Exports the current state under base_dir, loads the SavedModel back
    and returns its serving outputs on inputs."""


# The global steps a learning-rate schedule is read at (the schedule check):
# every step to 20, then about 15% apart to 10 million, past the end of a
# TPU-era schedule (BERT pre-training's 1M steps); a float32 step is exact
# there.
SCHEDULE_STEPS = tuple(sorted(set(range(21)) | {
    int(round(20 * 1.15 ** k)) for k in range(1, 95)
    if 20 * 1.15 ** k <= 1e7}))


class LegacySide(Side):
  """The model_fn's side. Every question but set_state has an answer that
  depends only on the legacy code, its data and the questions asked before
  it, so a recording of the answers replays them (recorded.py)."""

  @abc.abstractmethod
  def train_variables(self) -> dict[str, dict]:
    """Every global variable of the TRAIN graph: {name: {'role' (a role of
    legacy_state), 'moved' (whether the train_op writes it), 'shape'}}; a
    moving average's also 'of' (its variable), 'decay' and 'num_updates'
    (whether TF 1 lowers the decay early on by the step)."""

  @abc.abstractmethod
  def receiver_spec(self) -> dict[str, tf.TensorSpec]:
    """The serving receiver's tensors, by name."""

  @abc.abstractmethod
  def serving_inputs(self, data: Data, seed: int) -> dict[str, np.ndarray]:
    """Inputs for both sides' serving signatures, by receiver tensor: the
    user's (--legacy_serving_inputs), else made from the data
    (serving.inputs)."""

  @abc.abstractmethod
  def evaluate_weights(self, batches: list) -> dict[str, float]:
    """The eval metrics on the model's weights themselves, where evaluate
    gives them on what the Estimator restores (a scaffold's Saver may put
    the moving averages in their place): how a port that evaluates its raw
    weights is told apart."""

  def schedule(self) -> dict[str, list]:
    """The learning rate its step applies at each global step of
    SCHEDULE_STEPS: {'steps': [...], 'rates': [...]}; {} where its rate
    cannot be read. This one: none."""
    return {}


class LegacySource(Protocol):
  """Where the legacy side comes from: run live, or replayed."""

  # Whether the legacy side serves (a serving_input_receiver_fn was given,
  # or recorded): the served-predictions check runs.
  serving: bool

  def data(self) -> Data:
    """The legacy input_fn's batches."""

  def runner(self, shards: int, purpose: str, draws: bool = False,
             gradients: bool = True) -> LegacySide:
    """A fresh legacy run on `shards` cores, named by purpose; its training
    step draws its random numbers only where draws is True (else its random
    masks are switched off: pair/random_ops.py). gradients: whether its
    first step's gradients are compared (one_step), or only their names
    read (the passes at identical state), which a recording then keeps
    alone."""

  def timing_runner(self) -> Any:
    """A fresh legacy run to time (train_only), or None when the legacy
    side is not run here (replayed from a bundle)."""


class PortSide(Side):
  """The port's side: its pieces under a strategy, fed the legacy batches.
  What only it answers: how its names pair with the legacy ones, its
  optimizer's slots and step set, and its own pipeline and training."""

  strategy: tf.distribute.Strategy
  # {legacy slot suffix: port token} once use_slot_map gave one, else None.
  slot_map: dict[str, str] | None

  def reordered_step(self, features, labels, reorder: bool = True
                     ) -> dict | None:
    """The step on this batch (the one the next step takes) with its
    examples in another order within each replica's share
    (compare/noise.py), from the state it holds, which it keeps after: the
    answer (loss, gradients by legacy name) and the 'state', 'slots' (at
    the step's rate) and 'averages' the step left. None where it cannot
    take a batch out of the legacy order (this one's). reorder=False: the
    same, its examples in their own order (the same step again)."""
    del features, labels, reorder
    return None

  def rewind(self) -> bool:
    """Back to the port as it was built: every variable it made then (its
    model's, optimizer's, trainer's) set to its value then, the next step
    taking the first batch again, its compiled steps kept (what building it
    again would spend most of its time on). False, with nothing changed,
    where it cannot (this one's): the caller builds a fresh one."""
    return False

  def own_draws(self) -> dict | None:
    """The random numbers the port's own steps drew outside its framework's
    dropout: {'switched_off': {call site: rule}, 'left': {call site: the
    draw}}; None where its framework does not read them."""
    return None

  def at_deployed_precision(self) -> contextlib.AbstractContextManager:
    """A scope in which it computes its dots as deployed on its device
    (or at the precision emulated), not at the highest precision it
    computes in for every other question. It gives the precision.Dots it
    computes with (their ``rounded`` tally), or None. This one: a side that
    computes float32 wherever the kit runs it."""
    return contextlib.nullcontext()

  @abc.abstractmethod
  def shapes(self) -> dict[str, tuple]:
    """The model's variables' shapes, by port name."""

  @abc.abstractmethod
  def use_map(self, pairs: dict[str, str]) -> None:
    """Pairs legacy names with port names for state and slots."""

  @abc.abstractmethod
  def slot_tokens(self) -> list[str]:
    """The names its optimizer gives its slots (e.g. 'adam_m'), in order."""

  @abc.abstractmethod
  def use_slot_map(self, slot_map: dict[str, str]) -> None:
    """Pairs slots by {legacy slot suffix: port token} from now on."""

  @abc.abstractmethod
  def set_slots(self, values: dict[tuple, np.ndarray], rate: float) -> None:
    """Sets the optimizer's slots from TF 1-convention values."""

  @abc.abstractmethod
  def set_global_step(self, step: int) -> None:
    """Sets the optimizer's step."""

  @abc.abstractmethod
  def set_averages(self, values: dict[str, np.ndarray]) -> None:
    """Sets the moving averages it has from {legacy name: value}."""

  @abc.abstractmethod
  def learning_rate(self) -> float:
    """The learning rate of the last step."""

  def rates_at(self, steps: list[int]) -> list[float] | None:
    """The learning rate its step would apply at each of these global
    steps (its schedule read, nothing trained), or None where it cannot be
    read. This one: none."""
    del steps
    return None

  @abc.abstractmethod
  def step_as_trained(self, features, labels) -> float:
    """Takes the step on this batch all inside the port's own step function
    and returns the loss its metric recorded (one dropout mask)."""

  @abc.abstractmethod
  def first_pipeline_batch(self):
    """The first (features, labels) the port's own input pipeline gives."""

  @abc.abstractmethod
  def train_window(self, steps: int) -> None:
    """steps training steps in one call of the port's train_steps."""


def members(side: type) -> list[str]:
  """The questions an interface declares, in order."""
  return [name for name in dir(side) if not name.startswith('_') and
          getattr(getattr(side, name), '__isabstractmethod__', False)]


# What a tape records and replays: every question of LegacySide but
# set_state, which only restores a run's start.
QUESTIONS = tuple(sorted(
    name for name in LegacySide.__abstractmethods__
    if name not in ('set_state', 'replicas')))
