"""The passes that several checks judge, and what they share.

one_step takes the first step of a replica count's run, and learning_rate
and trajectory the rest of that run (first_step, trajectory); updates,
stepwise, host_call and dropout judge one pass at identical state on a fresh
run (resynced_steps). A pass is memoised on its Replicas, so each runs once
whichever check asks first. forward_noise measures the port's own rounding
noise on its outputs, the bar's floor for inference, beyond_init and
evaluation.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from typing import Any, Callable

import numpy as np

from kit_core.errors import Interrupted
from kit_core.errors import one_line
from migration_tools import tolerances
from migration_tools.compare import bars
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import step_record
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.context import Upstream
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import max_diff


def slots_compared(legacy, runner) -> bool:
  """Whether the optimizers' slots are compared: through the port's slot
  map, or by the same optimizer kind on both sides."""
  if runner.slot_map:  # Read by what it does: through the slot map.
    return True
  theirs = legacy.describe_optimizer()
  return theirs is not None and theirs.kind == runner.describe_optimizer().kind


def forward_noise(run: Run, runner, state: dict, ours: dict,
                  outputs_of, layers: dict | None = None,
                  layers_of=None) -> noise_lib.Forward:
  """What the port's outputs (ours, at state) move by with every kernel and
  embedding of state one unit in the last place apart (noise.forward);
  outputs_of(): the outputs again; layers, layers_of(): each layer's
  output, and again, for theirs. The port is set back to state."""
  kernels = [n for n in run.weights if np.ndim(state[n]) >= 2]
  return noise_lib.measure_forward(ours, state, kernels, runner.set_state,
                                   outputs_of, run.options.seed, layers,
                                   layers_of)


# How the bars of one_step, updates and stepwise grow with the port's own
# rounding noise (compare/noise.py), in the docs' words.
NOISE_BAR = bars.NOISE_WORDS


def repeated_step(runner, features, labels) -> dict | None:
  """The step on this batch again, in the same order, from the state the
  runner holds, which it keeps (PortSide.reordered_step(...,
  reorder=False)); None from a runner whose reordered_step takes no
  reorder (an adapter written before it)."""
  taking = inspect.signature(runner.reordered_step).parameters
  if taking.get('reorder') is None:
    return None
  return runner.reordered_step(features, labels, reorder=False)


def first_step(run: Run, replicas: Replicas) -> tuple[dict, dict]:
  features, labels = run.batches[0]
  run.progress.now(f'one_step ({replicas.label}): step 1')
  # The port's own noise on this step (compare/noise.py), first: the
  # reordered step leaves the port's state as it found it.
  replicas.memo.put('reordered first step',
                    replicas.port.reordered_step(features, labels))
  # The same step again in the same order: a port that moves its weights
  # at some calls widens no bar with it (noise.unrepeatable).
  replicas.memo.put('repeated first step',
                    repeated_step(replicas.port, features, labels))
  return (replicas.legacy.step(features, labels),
          replicas.port.step(features, labels))


def scalars(answer: dict) -> dict:
  """A step's answer without its gradients: what the trajectory keeps of
  each step, so that its memory does not grow with the steps."""
  return {k: v for k, v in answer.items() if k not in ('gradients', 'masks')}


def trajectory(run: Run, replicas: Replicas) -> tuple[list, list]:
  """Every step's answers on both sides (their losses and rates; the first
  one_step's whole)."""
  first = replicas.memo.once('first step', lambda: first_step(run, replicas),
                             'the first step raised (see one_step)')
  theirs, ours = [scalars(first[0])], [scalars(first[1])]
  try:
    for number, (features, labels) in enumerate(run.batches[1:], 2):
      run.progress.now(f'trajectory ({replicas.label}): step {number} of '
                       f'{len(run.batches)}')
      theirs.append(scalars(replicas.legacy.step(features, labels)))
      ours.append(scalars(replicas.port.step(features, labels)))
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise Upstream(f'step {len(ours) + 1} raised: {one_line(e)}') from e
  return theirs, ours


