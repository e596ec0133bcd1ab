r"""migration-compare: the equivalence harness as a command.

  migration-compare [--port=my_port:make_port --legacy_model_fn=... \
      --legacy_input_fn=... --params='{"data_dir": ...}' ...]
  python -m migration_tools.compare ...

Checks a port against its legacy model_fn (``harness``) on the legacy
input_fn's batches, on 1, 2 and 4 replicas, prints a line as each check
ends and the first to fix, writes the JSON report (--report) and the loss-curve PNG beside
it, always listing every check. --record_bundle=PATH also records the legacy
side into a golden bundle; --bundle=PATH later checks the port against it
with the same checks, without the legacy code (``golden``):

  migration-compare --record_bundle=tests/golden.npz          # on TF 2.15
  migration-compare --bundle=tests/golden.npz --port=...      # on any TF

A line is printed as each check ends (status, figure, time), and while a
long one runs at least every 30 s; --quiet prints only the results at the
end. Exit code: 0 all passed (or skipped), 1 a check failed or bad input.
The defaults compare the kit's own pair; the bars are in ``tolerances``.

The checks, in the order they run (migration_tools/compare/registry.py):
"""
from __future__ import annotations

import os

# oneDNN picks its kernels per graph, so the same op can round differently in
# two graphs. Measured with it on: the single-replica training steps stay
# bit-identical (the port takes its gradients as TF 1 did), but the one-step
# probe differs by 7e-8 and the multi-replica runs part sooner. Without it
# every single-replica check is exact to the bit. Read when TensorFlow loads,
# so set here, in the command's own module, before anything imports it.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')

from kit_core import process  # pylint: disable=g-import-not-at-top,wrong-import-position

process.quiet_tensorflow_startup()  # Before TensorFlow loads.

# pylint: disable=g-import-not-at-top,wrong-import-position
import dataclasses
import tempfile

from absl import flags

from kit_core import devices
from kit_core import exits
from kit_core import lazy
from kit_core import paths
from kit_core import progress as progress_lib
from kit_core import room
from kit_core import sharding
from kit_core import timing
from kit_core.errors import Interrupted
from kit_core.errors import KitError
from kit_core.errors import printable
from kit_core.lazy import tensorflow as tf
from migration_tools import cli
from migration_tools import tolerances
from migration_tools.compare import coverage
from migration_tools.compare import golden
from migration_tools.compare import harness
from migration_tools.compare import registry
from migration_tools.compare.checks import speed as speed_lib
from migration_tools.pair import flags as pair_lib
from migration_tools.pair import frameworks
from migration_tools.pair import legacy
from migration_tools.pair import precision
from migration_tools.pair import runs_on
# pylint: enable=g-import-not-at-top,wrong-import-position


def define_flags(tool_flags: flags.FlagValues) -> None:
  """The command's flags, on the tool's own FlagValues (see cli)."""
  define = dict(flag_values=tool_flags)
  pair_lib.define_pair_flags(tool_flags, serving=True)
  _define_run_flags(define)
  _define_source_and_output_flags(define)


def _define_run_flags(define: dict) -> None:
  """What a comparison runs: its steps, batches, start, precision and
  replica counts."""
  # The defaults are harness.Options's, written once there.
  default = harness.Options()
  flags.DEFINE_integer('steps', default.steps, 'Training steps compared.',
                       lower_bound=1, **define)
  flags.DEFINE_integer('batch_size', default.global_batch,
                       'Global batch (params["batch_size"]).', lower_bound=1,
                       **define)
  flags.DEFINE_integer('eval_batches', default.eval_batches, 'Batches the '
                       'evaluation check reads, at most.', lower_bound=1,
                       **define)
  flags.DEFINE_string('warm_start_from', default.warm_start_from,
                      'The checkpoint TPUEstimator(warm_start_from=...) '
                      'got: the legacy training starts from it (its '
                      'trainable variables), the port from the same weights. '
                      'A warm start in the model_fn (scaffold_fn, '
                      'init_from_checkpoint) runs without it.', **define)
  flags.DEFINE_float('beyond_init', default.beyond_init,
                     'The beyond_init check sets both sides to the start '
                     'state with every kernel and embedding scaled up until '
                     'its root mean square times the square root of its '
                     'fan-in is this gain, where activations leave their '
                     'near-linear range, and compares the outputs; 0: off. '
                     'Recorded in a bundle.', lower_bound=0, **define)
  flags.DEFINE_enum('emulate_precision', None, sorted(precision.EMULATED),
                    'Run the port\'s dots as an accelerator computes them '
                    'by default, on the CPU: every float32 matmul\'s and '
                    'convolution\'s operands rounded to TF32 (a GPU) or '
                    'bfloat16 (one pass, a TPU). Every check of its math '
                    'runs it at the highest precision, as without the flag; '
                    'device_drift judges its outputs at this one against '
                    'those. For ports on '
                    f'{frameworks.titles(frameworks.emulating())}.',
                    **define)
  flags.DEFINE_list('replicas', ['1', '2', '4'],
                    'Replica counts to run the port on; the first must be 1.',
                    **define)


