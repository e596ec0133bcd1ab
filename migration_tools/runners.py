"""The runners' interface: what the comparison asks of each side.

The legacy side is a ``LegacySide``: ``legacy.LegacyRunner`` runs the
model_fn live (TF 2.15); ``golden.RecordingRunner`` wraps it and writes each
answer to a tape; ``golden.ReplayedRunner`` answers from the tape on any
TensorFlow. The port side is a ``PortSide``: ``port_runner.PortRunner``. The
harness is typed against these Protocols, and ``golden`` makes its recording
and replaying methods from ``LegacySide`` itself (``QUESTIONS``): a question
added here reaches every legacy runner, and tests/tools/test_runners.py
fails until each runner answers it.
"""
import dataclasses
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from migration_tools import optimizers


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
    return len(tf.nest.flatten(self.batches[0][0])[0])


def split_element(element):
  """(features, labels) of a dataset element; labels None if absent."""
  if isinstance(element, tuple) and len(element) == 2:
    return element
  return element, None


class LegacySide(Protocol):
  """One legacy run: the model_fn trained step by step on `shards` cores.

  Every method but set_state is a question whose answer depends only on the
  legacy code, its data and the questions asked before it, so a recording
  of the answers replays them (golden.py).
  """
  shards: int

  def set_state(self, values: dict[str, np.ndarray]) -> None:
    """Starts the run from these model variables (by legacy name)."""

  def state(self) -> dict[str, np.ndarray]:
    """The model's variables, trainable or not, by name."""

  def slots(self) -> dict[tuple, np.ndarray]:
    """{(variable name, canonical slot name): value} of the optimizer."""

  def global_step(self) -> int:
    """The steps taken."""

  def describe_optimizer(self) -> optimizers.Description | None:
    """The optimizer the training graph applies, None if unknown."""

  def describe_run(self) -> dict[str, Any]:
    """How this run takes its steps and where it started: 'reference'
    (e.g. 'as on 2 TPU cores', or why on the whole batch), 'warm_start'
    ({checkpoint: variables initialised from it}), 'optimizer' (its class)
    and 'rate_source' (where its rate is read, or why it cannot be)."""

  def predict(self, features) -> dict[str, np.ndarray]:
    """The PREDICT outputs at the current state."""

  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    """Each layer's output on the first example, by name scope, in the
    model's order (compare/layers.py)."""

  def evaluate(self, batches: list) -> dict[str, float]:
    """The EVAL metrics and mean loss over batches."""

  def receiver_spec(self, serving_input_fn) -> dict[str, tf.TensorSpec]:
    """The serving receiver's tensors, by name."""

  def serve(self, serving_input_fn, base_dir: str,
            inputs: dict) -> dict[str, np.ndarray]:
    """The served outputs of the current state's export on inputs."""

  def step(self, features, labels) -> dict[str, Any]:
    """Takes one training step: its loss, gradients and learning rate."""


class LegacySource(Protocol):
  """Where the legacy side comes from: run live, or replayed."""

  # The serving_input_receiver_fn to hand to receiver_spec and serve; None:
  # no served-predictions check.
  serving_input_fn: Any

  def data(self) -> Data:
    """The legacy input_fn's batches."""

  def runner(self, shards: int, purpose: str) -> LegacySide:
    """A fresh legacy run on `shards` cores, named by purpose."""

  def timing_runner(self) -> Any:
    """A fresh legacy run to time (train_only), or None when the legacy
    side is not run here (replayed from a bundle)."""


class PortSide(Protocol):
  """The port under a strategy, fed the legacy batches."""

  strategy: tf.distribute.Strategy
  # {legacy slot suffix: port token} once use_slot_map gave one, else None.
  slot_map: dict[str, str] | None

  def shapes(self) -> dict[str, tuple]:
    """The model's variables' shapes, by port name."""

  def use_map(self, pairs: dict[str, str]) -> None:
    """Pairs legacy names with port names for state and slots."""

  def state(self) -> dict[str, np.ndarray]:
    """The model's variables, by legacy name."""

  def set_state(self, legacy_values: dict[str, np.ndarray]) -> None:
    """Sets the model's variables from legacy-named values."""

  def describe_optimizer(self) -> optimizers.Description:
    """The port's optimizer, as the checks compare it."""

  def slot_tokens(self) -> list[str]:
    """The names its optimizer gives its slots (e.g. 'adam_m'), in order."""

  def use_slot_map(self, slot_map: dict[str, str]) -> None:
    """Pairs slots by {legacy slot suffix: port token} from now on."""

  def slots(self, rate: float) -> dict[tuple, np.ndarray]:
    """The optimizer's slots in the legacy convention, by legacy name."""

  def set_slots(self, legacy_values: dict[tuple, np.ndarray],
                rate: float) -> None:
    """Sets the optimizer's slots from legacy-convention values."""

  def global_step(self) -> int:
    """The optimizer's step."""

  def set_global_step(self, step: int) -> None:
    """Sets the optimizer's step."""

  def predict(self, features) -> dict[str, np.ndarray]:
    """The port's predictions at the current state."""

  def layer_outputs(self, features) -> dict[str, np.ndarray]:
    """Each layer that owns variables: its output on the first example, by
    the scope of its variables (compare/layers.py)."""

  def step(self) -> dict:
    """Takes one training step on the next batch: its loss and gradients."""

  def learning_rate(self) -> float:
    """The learning rate of the next step."""

  def train_loss(self) -> float:
    """The last step's training loss."""

  def evaluate(self, batches: list) -> dict[str, float]:
    """The trainer's metrics over batches."""

  def first_pipeline_batch(self):
    """The first (features, labels) the port's own input pipeline gives."""

  def export(self, base_dir: str) -> str:
    """Exports the current state; returns the SavedModel's path."""


def members(protocol: type) -> list[str]:
  """The methods a Protocol declares, in order."""
  return [name for name, value in vars(protocol).items()
          if callable(value) and not name.startswith('_')]


# What golden records and replays: every method of LegacySide but
# set_state, which only restores a run's start.
QUESTIONS = tuple(name for name in members(LegacySide) if name != 'set_state')


def missing(runner_class: type, protocol: type) -> list[str]:
  """The methods of protocol that runner_class does not define itself (a
  subclass of the Protocol would otherwise inherit its empty stubs)."""
  return [name for name in members(protocol)
          if getattr(runner_class, name, None) is getattr(protocol, name)
          or not callable(getattr(runner_class, name, None))]
