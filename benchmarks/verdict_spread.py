"""The same command, the same verdict: each case run several times.

  python benchmarks/verdict_spread.py BUNDLES [--runs=5]
      [--precisions=float32,tf32,bf16] [--only=SUBSTRING] [--out=DIR]

BUNDLES: the folder tests/tf215_artifacts.py writes (albert.npz, bert.npz,
effnet.npz and the data folders beside them: keep the folder where it was
recorded); the kit's pair replays its committed bundle. Each case is a port,
correct or with a planted bug, replayed against a bundle on its framework's
profile (.venv for Keras 2, .venv-jax, .venv-torch: the README's set-up
lines), at each precision: float32, or --emulate_precision=tf32 / bf16.

A line as each run ends; then, per case and precision, whether every run
gave the same verdict (the same checks failed, the same one first, the same
exit code), and each check's applied bar (its tolerance, plus the largest
allowance for the port's own noise on a tensor, where one applied) as
min..max over the runs: the spread of each bar. A bug's runs stop at the
first failure (--fail_fast): its verdict is that check. Everything lands in
DIR/summary.json (default /tmp/verdict_spread). Runs one comparison at a
time; about 20 s a replay on a 2-core CPU.
"""
import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIT_BUNDLE = os.path.join(REPO, 'kit_pair', 'golden_bundle.npz')
# Each framework's profile, as the README's set-up lines make it.
PYTHONS = {'keras': '.venv/bin/python', 'jax': '.venv-jax/bin/python',
           'torch': '.venv-torch/bin/python'}
PRECISIONS = ('float32', 'tf32', 'bf16')


@dataclasses.dataclass(frozen=True)
class Case:
  """A port against a bundle: bundle is a file of BUNDLES (or KIT_BUNDLE);
  fails is the check a planted bug must fail first ('' for a correct
  port, which must pass)."""
  framework: str
  bundle: str
  port: str
  fails: str = ''

  @property
  def name(self) -> str:
    return f'{self.framework} {self.port}'


_ONE = 'one_step (1 replica)'
CASES = (
    Case('torch', KIT_BUNDLE, 'kit_pair.mnist_torch:make_port'),
    Case('torch', KIT_BUNDLE, 'torch_bugs:summed_gradients',
         'one_step (2 replicas)'),
    Case('torch', KIT_BUNDLE, 'torch_bugs:weight_decay_behind_a_jitter',
         _ONE),
    Case('torch', KIT_BUNDLE, 'torch_bugs:logits_scaled_behind_a_jitter',
         'inference'),
    Case('torch', KIT_BUNDLE, 'torch_bugs:nan_every_other_predict',
         'inference'),
    Case('jax', KIT_BUNDLE, 'kit_pair.mnist_jax:make_port'),
    Case('jax', KIT_BUNDLE, 'mnist_optax_port:summed_loss', _ONE),
    Case('jax', KIT_BUNDLE, 'mnist_optax_port:weight_decay_behind_a_jitter',
         _ONE),
    Case('jax', KIT_BUNDLE, 'mnist_optax_port:logits_scaled_behind_a_jitter',
         'inference'),
    Case('torch', 'albert.npz', 'albert_torch_port:make_port'),
    Case('torch', 'albert.npz', 'albert_torch_port:query_kernel_as_stored',
         'inference'),
    Case('torch', 'albert.npz', 'albert_torch_port:no_clipping',
         'clipping (1 replica)'),
    Case('jax', 'albert.npz', 'albert_jax_port:make_port'),
    Case('jax', 'albert.npz', 'albert_jax_port:classifier_dropout_left_out',
         'dropout (1 replica)'),
    Case('jax', 'bert.npz', 'bert_jax_port:make_port'),
    Case('jax', 'bert.npz', 'bert_jax_port:erf_gelu', 'inference'),
    Case('keras', 'bert.npz', 'bert_port:make_port'),
    Case('keras', 'effnet.npz', 'effnet_port:make_port'),
    Case('keras', 'effnet.npz', 'effnet_port:batch_norm_momentum_0_9', _ONE),
)


def _bar(check: dict) -> float | None:
  """The bar applied to check's widest tensor: its tolerance, plus the
  largest allowance the port's own noise gave (None: no tolerance)."""
  if check.get('tolerance') is None:
    return None
  allowed = (check.get('noise_allowance') or {}).get('largest') or 0.0
  return float(check['tolerance']) + float(allowed)