def _define_source_and_output_flags(define: dict) -> None:
  """Where the legacy side comes from, what else is checked, and where
  the results go."""
  flags.DEFINE_string('record_bundle', None,
                      'Also write the legacy side of this comparison to a '
                      'golden bundle (.npz) here, to check the port against '
                      'later with --bundle, on any TensorFlow.', **define)
  flags.DEFINE_string('bundle', None,
                      'Check the port against this golden bundle instead of '
                      'running the legacy code (no tf.estimator needed): the '
                      'legacy flags, --params, --steps, --batch_size and '
                      '--eval_batches are the recorded ones, and --replicas '
                      'names some of the recorded counts (unset: all). '
                      'Unset where no tf.estimator runs and no flag names '
                      'the legacy side: the kit\'s own, '
                      'kit_pair/golden_bundle.npz (its pair recorded on TF '
                      '2.15).', **define)
  flags.DEFINE_boolean('tpu_ready', True,
                       'Also check that the port\'s step and predict compile '
                       'with XLA on inputs of fixed shapes, as on a TPU '
                       '(--notpu_ready: the port is not meant for TPUs).',
                       **define)
  flags.DEFINE_boolean('speed', False,
                       'Also time the port\'s training step against the '
                       'model_fn\'s (live; from a bundle the port\'s alone), '
                       'on each replica count, with the kernels whose time '
                       'differs most; a port below '
                       f'{tolerances.SPEED_MARGIN:.0%} of the legacy rate is '
                       'reported for review, not failed.', **define)
  flags.DEFINE_integer('speed_window_steps', 10, 'With --speed: steps per '
                       'timed window (and per call of the port\'s '
                       'train_steps).', lower_bound=1, **define)
  flags.DEFINE_integer('speed_windows', 3, 'With --speed: timed windows per '
                       'side, after a warm-up one; the median is reported.',
                       lower_bound=1, **define)
  flags.DEFINE_boolean('fail_fast', False,
                       'Stop at the first check that fails or raises: the '
                       'checks after it are not run, and the report says so '
                       '(a quick loop while fixing a port; exit code 1 as '
                       'ever). Not with --record_bundle, which records every '
                       'check\'s answers.', **define)
  flags.DEFINE_boolean('quiet', False, 'Print only the results, at the end: '
                       'no line as each check ends, none while one runs.',
                       **define)
  flags.DEFINE_string('report', 'equivalence_report.json',
                      'Where the JSON report goes; the loss plot goes beside '
                      'it, with the suffix .png.', **define)


# What a bundle was recorded with, and so what --bundle does not take.
_RECORDED = ('legacy_model_fn', 'legacy_input_fn', 'legacy_serving_input_fn',
             'legacy_serving_inputs', 'legacy_flags', 'params', 'steps',
             'batch_size', 'eval_batches', 'warm_start_from')


def _speed(tool_flags: flags.FlagValues) -> speed_lib.Options | None:
  if not tool_flags.speed:
    return None
  return speed_lib.Options(tool_flags.speed_window_steps,
                           tool_flags.speed_windows)


def _parse_counts(values: list[str]) -> list[int]:
  try:
    counts = [int(r) for r in values]
  except ValueError as e:
    raise KitError(f'--replicas takes whole numbers, e.g. 1,2,4 ({e})') from e
  if not counts or counts[0] != 1:
    raise KitError('--replicas must start with 1, the legacy single '
                   'replica reference')
  return counts


