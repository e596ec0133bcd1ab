"""The kit's checks, registered in the order they run (registry.py).

Each unit drives both sides for its check and hands what they computed to
its judge (checks.py and the modules beside it), which holds the bar
(tolerances.py) and writes the hint. Several checks judge one pass over
the legacy trajectory: one_step takes the first step, learning_rate and
trajectory the rest of that run; updates takes every step at identical
state on a fresh run, and stepwise judges the same steps. A pass that raised
makes the checks after it ERRORs that name the check which has the cause.

Order matters beyond the report: a legacy graph built in this process makes
the Keras models made before it unusable, so the checks of a run come
before the next run's legacy graph (evaluation and serving before updates).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import time

import numpy as np

from kit_core import timing
from kit_core.errors import Interrupted
from kit_core.errors import one_line
from kit_core.lazy import tensorflow as tf
from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare import checks
from migration_tools.compare import drift
from migration_tools.compare import layers
from migration_tools.compare import noise as noise_lib
from migration_tools.compare import speed as speed_lib
from migration_tools.compare import updates
from migration_tools.compare.checks import CheckResult
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.context import Upstream
from migration_tools.compare.registry import AFTER
from migration_tools.compare.registry import AFTER_EACH
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import bar_text
from migration_tools.compare.registry import EACH
from migration_tools.compare.registry import ONCE
from migration_tools.compare.registry import register
from migration_tools.pair import legacy_state
from migration_tools.pair import optimizers
from migration_tools.pair import precision
from migration_tools.pair import variable_map


def _slots_compared(legacy, runner) -> bool:
  if runner.slot_map:  # Read by what it does: through the slot map.
    return True
  theirs = legacy.describe_optimizer()
  return theirs is not None and theirs.kind == runner.describe_optimizer().kind


# inventory ------------------------------------------------------------------

def inventory(run: Run, replicas: Replicas) -> CheckResult:
  """Pairs the variables (given or inferred map); on a pass both sides
  start from the legacy state."""
  legacy, runner = replicas.legacy, replicas.port
  theirs = legacy.state()
  resolved = variable_map.resolve(
      {k: v.shape for k, v in theirs.items()}, runner.shapes(),
      run.port.variable_map)
  runner.use_map(resolved.pairs)
  ours = runner.state()
  train_variables = legacy.train_variables()
  result = checks.inventory(theirs, ours, resolved.by_order(),
                            replicas.describe()['warm_start'],
                            train_variables, run.port.not_compared,
                            runner.averages(),
                            replicas.describe().get('random_ops'))
  if result.passed:
    run.pairs, run.start = resolved.pairs, theirs
    run.weights = tuple(n for n, e in train_variables.items()
                        if e['role'] == legacy_state.WEIGHTS and n in theirs)
    run.start_averages = legacy.averages()
    runner.set_state(theirs)
    runner.set_averages(run.start_averages)
  return result


register(Check(
    'inventory', 'every legacy variable (weights, batch-norm statistics) '
    'pairs with one port variable of the same shape; every other variable '
    'the legacy train_op writes (slots, step, moving averages, counters) is '
    'compared by a check, or declared left out (`Port.not_compared`); the '
    'legacy step draws no random number the kit cannot switch off (see '
    '"Random numbers")', ONCE,
    inventory,
    needs=('legacy.state', 'legacy.describe_run', 'legacy.train_variables',
           'legacy.averages', 'port.averages', 'port.set_averages',
           'port.shapes',
           'port.use_map', 'port.state', 'port.set_state'),
    bar='exact', gate='inventory failed: the two sides cannot start a step '
    'from one state (its line says why)'))


# optimizer ------------------------------------------------------------------

def optimizer(run: Run, replicas: Replicas) -> CheckResult:
  """Kind and hyper-parameters where both sides' optimizers are in the
  tables; else the slot map its updates and slots are compared through. On
  either reading, the value each slot starts at."""
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = legacy.describe_optimizer(), runner.describe_optimizer()
  by_tables = theirs is not None and ours is not None and (
      ours.kind in optimizers.KERAS_KINDS)
  if not by_tables:
    slot_map = optimizers.resolve_slot_map(
        optimizers.slot_tokens(legacy.slots(0.0)), runner.slot_tokens(),
        run.port.slot_map)
    run.slot_map = slot_map.pairs
    runner.use_slot_map(slot_map.pairs)
  # Before any step; a slot a rate scales (momentum's) starts at 0 on both
  # sides, whatever the rate it is read at.
  starts = optimizers.initial_slot_differences(
      legacy.slots(0.0), runner.slots(1.0)) if (
          not by_tables or theirs.kind == ours.kind) else []
  if by_tables:
    return checks.optimizer(theirs, ours, starts)
  return checks.optimizer_by_behaviour(replicas.describe(), ours, slot_map,
                                       theirs, starts)


register(Check(
    'optimizer', 'kind and hyper-parameters, read from the legacy graph\'s '
    'apply ops, against the Keras optimizer\'s config; where either side\'s '
    'is not in the tables (a TF 1 subclass, a hand-written Keras optimizer, '
    'another framework\'s), its slots pair one to one and `updates` judges '
    'what it does; the value each slot starts at', ONCE, optimizer,
    needs=('legacy.describe_optimizer', 'legacy.slots', 'legacy.describe_run',
           'port.describe_optimizer', 'port.slots', 'port.slot_tokens',
           'port.use_slot_map'),
    bar=f'equal (relative {bar_text(tolerances.OPTIMIZER_RTOL)})'))


# inputs ---------------------------------------------------------------------

def inputs(run: Run, replicas: Replicas) -> CheckResult:
  # On several replicas, the port's own pipeline on that many (e.g. a
  # per-replica batch that is the global one shows only there).
  return checks.inputs(run.data.batches[0],
                       replicas.port.first_pipeline_batch())


register(Check(
    'inputs', 'the port\'s input pipeline against the `input_fn`: examples '
    'per step, every feature and label', EACH, inputs,
    needs=('port.first_pipeline_batch',), bar=bar_text(tolerances.INPUT_ATOL),
    bare_on_first=True))


# inference ------------------------------------------------------------------

def _forward_noise(run: Run, runner, state: dict, ours: dict,
                   outputs_of) -> noise_lib.Forward:
  """What the port's outputs (ours, at state) move by with every kernel and
  embedding of state one unit in the last place apart (noise.forward);
  outputs_of(): the outputs again. The port is set back to state."""
  kernels = [n for n in run.weights if np.ndim(state[n]) >= 2]
  # Copies of what is moved: state may hold views of the model's own
  # buffers (PyTorch's .numpy()), which setting the moved state writes over.
  state = {**state, **{n: np.array(state[n]) for n in kernels}}
  began = time.monotonic()
  with timing.spent(noise_lib.FORWARD_PHASE):
    try:
      runner.set_state(precision.one_ulp_apart(state, kernels,
                                               run.options.seed))
      moved = outputs_of()
    finally:
      runner.set_state(state)
  return noise_lib.forward(ours, moved, time.monotonic() - began)


def inference(run: Run, replicas: Replicas) -> CheckResult:
  """The outputs at identical state, and each layer's (compare/layers):
  where inside the model the two sides part, if they do."""
  legacy, runner = replicas.legacy, replicas.port
  features = run.data.batches[0][0]
  theirs, ours = legacy.predict(features), runner.predict(features)
  run.forward_noise = _forward_noise(run, runner, run.start, ours,
                                     lambda: runner.predict(features))
  figures = layers.compare(legacy.layer_outputs(features),
                           runner.layer_outputs(features),
                           layers.pairs(run.pairs))
  run.parting = layers.parting_text(figures)
  return checks.inference(theirs, ours, run.port.output_map, figures,
                          run.parting, run.forward_noise)


register(Check(
    'inference', 'every PREDICT output by name, at identical state; and each '
    'layer\'s output on one example (legacy name scope against the Keras '
    'layer the variable map pairs with it), reported, to say where the two '
    'part', ONCE, inference,
    needs=('legacy.predict', 'legacy.layer_outputs', 'port.predict',
           'port.layer_outputs'),
    bar=f'{bar_text(tolerances.INFERENCE_ATOL)}; integers exact; layers '
        f'relative {bar_text(tolerances.LAYER_RTOL)}'))


# beyond_init ----------------------------------------------------------------

def scaled_start(start: dict, weights, gain: float) -> dict:
  """The start state with every trainable variable of 2 or more dimensions
  (kernels, embeddings) scaled up, never down, until its root mean square
  times the square root of its fan-in (every dimension but the last) is
  gain: what a unit input comes out as. Biases, norms' scales and offsets
  and batch-norm statistics stay as they are."""
  scaled = dict(start)
  for name in weights:
    value = start[name]
    if np.ndim(value) < 2:
      continue
    fan_in = int(np.prod(np.shape(value)[:-1]))
    rms = float(np.sqrt(np.mean(np.square(value, dtype=np.float64))))
    if rms > 0:
      factor = max(1.0, gain / (rms * np.sqrt(fan_in)))
      scaled[name] = value * np.asarray(factor, value.dtype)
  return scaled


def beyond_init(run: Run, replicas: Replicas) -> CheckResult:
  """The outputs again, both sides set to the start state with its kernels
  and embeddings scaled up to a gain of --beyond_init: at a fresh
  initialisation (BERT's standard deviation of 0.02) most activations work
  near 0, where an activation and its variants agree (tanh and erf GELU part
  by 3e-8 at 0.1); scaled, they leave that range. Where the legacy outputs
  overflow (a deep network without normalisation grows by the gain at each
  layer), the gain is halved until they do not. Both sides go back to the
  start state after."""
  name, asked = 'beyond_init', run.options.beyond_init
  if not asked:
    return CheckResult(name, checks.SKIPPED, 'off (--beyond_init=0, or a '
                       'bundle recorded before this check)')
  legacy, runner = replicas.legacy, replicas.port
  features = run.data.batches[0][0]
  weights = {n for n in run.weights if np.ndim(run.start[n]) >= 2 and
             np.any(run.start[n])}
  if not weights:
    return CheckResult(name, checks.SKIPPED, 'the model has no trainable '
                       'variable of two or more dimensions that is not 0 '
                       '(no kernel or embedding to scale)')

  scaled = {}  # The last state tried, by its gain (one model's worth).

  def legacy_at(gain: float) -> dict:
    scaled.clear()
    scaled[gain] = scaled_start(run.start, weights, gain)
    legacy.set_state(scaled[gain])
    return legacy.predict(features)

  try:
    gain, theirs = checks.computable_gain(legacy_at, asked)
    if gain is None:
      return CheckResult(name, checks.SKIPPED, 'the legacy outputs overflow '
                         'with the weights scaled to any gain down to 1: no '
                         'such state is one the model computes')
    runner.set_state(scaled[gain])
    ours = runner.predict(features)
    found = _forward_noise(run, runner, scaled[gain], ours,
                           lambda: runner.predict(features))
    figures = layers.compare(legacy.layer_outputs(features),
                             runner.layer_outputs(features),
                             layers.pairs(run.pairs))
  finally:
    legacy.set_state(run.start)
    runner.set_state(run.start)
  state = scaled[gain]
  factors = [float(np.sqrt(np.mean(np.square(state[n], dtype=np.float64)) /
                           np.mean(np.square(run.start[n], dtype=np.float64))))
             for n in weights]
  return checks.beyond_init(theirs, ours, run.port.output_map, gain,
                            float(np.median(factors)), figures,
                            layers.parting_text(figures), found)


register(Check(
    'beyond_init', 'every PREDICT output by name, both sides set to the '
    'start state with every kernel and embedding scaled up to a gain (root '
    'mean square times the square root of the fan-in) of `--beyond_init` '
    '(2; halved while the legacy outputs overflow), where activations leave '
    'their near-linear range; relative to each output\'s scale', ONCE,
    beyond_init,
    needs=('legacy.predict', 'legacy.layer_outputs', 'legacy.set_state',
           'port.predict', 'port.layer_outputs', 'port.set_state'),
    bar=f'relative {bar_text(tolerances.BEYOND_INIT_RTOL)}'))


# device_drift ---------------------------------------------------------------

def _deployed_rounding(run: Run) -> precision.Rounding | None:
  """What the port's dots round to as deployed: the rounding emulated, or
  its device's (read with where it runs); None: float32."""
  return run.emulate or precision.of_answers(run.ran_on.get('precision', {}))


def device_drift(run: Run, replicas: Replicas) -> CheckResult:
  """The port's outputs as deployed (its device's precision, or the one
  emulated) against its own at the highest precision, every other check's,
  over what its kernels moved by that precision's rounding move them."""
  rounding = _deployed_rounding(run)
  runner = replicas.port
  features = run.data.batches[0][0]
  ours = runner.predict(features)
  with runner.at_deployed_precision() as dots:
    before = getattr(dots, 'rounded', 0)
    drifted = runner.predict(features)
    rounded = getattr(dots, 'rounded', 0) - before
  if run.emulate and not rounded:
    return CheckResult(drift.NAME, checks.ERROR,
                       _UNREACHED.format(run.emulate.name))
  kernels = [n for n in run.weights if np.ndim(run.start[n]) >= 2]
  moved = []
  try:
    for draw in range(tolerances.DRIFT_DRAWS):
      runner.set_state(precision.perturbed(run.start, kernels, rounding,
                                           run.options.seed + draw))
      moved.append(runner.predict(features))
  finally:
    runner.set_state(run.start)
  result = drift.judge(ours, drifted, moved, rounding)
  if run.emulate:
    result.figures['dots_rounded'] = rounded
  return result


# An emulated rounding that reached no dot: the port's predict ran a
# program compiled before it, so its outputs say nothing of the rounding.
_UNREACHED = (
    '--emulate_precision={} rounded no dot of the port\'s predict: it runs '
    'a program compiled before the comparison set the rounding (e.g. a '
    'tf.function or a torch.compile\'d module made once), which the '
    'emulation cannot reach; let predict call the model as it is, or leave '
    'the flag out')


register(Check(
    drift.NAME, 'the port\'s PREDICT outputs as deployed on its device '
    '(TF32 on a GPU, bfloat16 passes on a TPU, or `--emulate_precision`) '
    'against its own at the highest precision, which every other check '
    'runs it at; distributions also by argmax (away from near-ties) and KL '
    'divergence; left out where the port computes float32', ONCE,
    device_drift, needs=('port.predict', 'port.set_state',
                         'port.at_deployed_precision'),
    # Where the port computes float32 (the CPU), nothing drifts.
    applies=lambda run, _: _deployed_rounding(run) is not None,
    bar=f'{tolerances.DRIFT_MULTIPLE:g}x each output\'s movement with every '
        'kernel moved by the precision\'s unit roundoff (2^-11 TF32, 2^-8 '
        f'bfloat16; root mean square over {tolerances.DRIFT_DRAWS} draws)'))


# one_step, learning_rate, trajectory: one pass over the legacy trajectory ---

# How the bars of one_step, updates and stepwise grow with the port's own
# rounding noise (compare/noise.py), in the docs' words.
_NOISE_BAR = (f'{tolerances.NOISE_MULTIPLE:g}x the port\'s own noise on '
              'each tensor (its step again, the examples reordered)')

def _first_step(run: Run, replicas: Replicas) -> tuple[dict, dict]:
  features, labels = run.batches[0]
  run.progress.now(f'one_step ({replicas.label}): step 1')
  # The port's own noise on this step (compare/noise.py), first: the
  # reordered step leaves the port's state as it found it.
  replicas.memo.put('reordered first step',
                    replicas.port.reordered_step(features, labels))
  return (replicas.legacy.step(features, labels),
          replicas.port.step(features, labels))


def _scalars(answer: dict) -> dict:
  """A step's answer without its gradients: what the trajectory keeps of
  each step, so that its memory does not grow with the steps."""
  return {k: v for k, v in answer.items() if k != 'gradients'}


def _trajectory(run: Run, replicas: Replicas) -> tuple[list, list]:
  """Every step's answers on both sides (their losses and rates; the first
  one_step's whole)."""
  first = replicas.memo.once('first step', lambda: _first_step(run, replicas),
                             'the first step raised (see one_step)')
  theirs, ours = [_scalars(first[0])], [_scalars(first[1])]
  try:
    for number, (features, labels) in enumerate(run.batches[1:], 2):
      run.progress.now(f'trajectory ({replicas.label}): step {number} of '
                       f'{len(run.batches)}')
      theirs.append(_scalars(replicas.legacy.step(features, labels)))
      ours.append(_scalars(replicas.port.step(features, labels)))
  except Interrupted:  # A signal stops the command; never a finding.
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise Upstream(f'step {len(ours) + 1} raised: {one_line(e)}') from e
  return theirs, ours


def _averages_after(legacy, runner) -> dict:
  """The moving averages both sides keep (the port's through inventory's
  pairing; those it declared left out are not compared)."""
  ours = runner.averages()
  theirs = {k: v for k, v in legacy.averages().items() if k in ours}
  return {'legacy_averages': theirs, 'port_averages': ours}


def _take_legacy_state(legacy, runner) -> None:
  """The port takes the legacy model's state and moving averages (for a
  check at identical weights: evaluation, serving)."""
  runner.set_state(legacy.state())
  runner.set_averages(legacy.averages())


def one_step(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = replicas.memo.once(
      'first step', lambda: _first_step(run, replicas),
      'the first step raised (see one_step)')
  both = _slots_compared(legacy, runner)
  port_state = runner.state()
  port_slots = runner.slots(ours['learning_rate']) if both else None
  averages = _averages_after(legacy, runner)
  noise = noise_lib.measure(replicas.memo.get('reordered first step'), ours,
                            port_state, port_slots, averages['port_averages'])
  # Measured: the reordered step's state and slots (BERT-base: 1.8 GB) go;
  # the pass at identical state takes its first step's noise from here.
  replicas.memo.put('reordered first step', None)
  replicas.memo.put('first step noise', noise)
  result = checks.one_step(
      f'one_step ({replicas.label})', theirs, ours, legacy.state(),
      port_state, replicas.count,
      legacy.slots(ours['learning_rate']) if both else None, port_slots,
      reference=replicas.describe()['reference'],
      # The legacy runner takes the whole batch where it cannot take the
      # step as on the cores (legacy.LegacyRunner).
      whole_batch=replicas.count > 1 and legacy.replicas < replicas.count,
      parting=run.parting, **averages, noise=noise)
  replicas.memo.put('one_step', result)
  # Judged: the gradients (two model-sized arrays) are let go.
  replicas.memo.put('first step', (_scalars(theirs), _scalars(ours)))
  return result


register(Check(
    'one_step', 'loss, every gradient (the replicas\' summed, as the '
    'all-reduce sums them; of the loss / global batch, or as the legacy '
    'optimizer received them on TPU cores where the port gives them so), '
    'updated weights, other state the step moved, optimizer slots (TF 1 '
    'convention)', EACH, one_step,
    needs=('legacy.step', 'legacy.state', 'legacy.slots',
           'legacy.describe_optimizer', 'legacy.describe_run', 'port.step',
           'port.state', 'port.slots', 'port.describe_optimizer',
           'legacy.averages', 'port.averages', 'port.reordered_step'),
    bar=f'{bar_text(tolerances.ONE_STEP_ATOL)}, beyond {_NOISE_BAR}'))


def learning_rate(run: Run, replicas: Replicas) -> CheckResult:
  theirs, ours = replicas.memo.once(
      'trajectory', lambda: _trajectory(run, replicas))
  return checks.learning_rate(
      f'learning_rate ({replicas.label})',
      [t.get('learning_rate', np.nan) for t in theirs],
      [o['learning_rate'] for o in ours],
      replicas.describe()['rate_source'])


register(Check(
    'learning_rate', 'the rate each side applied, every step', EACH,
    learning_rate, needs=('legacy.step', 'legacy.describe_run', 'port.step'),
    bar=f'{bar_text(tolerances.LEARNING_RATE_ATOL)} + '
        f'{bar_text(tolerances.LEARNING_RATE_RTOL)} x the legacy rate'))


def _replays_exactly(result: CheckResult | None) -> bool:
  """The first step left gradients, weights, statistics and slots equal to
  the bit (a loss averaged in another order may still differ by an ulp),
  before any of the port's measured noise is allowed."""
  return result is not None and result.status != checks.ERROR and bool(
      result.figures.get('equal_to_the_bit'))


def trajectory(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  theirs, ours = replicas.memo.once(
      'trajectory', lambda: _trajectory(run, replicas))
  return checks.trajectory(
      f'trajectory ({replicas.label})', [t['loss'] for t in theirs],
      [o['loss'] for o in ours], legacy.state(), runner.state(),
      # Judged step by step when the steps replay exactly: a first step equal
      # to the bit, against a reference that groups its sums as the
      # replicas do. Else rounding grows chaotically (see tolerances) and
      # stepwise judges every step.
      judge_each_step=_replays_exactly(replicas.memo.get('one_step')) and (
          legacy.replicas == replicas.count),
      global_steps=(legacy.global_step(), runner.global_step()))


register(Check(
    'trajectory', 'the loss of every step, the final state, the global '
    'step: judged when its steps replay exactly, else reported (below)',
    EACH, trajectory,
    needs=('legacy.step', 'legacy.state', 'legacy.global_step', 'port.step',
           'port.state', 'port.global_step'),
    bar=bar_text(tolerances.TRAJECTORY_ATOL)))


# evaluation and served_predictions: on the single-replica run, before the
# updates pass builds another legacy graph.

def evaluation(run: Run, replicas: Replicas) -> CheckResult:
  legacy, runner = replicas.legacy, replicas.port
  batches = run.data.batches[:run.options.eval_batches]
  _take_legacy_state(legacy, runner)
  evaluates_with = replicas.describe()['evaluates_with']
  theirs = legacy.evaluate(batches)
  # Where the model_fn evaluates its averages: its metrics on the weights
  # too, which a port that evaluates its raw weights matches.
  on_weights = (legacy.evaluate_weights(batches)
                if evaluates_with == legacy_state.EVALUATES_AVERAGES else None)
  ours = runner.evaluate(batches)
  found = _forward_noise(run, runner, runner.state(), ours,
                         lambda: runner.evaluate(batches))
  return checks.evaluation(theirs, ours, run.port.metric_map,
                           len(batches) * run.options.global_batch,
                           evaluates_with, on_weights, found)


register(Check(
    'evaluation', 'every eval metric by name (and the loss), at identical '
    'state, over the same batches', ONCE, evaluation,
    needs=('legacy.state', 'legacy.evaluate', 'legacy.evaluate_weights',
           'legacy.describe_run', 'port.set_state',
           'port.evaluate', 'legacy.averages', 'port.set_averages'),
    bar=f'relative {bar_text(tolerances.EVAL_METRIC_RTOL)}'))


def served_predictions(run: Run, replicas: Replicas) -> CheckResult:
  """Both SavedModels, loaded back, on the same receiver inputs."""
  legacy, runner = replicas.legacy, replicas.port
  inputs_ = legacy.serving_inputs(run.data, run.options.seed)
  _take_legacy_state(legacy, runner)
  # The port first: the legacy export leaves the port's Keras model unusable.
  ours = runner.serve(os.path.join(run.workdir, 'port'), inputs_)
  theirs = legacy.serve(run.workdir, inputs_)
  # The same outputs as inference's, served: their noise, measured there.
  return checks.served_predictions(theirs, ours, run.port.output_map,
                                   inputs_, replicas.describe()['exports'],
                                   run.forward_noise,
                                   port_averages=bool(runner.averages()))


register(Check(
    'served_predictions', 'every output by name of both SavedModels (the '
    'Estimator\'s own export, the port\'s), loaded back, fed the receiver\'s '
    'inputs', ONCE, served_predictions,
    needs=('legacy.serving_inputs', 'legacy.state', 'legacy.serve',
           'legacy.describe_run',
           'port.set_state', 'port.serve', 'legacy.averages',
           'port.set_averages'),
    bar=f'{bar_text(tolerances.INFERENCE_ATOL)}; integers exact',
    planned=lambda plan: plan.serving))


# stepwise and updates: one pass at identical state, on a fresh run ---------

@dataclasses.dataclass(frozen=True)
class Resynced:
  """The pass at identical state.

  per_step: each step's max difference (loss, state, slots, averages).
  losses: the legacy losses.
  steps: what each step did to each variable, slot and average
    (updates.Step).
  host_calls: each step's (legacy, port) host_call values ({name: array};
    the port's None when it gives no Port.host_call).
  """
  per_step: np.ndarray
  losses: list
  steps: list
  host_calls: list
  # The port's own noise it measured (noise.figures).
  noise: dict = dataclasses.field(default_factory=dict)


def resynced_steps(run: Run, legacy, runner, label: str,
                   dropout: bool = False,
                   first_noise: noise_lib.Noise | None = None) -> Resynced:
  """Every step of the legacy trajectory at identical state: before each
  step the port takes the legacy state (weights, slots, step, averages), so
  no difference can grow.

  Args:
    dropout: take the port's step as its trainer does, all of it in its step
      function (the loss its metric records), for a dropout mask drawn once.
    first_noise: the port's noise one_step measured on the first step, from
      the same state on the same batch: taken for this pass's first step
      rather than measured again.
  """
  per_step, losses, steps, rate, host_calls = [], [], [], 0.0, []
  trainable = set()
  both = _slots_compared(legacy, runner)
  ulps = tolerances.ONE_STEP_ULPS  # The rounding of storing the state.
  # The port's own noise (compare/noise.py), measured at the steps up to
  # the first that moves the weights, and held for the steps after.
  noise, noise_moved = None, False
  for number, (features, labels) in enumerate(run.batches, 1):
    run.progress.now(f'{label}: step {number} of {len(run.batches)}')
    before = legacy.state()
    runner.set_state(before)
    runner.set_global_step(legacy.global_step())
    if both and rate:
      runner.set_slots(legacy.slots(rate), rate)
    averages_before = legacy.averages()
    runner.set_averages(averages_before)
    reused = number == 1 and first_noise is not None and not dropout
    again = None if dropout or noise_moved or reused else (
        runner.reordered_step(features, labels))
    theirs = legacy.step(features, labels)
    answer = ({'loss': runner.step_as_trained(features, labels)} if dropout
              else runner.step(features, labels))
    # The optimizer's variables: a run's first step answers with their
    # gradients (state moved otherwise, e.g. batch-norm statistics, stepwise
    # holds). No gradient is judged here: they go at once.
    trainable = trainable or set(theirs.get('gradients', ()))
    rate = runner.learning_rate()
    after, ours_after = legacy.state(), runner.state()
    legacy_slots = legacy.slots(rate) if both else {}
    port_slots = runner.slots(rate) if legacy_slots else {}
    averages = _averages_after(legacy, runner)
    if again is not None or reused:
      noise = first_noise if reused else noise_lib.measure(
          again, answer, ours_after, port_slots, averages['port_averages'])
      noise_moved = any(np.any(after[k] != before[k]) for k in trainable)
    allowed = functools.partial(noise_lib.allowance, noise)
    theirs, answer = _scalars(theirs), _scalars(answer)
    ours = answer['loss']
    host_calls.append((theirs.get('host_call', {}), answer.get('host_call')))
    diffs = [checks.max_diff({'loss': np.float64(theirs['loss'])},
                             {'loss': np.float64(ours)}, 0,
                             allowed('loss'))[0],
             checks.max_diff(after, ours_after, ulps, allowed('state'))[0]]
    if legacy_slots:
      diffs.append(checks.max_diff(legacy_slots, port_slots, ulps,
                                   allowed('slots'))[0])
    if averages['legacy_averages']:
      diffs.append(checks.max_diff(averages['legacy_averages'],
                                   averages['port_averages'], ulps,
                                   allowed('averages'))[0])
    per_step.append(max(diffs))
    losses.append(float(theirs['loss']))
    steps.append(updates.step(
        number, before, {k: after[k] for k in trainable},
        {k: ours_after[k] for k in trainable}, legacy_slots, port_slots,
        theirs.get('learning_rate'),
        (averages_before, averages['legacy_averages'],
         averages['port_averages']), noise))
  return Resynced(np.array(per_step), losses, steps, host_calls,
                  noise_lib.figures(noise, '' if not dropout else
                                    'dropout draws its masks by the order '
                                    'of the examples'))


def _resynced(run: Run, replicas: Replicas):
  name = f'stepwise ({replicas.label})'  # The legacy run's name, as taped.

  def compute():
    # The free run is done with (the checks on it ran before this pass;
    # those after read the passes' results): let it go before this pass
    # builds its own, or the model is held twice as many times (BERT-base:
    # 4 GB more at the peak).
    replicas.release()
    return resynced_steps(run, run.legacy(name, replicas.count,
                                          gradients=False),
                          run.port_runner(replicas.placement),
                          f'updates and stepwise ({replicas.label})',
                          first_noise=replicas.memo.get('first step noise'))
  return replicas.memo.once('resynced', compute,
                            'the pass at identical state raised (see '
                            'updates)')


def _with_noise(result: CheckResult, resynced: Resynced) -> CheckResult:
  return dataclasses.replace(result, figures={**result.figures,
                                              'noise': resynced.noise})


def updates_check(run: Run, replicas: Replicas) -> CheckResult:
  resynced = _resynced(run, replicas)
  return _with_noise(updates.check(f'updates ({replicas.label})',
                                   resynced.steps, run.parting), resynced)


# Reported before stepwise, which judges the same steps: its hint names the
# variable and the term that differ, where stepwise gives a step's size.
register(Check(
    'updates', 'at every step of the legacy trajectory from identical '
    'state: each trainable variable\'s update (after minus before) and each '
    'optimizer slot, relative to the legacy one\'s size; differences within '
    '2 units in the last place of the value are rounding; a part whose size '
    'is under 10% of its group\'s typical size is held to that 10%', EACH,
    updates_check,
    needs=('legacy.state', 'legacy.global_step', 'legacy.slots',
           'legacy.step', 'port.set_state', 'port.set_global_step',
           'port.set_slots', 'port.step', 'port.learning_rate', 'port.state',
           'port.slots', 'legacy.averages',
           'port.averages', 'port.set_averages', 'port.reordered_step'),
    bar=f'relative {bar_text(tolerances.UPDATE_RTOL)}, or {_NOISE_BAR}'))


def stepwise(run: Run, replicas: Replicas) -> CheckResult:
  resynced = _resynced(run, replicas)
  return _with_noise(checks.stepwise(f'stepwise ({replicas.label})',
                                     resynced.per_step, run.parting),
                     resynced)


register(Check(
    'stepwise', 'every step of the legacy trajectory as a one-step check, '
    'the port given the legacy state (weights, slots, step) before each '
    'step', EACH, stepwise,
    needs=('legacy.step', 'legacy.state', 'legacy.slots', 'port.step',
           'port.state', 'port.slots', 'legacy.averages', 'port.averages',
           'port.reordered_step'),
    bar=f'{bar_text(tolerances.ONE_STEP_ATOL)}, beyond {_NOISE_BAR}'))


def host_call(run: Run, replicas: Replicas) -> CheckResult:
  """The host_call's tensors at every step of the pass at identical state,
  against the port's logged values (Port.host_call)."""
  return checks.host_call(replicas.describe()['host_call'],
                          _resynced(run, replicas).host_calls)


register(Check(
    'host_call', 'the tensors the legacy `host_call` receives at each step '
    '(what its summaries log: the loss, the rate, ...), by name, against the '
    'port\'s `Port.host_call` values, at every step from identical state; '
    'or a line saying why they were not compared; for a model_fn with a '
    '`host_call`', ONCE, host_call,
    needs=('legacy.describe_run', 'legacy.step', 'port.step'),
    bar=f'relative {bar_text(tolerances.HOST_CALL_RTOL)}',
    applies=lambda run, replicas: bool(
        replicas.describe()['host_call'])))


# After the replica runs, with dropout on ------------------------------------

def dropout(run: Run, replicas: Replicas | None) -> CheckResult:
  """Every step with dropout on, at identical state, random numbers aligned.

  Both graphs are built inside one DeterministicRandomTestTool scope
  ('constant' mode), which gives every stateful random op the same seeds: the
  legacy graph's dropout op and the port's, in its tf.function, then draw the
  same mask at the same step (one draw per step on each side; giving the
  port the legacy state between steps moves no random state).
  """
  del replicas  # On one replica.
  name = 'dropout (1 replica)'
  unaligned = run.framework.dropout_unaligned()
  if unaligned:
    return CheckResult(name, checks.SKIPPED, unaligned)
  tool = tf.compat.v1.keras.utils.DeterministicRandomTestTool()
  with tool.scope():
    legacy = run.legacy(name, draws=True, gradients=False)
    runner = run.port_runner(tf.distribute.OneDeviceStrategy('/cpu:0'))
    resynced = resynced_steps(run, legacy, runner, name, dropout=True)
  return checks.dropout(name, resynced.per_step, resynced.losses)


register(Check(
    'dropout (1 replica)', 'every step with dropout **on**, at identical '
    'state, the random numbers aligned', AFTER, dropout,
    needs=('legacy.step', 'legacy.state', 'port.set_state',
           'port.step_as_trained'),
    bar=bar_text(tolerances.ONE_STEP_ATOL)))


def tpu_ready(run: Run, replicas: Replicas | None) -> CheckResult:
  """What "compiles for a TPU" means in the port's framework, asked of its
  adapter (Framework.tpu_ready), on one replica built afresh."""
  del replicas
  with timing.spent('XLA compiles (tpu_ready)'):
    readiness = run.framework.tpu_ready(run.port, run.params(), run.batches,
                                        run.progress)
  return CheckResult('tpu_ready', readiness.status, readiness.summary,
                     figures=readiness.figures)


register(Check(
    'tpu_ready', 'the port\'s inputs have fully defined shapes; its step '
    'and its predict compile for a TPU as its framework compiles them (XLA '
    'through its own `strategy.run`, `jax.export`, `torch.export`); no host '
    'Python, strings, or data-dependent shapes in them (below)', AFTER,
    tpu_ready, bar='none found', planned=lambda plan: plan.tpu_ready))


def _legacy_rate(run: Run, options: speed_lib.Options):
  """The legacy step timed and profiled once (live only): (rate, kernels),
  (None, None) from a bundle."""
  legacy = run.source.timing_runner()
  if legacy is None:
    return None, None
  if run.start is not None:
    legacy.set_state(run.start)
  batches = itertools.cycle(run.batches)

  def legacy_window():
    for _ in range(options.window_steps):
      legacy.train_only(*next(batches))
  run.progress.now('speed: timing the legacy step')
  examples = options.window_steps * run.options.global_batch
  return (speed_lib.timed(legacy_window, examples, options.windows),
          speed_lib.kernels(legacy_window, options.window_steps))


def speed(run: Run, replicas: Replicas) -> CheckResult:
  options = run.speed
  legacy_rate, legacy_kernels = run.memo.once(
      'legacy timing', lambda: _legacy_rate(run, options),
      'timing the legacy step raised (see the first speed check)')
  steps = options.window_steps
  runner = run.port_runner(replicas.placement)
  window = lambda: runner.train_window(steps)
  run.progress.now(f'speed ({replicas.label}): timing the port\'s step')
  port = speed_lib.timed(window, steps * run.options.global_batch,
                         options.windows)
  table = None if legacy_kernels is None else speed_lib.kernel_table(
      legacy_kernels, speed_lib.kernels(window, steps))
  return speed_lib.check(f'speed ({replicas.label})', legacy_rate, port,
                         table)


register(Check(
    'speed', 'the port\'s examples/s against the legacy step\'s, the spread '
    'of the timed windows, and the kernels whose time per step differs most '
    '(below); with `--speed`', AFTER_EACH, speed,
    needs=('legacy.train_only', 'port.train_window'),
    bar=f'below {tolerances.SPEED_MARGIN:.0%} of the legacy rate: `REVIEW`, '
        'which fails nothing',
    planned=lambda plan: plan.speed))