def _run(case: Case, precision: str, bundles: str, out: str,
         label: str) -> dict:
  """One replay; its verdict and each check's bar and ratio."""
  bundle = (case.bundle if os.path.isabs(case.bundle) else
            os.path.join(bundles, case.bundle))
  report = os.path.join(out, f'{label}.json')
  args = [os.path.join(REPO, PYTHONS[case.framework]), '-m',
          'migration_tools.compare', f'--bundle={bundle}',
          f'--port={case.port}', '--notpu_ready', '--quiet',
          f'--report={report}']
  if precision != 'float32':
    args.append(f'--emulate_precision={precision}')
  if case.fails:
    args.append('--fail_fast')
  tests = os.path.join(REPO, 'tests')
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
      [REPO, tests, os.path.join(tests, 'user_code')]),
         'GCE_METADATA_IP': '127.0.0.1:9', 'GCE_METADATA_HOST': '127.0.0.1:9'}
  if case.framework == 'jax':
    env['KERAS_BACKEND'] = 'jax'
  start = time.monotonic()
  with open(os.path.join(out, f'{label}.log'), 'w', encoding='utf-8') as log:
    code = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT,
                          env=env, timeout=900, check=False).returncode
  checks = []
  if os.path.exists(report):
    with open(report, encoding='utf-8') as f:
      checks = json.load(f)['checks']
  # FAILED or ERROR: the verdict (after --fail_fast's first, NOT RUN).
  failed = [c['name'] for c in checks
            if c.get('status') in ('failed', 'error')]
  return {'exit': code, 'seconds': round(time.monotonic() - start, 1),
          'failed': failed,
          'bars': {c['name']: _bar(c) for c in checks},
          'ratios': {c['name']: c.get('ratio_to_bar') for c in checks}}


def _spread(runs: list[dict]) -> dict:
  """Across runs: the verdicts seen, and each check's bar and ratio as
  [min, max]."""
  verdicts = sorted({json.dumps([r['exit'], r['failed']]) for r in runs})
  checks = {}
  for name in runs[0]['bars']:
    bars = [r['bars'].get(name) for r in runs]
    ratios = [r['ratios'].get(name) for r in runs]
    bars = [b for b in bars if b is not None]
    ratios = [x for x in ratios if x is not None]
    checks[name] = {'bar': [min(bars), max(bars)] if bars else None,
                    'ratio': [min(ratios), max(ratios)] if ratios else None}
  return {'same_verdict': len(verdicts) == 1,
          'verdicts': [json.loads(v) for v in verdicts], 'checks': checks}


def _expected(case: Case, run: dict) -> bool:
  if not case.fails:
    return run['exit'] == 0 and not run['failed']
  return run['exit'] == 1 and run['failed'][:1] == [case.fails]


def _line(case: Case, precision: str, spread: dict, runs: list[dict]) -> str:
  ok = all(_expected(case, r) for r in runs)
  widest = max((hi / lo for lo, hi in (c['bar'] for c in
                                        spread['checks'].values()
                                        if c['bar'] and c['bar'][0] > 0)),
               default=1.0)
  verdict = ('the same verdict' if spread['same_verdict'] else
             f'{len(spread["verdicts"])} verdicts')
  return (f'{case.name} at {precision}: {len(runs)} runs, {verdict}, '
          f'{"as expected" if ok else "NOT AS EXPECTED"}; the widest bar '
          f'spread {widest:.3g}x (max/min)')


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('bundles', help='the folder tests/tf215_artifacts.py '
                      'wrote')
  parser.add_argument('--runs', type=int, default=5)
  parser.add_argument('--precisions', default=','.join(PRECISIONS))
  parser.add_argument('--only', default='', help='cases whose name holds it')
  parser.add_argument('--out', default='/tmp/verdict_spread')
  flags = parser.parse_args()
  precisions = flags.precisions.split(',')
  unknown = sorted(set(precisions) - set(PRECISIONS))
  if unknown or flags.runs < 1:
    parser.error(f'--precisions takes {", ".join(PRECISIONS)} and --runs '
                 'at least 1')
  cases = [c for c in CASES if flags.only in c.name]
  missing = sorted({PYTHONS[c.framework] for c in cases
                    if not os.path.exists(os.path.join(REPO,
                                                       PYTHONS[c.framework]))})
  if missing:
    parser.error(f'no {", ".join(missing)}: make the profile with the '
                 "README's set-up line, or pick cases with --only")
  os.makedirs(flags.out, exist_ok=True)
  signal.signal(signal.SIGTERM, lambda *_: sys.exit('stopped: SIGTERM'))
  summary = []
  for case in cases:
    for precision in precisions:
      runs = []
      for i in range(flags.runs):
        label = f'{case.port.replace(":", "-")}_{case.framework}_{precision}_{i}'
        runs.append(_run(case, precision, flags.bundles, flags.out, label))
        print(f'  {case.name} at {precision}, run {i + 1}: exit '
              f'{runs[-1]["exit"]}, failed {runs[-1]["failed"] or "none"} '
              f'({runs[-1]["seconds"]} s)', flush=True)
      spread = _spread(runs)
      print(_line(case, precision, spread, runs), flush=True)
      summary.append({'case': dataclasses.asdict(case),
                      'precision': precision, 'runs': runs, **spread,
                      'as_expected': all(_expected(case, r) for r in runs)})
      with open(os.path.join(flags.out, 'summary.json'), 'w',
                encoding='utf-8') as f:
        json.dump(summary, f, indent=1)
  return 0 if all(s['same_verdict'] and s['as_expected']
                  for s in summary) else 1


if __name__ == '__main__':
  try:
    sys.exit(main())
  except KeyboardInterrupt:
    sys.exit('stopped: Ctrl-C')