def _replica_counts(values: list[str], global_batch: int) -> list[int]:
  counts = _parse_counts(values)
  for count in counts:
    sharding.per_replica_batch(global_batch, count, '--replicas')
  return counts


def _progress(tool_flags: flags.FlagValues) -> progress_lib.Progress:
  return progress_lib.Progress(None if tool_flags.quiet else
                               progress_lib.to_stdout)


def _live(tool_flags: flags.FlagValues, workdir: str) -> tuple[list, dict]:
  """Runs the legacy code next to the port; records a bundle if asked."""
  legacy.require_estimator('migration-compare runs your model_fn',
                           'check the port against a bundle recorded there '
                           '(--bundle=FILE)')
  from kit_core import checkpoint_files  # pylint: disable=g-import-not-at-top
  start = tool_flags.warm_start_from
  if start and not (checkpoint_files.latest(start) if os.path.isdir(start)
                    else os.path.exists(start + '.index')):
    raise KitError(f'--warm_start_from {tool_flags.warm_start_from}: no '
                   'checkpoint there; give a checkpoint prefix (e.g. '
                   'DIR/model.ckpt-1000) or its folder')
  options = harness.Options(tool_flags.steps, tool_flags.batch_size,
                            tool_flags.eval_batches,
                            cli.parse_params(tool_flags.params),
                            warm_start_from=tool_flags.warm_start_from,
                            beyond_init=tool_flags.beyond_init,
                            legacy_flags=tool_flags.legacy_flags)
  counts = _replica_counts(tool_flags.replicas, options.global_batch)
  devices.split_cpu(max(counts))
  serving = tool_flags.legacy_serving_input_fn
  pair = harness.LegacyPair(
      pair_lib.legacy_callable(tool_flags, 'legacy_model_fn'),
      pair_lib.legacy_callable(tool_flags, 'legacy_input_fn'),
      pair_lib.legacy_callable(tool_flags, 'legacy_serving_input_fn')
      if serving else None,
      pair_lib.legacy_callable(tool_flags, 'legacy_serving_inputs')
      if serving and tool_flags.legacy_serving_inputs else None)
  port = pair_lib.load_port(tool_flags)
  dots = _dots(tool_flags, port)
  cli.set_legacy_flags(tool_flags.legacy_flags)
  about = {}
  if not tool_flags.record_bundle:
    return harness.compare(pair, port, workdir,
                           harness.placements(port, counts,
                                              _progress(tool_flags)), options,
                           tpu_ready=tool_flags.tpu_ready,
                           speed=_speed(tool_flags),
                           progress=_progress(tool_flags), about=about,
                           dots=dots, fail_fast=tool_flags.fail_fast), {
                               **dataclasses.asdict(options), **about,
                               'port': pair_lib.port_spec(tool_flags)}
  # Before any work: room for the bundle, by the model's shapes.
  expected = golden.estimate(
      legacy.model_bytes(pair.model_fn, pair.input_fn, options.params),
      options.steps, len(counts))
  room.check(expected, '--record_bundle', tool_flags.record_bundle,
             'record --steps=1, or a scaled-down configuration of the same '
             'code (fewer layers, a smaller hidden size)')
  print(f'Recording a bundle of about {room.size_text(expected.disk)} '
        f'({expected.basis})')
  with golden.recording(tool_flags.record_bundle) as tape:
    results, bundle = harness.record_bundle(
        pair, port, workdir, counts, options, tape, tool_flags.tpu_ready,
        _speed(tool_flags), _progress(tool_flags), about, dots)
    tape.finish(bundle)
  print(printable(f'Bundle: {tool_flags.record_bundle}'))
  return results, {**dataclasses.asdict(options), **about,
                   'port': pair_lib.port_spec(tool_flags)}


def _kit_bundle(tool_flags: flags.FlagValues) -> str | None:
  """The kit's own bundle where the comparison takes it: no --bundle, no
  --record_bundle, no flag naming the legacy side or what a bundle records,
  and no tf.estimator here to run a model_fn live."""
  if (tool_flags.bundle or tool_flags.record_bundle or
      pair_lib.names_a_pair(tool_flags) or legacy.runs_here() or
      any(tool_flags[name].present for name in _RECORDED)):
    return None
  return pair_lib.kit_bundle()


