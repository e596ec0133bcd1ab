"""What the checks of one comparison share: its data, the state both sides
start from, the maps the early checks resolve, and the passes over the
legacy trajectory that several checks judge (``Replicas.once``).

The harness builds a ``Run`` per comparison and a ``Replicas`` per replica
count; each registered check (registry.py) gets both.
"""
from __future__ import annotations

import dataclasses
import gc
from typing import Any, Callable


from kit_core import progress as progress_lib
from kit_core import timing
from kit_core.errors import KitError
from migration_tools.pair import legacy as legacy_lib
from migration_tools.pair import frameworks
from migration_tools.pair import precision
from migration_tools.pair import side


@dataclasses.dataclass(frozen=True)
class Options:
  """The training compared.

  steps: training steps (the input_fn's batches again from the first if it
    has fewer).
  global_batch: params['batch_size'].
  eval_batches: batches the evaluation check reads, at most.
  params: the user's params for input_fn and model_fn (TPUEstimator's
    params=...); batch_size and use_tpu are added as TPUEstimator adds them.
  seed: the initial weights' seed.
  warm_start_from: the checkpoint TPUEstimator(warm_start_from=...) got;
    the legacy TRAIN graph starts from it (its trainable variables), and
    the port from the legacy start.
  beyond_init: the gain the beyond_init check scales every kernel and
    embedding of the start state up to (0: the check is off).
  legacy_flags: the legacy code's absl flags as on its command line
    (--legacy_flags); a replay sets them again, for a port that reads them.
  """
  steps: int = 100
  global_batch: int = 64
  eval_batches: int = 20
  params: dict = dataclasses.field(default_factory=dict)
  seed: int = 0
  warm_start_from: str = ''
  beyond_init: float = 2.0
  legacy_flags: str = ''


class Upstream(KitError):
  """A check cannot run because a pass it judges raised in an earlier check;
  the message says which (the ERROR's text, as is)."""


class _Memo:
  """Passes computed once and judged by several checks: a value, or the
  error it raised, by key."""

  def __init__(self):
    self._values: dict[str, Any] = {}
    self._errors: dict[str, str] = {}

  def once(self, key: str, compute: Callable[[], Any],
           failed: str = '') -> Any:
    """compute()'s value, computed on the first call. If it raised, it
    raises again, and later calls raise Upstream: its own message if it
    raised one, else failed."""
    if key in self._errors:
      raise Upstream(self._errors[key])
    if key not in self._values:
      try:
        self._values[key] = compute()
      except Upstream as e:
        self._errors[key] = str(e)
        raise
      except BaseException:
        self._errors[key] = failed or f'the {key} pass raised'
        raise
    return self._values[key]

  def get(self, key: str, default=None) -> Any:
    return self._values.get(key, default)

  def put(self, key: str, value: Any) -> None:
    self._values[key] = value


# The fields of a Run the harness gives it; each other field is left by the
# one check that declares it (registry.Check.leaves), for the checks after.
GIVEN = ('source', 'port', 'data', 'batches', 'options', 'workdir',
         'progress', 'speed', 'placement_counts', 'dots', 'ran_on', 'memo')