def averages_after(legacy, runner) -> dict:
  """The moving averages both sides keep (the port's through inventory's
  pairing; those it declared left out are not compared)."""
  ours = runner.averages()
  theirs = {k: v for k, v in legacy.averages().items() if k in ours}
  return {'legacy_averages': theirs, 'port_averages': ours}


def take_legacy_state(legacy, runner) -> None:
  """The port takes the legacy model's state and moving averages (for a
  check at identical weights: evaluation, serving)."""
  runner.set_state(legacy.state())
  runner.set_averages(legacy.averages())


@dataclasses.dataclass(frozen=True)
class Resynced:
  """The pass at identical state.

  per_step: each step's max difference (loss, state, slots, averages).
  losses: the legacy losses.
  steps: what each step did to each variable, slot and average
    (step_record.Step).
  host_calls: each step's (legacy, port) host_call values ({name: array};
    the port's None when it gives no Port.host_call).
  """
  per_step: np.ndarray
  losses: list
  steps: list
  host_calls: list
  # The port's own noise it measured (noise.figures).
  noise: dict = dataclasses.field(default_factory=dict)
  # Each step's legacy clipping ([norm, threshold] per clip: legacy_clipping;
  # None where the model_fn clips nothing, or the bundle predates it).
  clipping: list = dataclasses.field(default_factory=list)
  # The noise.Noise its bars allowed for (None: none).
  allowed: Any = None


# Why a dropout pass measures no noise: reordering the examples moves the
# masks with them.
_BY_ORDER = 'dropout draws its masks by the order of the examples'


def resynced_steps(run: Run, legacy, runner, label: str,
                   dropout: bool = False,
                   first_noise: noise_lib.Noise | None = None,
                   states: Callable[[int], dict] | None = None,
                   batches: list | None = None,
                   until: Callable[[dict], bool] | None = None,
                   given: Callable[[dict], Any] | None = None,
                   held_noise: noise_lib.Noise | None = None) -> Resynced:
  """Every step of the legacy trajectory at identical state: before each
  step the port takes the legacy state (weights, slots, step, averages), so
  no difference can grow.

  Args:
    dropout: take the port's step as its trainer does, all of it in its step
      function (the loss its metric records), for a dropout mask drawn once.
    first_noise: the port's noise one_step measured on the first step, from
      the same state on the same batch: taken for this pass's first step
      rather than measured again.
    states: states(number), the model state the legacy side is set to
      before step number (its slots and step as its steps left them);
      None: the state its steps left.
    batches: the batches, one per step (None: the run's).
    until: until(the legacy step's answer): True ends the pass after that
      step.
    given: with dropout, given(the legacy step's answer): a context in
      which the port takes its step (the legacy's masks handed to its
      dropout calls: Framework.masks_given).
    held_noise: with dropout, the port's own noise on the same model
      without it (one_step's, Run.step_noise), held for every step: a step
      with dropout is not taken in another order (its masks would move),
      and each tensor's bar still scales with its own rounding.
  """
  per_step, losses, steps, host_calls, trainable = [], [], [], [], set()
  clipping = []
  batches = run.batches if batches is None else batches
  rate = 0.0
  both = slots_compared(legacy, runner)
  # The port's own noise (compare/noise.py), measured at the steps up to
  # the first that moves the weights, and held for the steps after.
  noise, noise_moved = (held_noise if dropout else None), False
  for number, (features, labels) in enumerate(batches, 1):
    run.progress.now(f'{label}: step {number} of {len(batches)}')
    if states is not None:
      legacy.set_state(states(number))
    before, averages_before = _start_from_the_legacy_state(
        legacy, runner, rate if both else 0.0)
    reused = number == 1 and first_noise is not None and not dropout
    again = None if dropout or noise_moved or reused else (
        runner.reordered_step(features, labels))
    theirs = legacy.step(features, labels)
    if dropout:
      with given(theirs) if given else contextlib.nullcontext():
        answer = {'loss': runner.step_as_trained(features, labels)}
    else:
      answer = runner.step(features, labels)
    # The optimizer's variables: a run's first step answers with their
    # gradients (state moved otherwise, e.g. batch-norm statistics, stepwise
    # holds). No gradient is judged here: they go at once.
    trainable = trainable or set(theirs.get('gradients', ()))
    rate = runner.learning_rate()
    after, ours_after = legacy.state(), runner.state()
    legacy_slots = legacy.slots(rate) if both else {}
    port_slots = runner.slots(rate) if legacy_slots else {}
    averages = averages_after(legacy, runner)
    if again is not None or reused:
      noise = first_noise if reused else noise_lib.measure(
          again, answer, ours_after, port_slots, averages['port_averages'])
      noise_moved = any(np.any(after[k] != before[k]) for k in trainable)
    allowed = functools.partial(noise_lib.allowance, noise)
    theirs, answer = scalars(theirs), scalars(answer)
    ours = answer['loss']
    host_calls.append((theirs.get('host_call', {}), answer.get('host_call')))
    per_step.append(_step_diff(
        (theirs['loss'], ours), (after, ours_after),
        (legacy_slots, port_slots),
        (averages['legacy_averages'], averages['port_averages']), allowed))
    losses.append(float(theirs['loss']))
    clipping.append(theirs.get('clipping'))
    steps.append(step_record.step(
        number, before, {k: after[k] for k in trainable},
        {k: ours_after[k] for k in trainable}, legacy_slots, port_slots,
        theirs.get('learning_rate'),
        (averages_before, averages['legacy_averages'],
         averages['port_averages']), noise))
    if until is not None and until(theirs):
      break
  return Resynced(np.array(per_step), losses, steps, host_calls,
                  noise_lib.figures(noise, _BY_ORDER if dropout else ''),
                  clipping, allowed=noise)


