"""The framework a port is written in, as one registered adapter.

The harness and the converter ask the same questions of every port: which
devices its replica counts run on, how its runs are built and seeded,
whether its dropout can be aligned with TF 1's, where it ran and at what
precision. Each framework answers them in one ``Framework`` subclass,
registered once (``register``); ``framework_of(port)`` finds the adapter
that accepts a port, as compare/registry.py finds the checks. The kit's own
are in their folders: ``keras_tf/`` (a ``port.Port`` under tf.distribute),
``arrays/`` (an ``array_port.ArrayPort``: JAX, Keras 3 on JAX, ...) and
``pytorch/`` (a ``TorchPort``, on the arrays adapter).
"""
from __future__ import annotations

import abc
import contextlib
import inspect
import warnings
from typing import Any, Iterator

from kit_core import progress as progress_lib
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import one_line
from migration_tools.pair import loading
from migration_tools.pair import precision
from migration_tools.pair import runs_on
from migration_tools.pair.frameworks import tpu


class Framework(abc.ABC):
  """What the kit asks of the framework a port is written in."""

  # A short name for messages and the report: 'keras_tf', 'arrays'.
  name: str = ''
  # Whether its ports run on the TensorFlow of this process: their
  # checkpoints are TensorFlow's, and the converter's --keras2_dir and a
  # --verify beside the live model_fn apply to them.
  on_tensorflow: bool = False
  # What a port of it is, for the line that refuses another object.
  contract: str = ''
  # Its name in a user's words, for the lines and help that list the
  # frameworks (read from the registry, never retyped): 'PyTorch'.
  title: str = ''
  # How seeded() seeds a run, in the report's words ('seeded').
  seeds_with: str = ''

  @abc.abstractmethod
  def accepts(self, port: Any) -> bool:
    """Whether port is one of this framework's (its contract's type)."""

  @abc.abstractmethod
  def check(self, port: Any, where: str) -> Any:
    """port if it follows this framework's contract.

    Raises:
      KitError: one line naming what falls short; where names the port.
    """

  @abc.abstractmethod
  def describe(self, port: Any) -> str:
    """What runs the port, for its line and the report: 'TensorFlow
    2.21.0, Keras 3', 'JAX 0.12.0.1, Keras 3.15.1'."""

  @abc.abstractmethod
  def placements(self, counts: list[int], progress: progress_lib.Progress,
                 skipped: dict[str, str]) -> dict[str, Any]:
    """{label: placement} for each replica count it can run here, labelled
    by ``label(count)``; a count it cannot is said in one line to progress
    and put in skipped {label: why}."""

  @abc.abstractmethod
  def runner(self, port: Any, placement: Any, params: dict, batches: list,
             dots: precision.Dots | None = None):
    """A fresh run of the port on placement (a side.PortSide), its dots
    set by dots (this framework's ``dots()``; None: as its device does)."""

  def build_runner(self, port: Any, placement: Any, params: dict,
                   batches: list, dots: precision.Dots,
                   dropout: bool = False):
    """runner(), with dots where it takes them. An adapter written before
    runner() took dots is still run, as it was, with a DeprecationWarning
    that says what to add. dropout: the port built with its dropout on
    (only for a framework that takes_masks)."""
    if dropout:
      return self.runner(port, placement, params, batches, dots=dots,
                         dropout=True)
    if 'dots' in inspect.signature(self.runner).parameters:
      return self.runner(port, placement, params, batches, dots=dots)
    warnings.warn(
        f'{type(self).__name__}.runner(port, placement, params, batches) '
        'takes no dots: add dots=None and hand them to the runner '
        '(migration_tools/pair/frameworks/base.py, Framework.runner); '
        'without them its ports run at their device\'s own precision',
        DeprecationWarning, stacklevel=2)
    return self.runner(port, placement, params, batches)

  def dots(self, emulate: precision.Rounding | None = None) -> precision.Dots:
    """How its ports' dots are set to the highest precision and to the
    deployed one; emulate: the rounding --emulate_precision declared.

    Raises:
      KitError: emulate is given, and this framework cannot emulate one.
    """
    if emulate is not None:
      raise KitError(f'--emulate_precision rounds the dots of a port on '
                     f'{titles(emulating())}; a {self.title or self.name} '
                     'port runs at its device\'s own precision: leave the '
                     'flag out')
    return precision.Dots()

  @abc.abstractmethod
  def seeded(self, seed: int) -> contextlib.AbstractContextManager:
    """A scope in which runs are built seeded, and with dropout off where
    the framework's dropout can be switched off while building."""

  @abc.abstractmethod
  def dropout_unaligned(self) -> str:
    """Why this framework's dropout masks cannot be drawn as TF 1 drew
    them, or '' where they can (the dropout check then runs)."""

  # Whether the dropout check hands the legacy step's masks to the port's
  # dropout calls (masks_given), its port built with dropout on.
  takes_masks = False

  # Why a port's rate at a given step cannot be read (PortSide.rates_at
  # gave None), and what to do: the schedule check's line.
  rates_unread = 'give its model learning_rate_at(step) (docs/MIGRATION.md)'

  def masks_given(self, masks: list, names: list[str]
                  ) -> contextlib.AbstractContextManager:
    """A scope in which the port's dropout calls take masks (one step's,
    in order: pair/masks.Handed) in place of their own draws, and raise
    masks.DropoutMismatch where they do not pair; asked only where
    takes_masks."""
    raise NotImplementedError(f'{self.name} takes no masks')

  def dropout_at_inference(self) -> contextlib.AbstractContextManager:
    """A scope that gives the list of the dropout calls that draw
    ('file.py:12') while the port predicts: asked by the dropout check
    after its steps, where it ran."""
    raise NotImplementedError(f'{self.name} does not watch its dropout')

  def aligned_draws(self) -> contextlib.AbstractContextManager:
    """A scope in which the legacy graph and the port's run, both built
    inside it, draw the same random numbers at the same step (their random
    ops seeded alike): the dropout check's, asked only where
    dropout_unaligned() is ''."""
    raise NotImplementedError(
        f'{self.name} gives no aligned draws: dropout_unaligned() is \'\' '
        'only where aligned_draws() gives a scope')

  @abc.abstractmethod
  def tpu_ready(self, port: Any, params: dict, batches: list,
                progress: progress_lib.Progress) -> tpu.Readiness:
    """Whether the port's step and predict compile for a TPU, as this
    framework compiles for one, checked on the CPU: built afresh on one
    replica, fed the first of the legacy batches (tpu.py)."""

  def save_state(self, port: Any, model: Any, directory: str) -> str:
    """Writes a converted model's state (variables, optimizer slots and
    step) into the new directory, as the port restores it; returns the
    file's path. For the frameworks not on TensorFlow, whose checkpoints
    the converter writes through the port's model (checkpoint/arrays.py)."""
    raise KitError(f'the converter writes a {self.name} port\'s checkpoint '
                   'with TensorFlow, not through save_state')

  def load_state(self, port: Any, model: Any, path: str) -> None:
    """Restores save_state's file into a model built by the port."""
    raise KitError(f'the converter verifies a {self.name} port\'s '
                   'checkpoint with TensorFlow, not through load_state')

  @abc.abstractmethod
  def ran_on(self, port: Any, runner: Any, placement: Any,
             counts: list[int], batches: list) -> dict[str, Any]:
    """Where the port's first run (runner, on placement) runs: the report's
    'port_ran_on' (migration_tools/pair/runs_on.py)."""