def _replayed(tool_flags: flags.FlagValues, workdir: str, path: str
              ) -> tuple[list, dict]:
  """Checks the port against the bundle at path: no legacy code runs."""
  bundle = golden.load(path)
  counts = _recorded_counts(tool_flags, bundle)
  # Before TensorFlow or JAX starts: a port on either may follow.
  if lazy.installed('tensorflow'):
    devices.split_cpu(max(counts))
  devices.split_xla_cpu(max(counts), '--replicas')
  whose = ('' if tool_flags.bundle else
           ' (the kit\'s own pair: no --bundle was given, and no tf.estimator '
           'is here to run a model_fn)')
  commit = bundle.versions.get('kit_commit')
  print(printable(f'Bundle: {path}{whose}, recorded with TensorFlow '
                  f'{bundle.versions.get("tensorflow")}'
                  f'{f" at kit commit {commit[:12]}" if commit else ""}; '
                  f'replicas {",".join(map(str, counts))}'))
  port = pair_lib.load_port(tool_flags)
  _set_recorded_flags(bundle.options.get('legacy_flags', ''))
  dots = _dots(tool_flags, port)
  framework = _framework(port)
  print(printable(f'Port: {pair_lib.port_spec(tool_flags)}, on {framework}'))
  about = {}
  results = harness.check_bundle(bundle, port, workdir, tool_flags.tpu_ready,
                                 _speed(tool_flags), _progress(tool_flags),
                                 counts, about, dots, tool_flags.fail_fast)
  return results, {**bundle.options, 'bundle': path,
                   'recorded_with': bundle.versions,
                   'port': pair_lib.port_spec(tool_flags),
                   'port_framework': framework, **about}


def _set_recorded_flags(spec: str) -> None:
  """The legacy flags the bundle was recorded with, set on absl's FLAGS
  for a port that reads them (as it imports the legacy module that defines
  them); those no module here defines are said, not set."""
  unknown = cli.set_legacy_flags(spec, known_only=True)
  if unknown:
    print(printable(f'Legacy flags: {" ".join(unknown)} recorded, defined by '
                    'no module the port imported: not set'))
  elif spec:
    print(printable(f'Legacy flags: {spec} (recorded; set for the port)'))


def _dots(tool_flags: flags.FlagValues, port) -> precision.Dots:
  """How the port's dots compute: its framework's, with the rounding
  --emulate_precision names (the one reader of the flag).

  Raises:
    KitError: the port's framework cannot emulate it (its line says so).
  """
  rounding = (None if tool_flags.emulate_precision is None else
              precision.EMULATED[tool_flags.emulate_precision])
  return frameworks.framework_of(port).dots(rounding)


def _recorded_counts(tool_flags: flags.FlagValues,
                     bundle: golden.Bundle) -> list[int]:
  """The replica counts to check: the bundle's, or those of them --replicas
  names.

  Raises:
    KitError: --replicas names a count the bundle did not record.
  """
  if not tool_flags['replicas'].present:
    return list(bundle.replica_counts)
  counts = _parse_counts(tool_flags.replicas)
  missing = [c for c in counts if c not in bundle.replica_counts]
  if missing:
    raise KitError(f'--replicas={",".join(tool_flags.replicas)}: the bundle '
                   f'recorded {",".join(map(str, bundle.replica_counts))} '
                   'replicas only; name some of those, or record again')
  return counts


def _framework(port) -> str:
  """What the port runs on, as its framework says."""
  return frameworks.framework_of(port).describe(port)


def _check_outputs(tool_flags: flags.FlagValues, bundle: str | None) -> str:
  """The report's absolute path, once the report, its plot and a bundle to
  record are known to destroy no input and no other output."""
  inputs = ([('the input --bundle', bundle)] if bundle else []) + (
      pair_lib.code_files(tool_flags))
  plot = os.path.splitext(os.path.abspath(tool_flags.report or '.'))[0] + '.png'
  if tool_flags.record_bundle is not None:
    paths.check_output(tool_flags.record_bundle, '--record_bundle', inputs,
                       [('--report', tool_flags.report),
                        ('the loss plot beside --report', plot)])
  report = paths.check_output(tool_flags.report, '--report', inputs)
  paths.check_output(plot, 'the loss plot beside --report', inputs)
  return report