def _start_from_the_legacy_state(legacy, runner, rate: float) -> tuple:
  """The port given the legacy state (weights, step, averages; slots at
  the last step's rate, where slots are compared and a step was taken):
  (the state, the averages) it started from."""
  before = legacy.state()
  runner.set_state(before)
  runner.set_global_step(legacy.global_step())
  if rate:
    runner.set_slots(legacy.slots(rate), rate)
  averages_before = legacy.averages()
  runner.set_averages(averages_before)
  return before, averages_before


def _step_diff(losses: tuple, states: tuple, slots: tuple, averages: tuple,
               allowed) -> float:
  """A step's largest difference, each (legacy, port) pair beyond the
  rounding of storing it and its allowance: the loss, the state after the
  step, the slots and averages where the legacy side keeps them."""
  ulps = tolerances.ONE_STEP_ULPS  # The rounding of storing the state.
  diffs = [max_diff({'loss': np.float64(losses[0])},
                    {'loss': np.float64(losses[1])}, 0, allowed('loss'))[0],
           max_diff(*states, ulps, allowed('state'))[0]]
  if slots[0]:
    diffs.append(max_diff(*slots, ulps, allowed('slots'))[0])
  if averages[0]:
    diffs.append(max_diff(*averages, ulps, allowed('averages'))[0])
  return max(diffs)


def resynced(run: Run, replicas: Replicas):
  name = f'stepwise ({replicas.label})'  # The legacy run's name, as taped.

  def compute():
    # The free run is done with (the checks on it ran before this pass;
    # those after read the passes' results): its legacy graphs go before
    # this pass builds its own (BERT-base: 4 GB more at the peak), and its
    # port run is rewound for this pass (Replicas.port_again).
    replicas.release()
    return resynced_steps(run, run.legacy(name, replicas.count,
                                          gradients=False),
                          replicas.port_again(run),
                          f'updates and stepwise ({replicas.label})',
                          first_noise=replicas.memo.get('first step noise'))
  return replicas.memo.once('resynced', compute,
                            'the pass at identical state raised (see '
                            'updates)')


def with_noise(result: CheckResult, resynced: Resynced) -> CheckResult:
  return dataclasses.replace(result, figures={**result.figures,
                                              'noise': resynced.noise})