@dataclasses.dataclass(slots=True)
class Run:
  """One comparison: the legacy source, the port, the data (GIVEN by the
  harness) and what the early checks resolved and declared they leave
  (pairs, start, slot_map, parting, ...). It takes no other attribute."""
  source: side.LegacySource
  # The port: a port a registered framework accepts (pair/frameworks/).
  port: Any
  data: side.Data
  batches: list
  options: Options
  workdir: str
  progress: progress_lib.Progress
  # {legacy name: port name} of the model's variables (inventory).
  pairs: dict = dataclasses.field(default_factory=dict)
  # The legacy state both sides start from (inventory).
  start: dict | None = None
  # The legacy moving averages at the start, {variable: value} (inventory).
  start_averages: dict = dataclasses.field(default_factory=dict)
  # The legacy names of the trainable variables of the start (inventory).
  weights: tuple = ()
  # {legacy slot suffix: port token}, for an optimizer read by what it does.
  slot_map: dict | None = None
  # Where the layers' outputs part (compare/layers), '' if they do not.
  parting: str = ''
  # The port's outputs' own rounding noise (noise.Forward), from inference;
  # None before it ran.
  forward_noise: Any = None
  # {replica label: the port's own noise on its first step (noise.Noise,
  # or None where none was measured)}, from one_step: the bar of the
  # dropout check's steps, which measure none of their own.
  step_noise: dict = dataclasses.field(default_factory=dict)
  # speed.Options when --speed times the steps, else None.
  speed: Any = None
  # The replica counts the port runs on, in order.
  placement_counts: list = dataclasses.field(default_factory=list)
  # How the port's dots compute (its framework's precision.Dots), with the
  # rounding --emulate_precision declared, if any: made once (harness), for
  # every port run, and the one reader of the flag.
  dots: precision.Dots | None = None
  # Where the port's first run runs (the report's port_ran_on, runs_on).
  ran_on: dict = dataclasses.field(default_factory=dict)
  memo: _Memo = dataclasses.field(default_factory=_Memo)

  def legacy(self, purpose: str, shards: int = 1, draws: bool = False,
             gradients: bool = True):
    """A fresh legacy run from the start state (drawing its random numbers
    where draws is True, its first gradients compared where gradients is:
    LegacySource.runner)."""
    legacy = self.source.runner(shards, purpose, draws, gradients)
    if self.start is not None:
      legacy.set_state(self.start)
    return legacy

  @property
  def framework(self) -> frameworks.Framework:
    """The framework the port is written in (its registered adapter)."""
    return frameworks.framework_of(self.port)

  def port_runner(self, placement: Any, dropout: bool = False
                  ) -> side.PortSide:
    """A fresh port run, from the start state, its state and slots paired
    as the early checks resolved. placement: one of its framework's
    placements (Framework.placements); dropout: built with its dropout on
    (a framework that takes_masks)."""
    with timing.spent('port building'):
      return self._port_runner(placement, dropout)

  def _port_runner(self, placement, dropout: bool = False) -> side.PortSide:
    return self._from_the_start(self.framework.build_runner(
        self.port, placement, self.params(), self.batches, self.dots,
        dropout))

  def port_rewound(self, runner: side.PortSide) -> side.PortSide | None:
    """runner (a port run of this comparison) as port_runner would build
    it again, its compiled steps kept (PortSide.rewind); None where it
    cannot be rewound."""
    with timing.spent('port building'):
      return self._from_the_start(runner) if runner.rewind() else None

  def _from_the_start(self, runner: side.PortSide) -> side.PortSide:
    """runner at the start state, paired as the early checks resolved."""
    if self.pairs:
      runner.use_map(self.pairs)
      runner.set_state(self.start)
      runner.set_averages(self.start_averages)
    if self.slot_map is not None:
      runner.use_slot_map(self.slot_map)
    return runner

  def params(self) -> dict:
    """The model_fn's params, as TPUEstimator gives them."""
    return legacy_lib.model_params(self.options.params,
                                   self.options.global_batch)


@dataclasses.dataclass
class Replicas:
  """One replica count's run: the legacy run taken as on that many cores,
  the port on its placement (a Keras port's strategy, an ArrayPort's
  replica count), and the passes its checks share.

  legacy and port are None for the checks that run after the replica runs
  (registry.AFTER_EACH), which build their own, and for those after the
  pass at identical state (updates), which releases them to build its own:
  those read describe() and the passes' results in memo.
  """
  label: str
  placement: Any
  legacy: Any = None
  port: Any = None
  memo: _Memo = dataclasses.field(default_factory=_Memo)
  # The port run last handed out, kept for port_again.
  _spare: Any = None

  def describe(self) -> dict:
    """The legacy run's describe_run(), asked once: it holds for the run,
    and stays known when the run is released."""
    return self.memo.once('describe_run', lambda: self.legacy.describe_run())

  def release(self, described: bool = True) -> None:
    """Lets the legacy run and the port go (their graphs, models and
    slots: the model a few times over), for a pass that builds its own;
    the checks after it read what the passes left in memo, and describe()
    (read first unless described is False: the replica count is over)."""
    if described:
      self.describe()
      self._spare = self.port or self._spare
    else:
      self._spare = None
    self.legacy = self.port = None
    gc.collect()

  def port_again(self, run: Run) -> side.PortSide:
    """A port run on this placement from the start state, for a pass of
    its own: this count's last one (its first run, or the pass before's)
    rewound, as building it again would give but with its compiled steps
    kept (PortSide.rewind); else a fresh one. port is None after: the run
    handed out may be the first one."""
    runner, self.port, self._spare = self.port or self._spare, None, None
    rewound = None if runner is None else run.port_rewound(runner)
    if rewound is None:
      # Gone before the next is built: the model is held once.
      runner = None
      gc.collect()
      rewound = run.port_runner(self.placement)
    self._spare = rewound
    return rewound

  @property
  def count(self) -> int:
    # The label is the count's (frameworks.label): the placement is the
    # framework's own, and only its adapter reads it.
    return int(self.label.split()[0])