def main(tool_flags: flags.FlagValues, args: list[str]) -> None:
  """Checks the inputs, runs the comparison, prints and writes the report."""
  exits.output_flags('--report (or --record_bundle)')
  if args:
    raise KitError(f'unexpected arguments {args}; flags take the form '
                   '--name=value (see --help)')
  if tool_flags.bundle and tool_flags.record_bundle:
    raise KitError('--bundle checks against a recorded bundle and '
                   '--record_bundle records one: give one of them')
  if tool_flags.fail_fast and tool_flags.record_bundle:
    raise KitError('--fail_fast with --record_bundle: a bundle keeps every '
                   'check\'s answers, so its recording runs them all; leave '
                   '--fail_fast out')
  recorded = [f'--{name}' for name in _RECORDED if tool_flags[name].present]
  if tool_flags.bundle and recorded:
    raise KitError(f'{", ".join(recorded)} with --bundle: the bundle holds '
                   'the values it was recorded with; leave them out')
  if tool_flags.bundle and tool_flags['replicas'].present:
    _parse_counts(tool_flags.replicas)  # Before the bundle is read.
  bundle = tool_flags.bundle or _kit_bundle(tool_flags)
  report = _check_outputs(tool_flags, bundle)
  timing.LEDGER.restart()
  # A signal stops the comparison with its temporary files removed, a bundle
  # half-written removed, and no report; once it has ended, a signal waits
  # for the report to be written whole, then stops the command in one line.
  with exits.deferred('the comparison had ended: its lines above and its '
                      'report are whole'):
    results, figures = _compared(tool_flags, bundle, report)
    _finish(tool_flags, results, figures, report)


def _compared(tool_flags: flags.FlagValues, bundle: str | None,
              report: str) -> tuple[list, dict]:
  """The comparison, a signal stopping it (Interrupted); a KitError's
  report written where one was asked for."""
  with exits.interruptible('the comparison was stopped, no report was '
                           'written; run the same command again'):
    with tempfile.TemporaryDirectory() as workdir:
      try:
        return (_replayed(tool_flags, workdir, bundle) if bundle
                else _live(tool_flags, workdir))
      except Interrupted:  # A signal: no report (the line says so).
        raise
      except KitError as e:
        # A report asked for (--report given) is written, with the error,
        # for whatever reads it (a CI job, an agent); the line is printed as
        # ever.
        if tool_flags['report'].present:
          harness.write_error_report(report, str(e), {
              'port': pair_lib.port_spec(tool_flags)})
        raise


def _finish(tool_flags: flags.FlagValues, results: list, figures: dict,
            report: str) -> None:
  """The comparison's closing lines and its report; exits 1 or 2 as the
  verdict says."""
  if tool_flags.quiet:
    ran_on = figures.get('port_ran_on', {})
    if 'platform' in ran_on:
      print(runs_on.line(ran_on))
    for result in results:
      print(result.summary())
  figures['time'] = timing.LEDGER.totals()
  print(timing.LEDGER.line())
  if not tool_flags.quiet:  # Each check had its line as it ended.
    print(_counts(results))
  behaviours = coverage.read(results)
  for line in coverage.lines(behaviours):
    print(printable(line))
  figures['coverage'] = coverage.to_json(behaviours)
  failed = [r for r in results if r.failed]
  if failed:
    print(f'First to fix: {failed[0].name} (later failures may follow from '
          'it)')
  said = coverage.verdict(results, behaviours)
  figures['verdict'] = said
  print(printable(coverage.verdict_line(said, behaviours)))
  if lazy.installed('tensorflow'):
    figures.update(tensorflow=tf.__version__,
                   onednn=os.environ.get('TF_ENABLE_ONEDNN_OPTS'))
  written = harness.write_report(results, report, figures)
  print(printable(f'Report: {written}'))
  if coverage.EXIT_CODES[said]:
    raise SystemExit(coverage.EXIT_CODES[said])


def _counts(results: list) -> str:
  """'Checks: 20 passed, 1 failed, 2 skipped'."""
  counts = {}
  for result in results:
    counts[result.status] = counts.get(result.status, 0) + 1
  return 'Checks: ' + ', '.join(f'{n} {status}' for status, n in
                                counts.items())


def run() -> None:
  """Console-script entry point (``migration-compare``)."""
  cli.run(main, define_flags, __doc__ + registry.help_text())