# '1 replica', '2 replicas': a replica count's label in every check.
label = runs_on.replicas_label


_REGISTRY: list[Framework] = []


def register(framework: Framework) -> Framework:
  """Adds a framework; of those that accept a port, the most derived is
  its (framework_of)."""
  if any(f.name == framework.name for f in _REGISTRY):
    raise ValueError(f'a framework named {framework.name!r} is registered '
                     'already')
  _REGISTRY.append(framework)
  return framework


def registered() -> list[Framework]:
  return list(_REGISTRY)


def emulating() -> list[Framework]:
  """The registered frameworks that emulate a device's rounding (their
  dots() takes one)."""
  return [f for f in _REGISTRY if type(f).dots is not Framework.dots]


def titles(which: list[Framework]) -> str:
  """'A, B or C': the frameworks' titles, in the order registered."""
  names = [f.title or f.name for f in which]
  return ' or '.join([', '.join(names[:-1]), names[-1]] if len(names) > 2
                     else names)


def framework_of(port: Any, where: str = '') -> Framework:
  """The registered framework that accepts port.

  Raises:
    KitError: none does; where names the port's --port for the message.
  """
  accepting = [f for f in _REGISTRY if f.accepts(port)]
  for framework in accepting:
    # The most specific: an adapter built on another (PyTorch's on the
    # arrays adapter) answers for its own ports.
    if not any(other is not framework and isinstance(other, type(framework))
               for other in accepting):
      return framework
  contracts = ' or '.join(f.contract for f in _REGISTRY)
  raise KitError(f'--port {where or "(the port)"} returned a '
                 f'{type(port).__name__}, not a {contracts}; return '
                 'Port(build_model=..., ...) (see docs/MIGRATION.md, "Plug '
                 'your own pair in")')


def load_port(spec: str) -> Any:
  """Calls the function --port names and checks what it returns against
  its framework's contract.

  Raises:
    KitError: it cannot be loaded, it raises, no framework takes what it
      returns, or that breaks the contract.
  """
  factory = loading.load_callable(spec, '--port')
  try:
    port = factory()
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'--port {spec} raised {one_line(e)}') from e
  return framework_of(port, spec).check(port, spec)


@contextlib.contextmanager
def nothing() -> Iterator[None]:
  yield
