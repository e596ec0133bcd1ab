"""The trainers on TF 2.15 and on the newest TensorFlow, side by side.

  python benchmarks/across_versions.py [--pythons=.venv/bin/python,.venv-newest/bin/python]
      [--report=across_versions.json] [-- THROUGHPUT FLAGS]

Runs benchmarks/throughput.py once with each Python (each install profile of
the README: TF 2.15.1 with tf.estimator, TF 2.21 with Keras 3; with the jax
profile's, benchmarks/throughput_jax.py), one after the other, each in its own process, on the same data; flags after "--" go to every
run as they are (--windows=5, --trainers=estimator,custom_many, ...). Then
prints one table: each trainer's examples/s under each TensorFlow, its ratio
to the first Python's TPUEstimator (the legacy baseline), its fraction of the
matmul ceiling of its precision measured in the same process, and its rate
against the same trainer under the first Python. Writes every run's report
and the table to JSON.

This script imports no TensorFlow itself; any Python with absl runs it.
"""
import dataclasses
import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kit_core import atomic
from kit_core import paths  # pylint: disable=g-import-not-at-top,wrong-import-position
from kit_core.errors import KitError  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_list('pythons', ['.venv/bin/python', '.venv-newest/bin/python'],
                  'The Pythons (install profiles) to run throughput.py with, '
                  'the legacy one first: its TPUEstimator is the baseline. '
                  'Relative paths are from the repository.')
flags.DEFINE_string('report', 'across_versions.json', 'Where the JSON goes.')
FLAGS = flags.FLAGS

THROUGHPUT = os.path.join(REPO, 'benchmarks', 'throughput.py')
THROUGHPUT_JAX = os.path.join(REPO, 'benchmarks', 'throughput_jax.py')


@dataclasses.dataclass(frozen=True)
class Cell:
  """One trainer under one TensorFlow."""
  examples_per_second: float
  ratio_to_baseline: float | None  # To the first Python's TPUEstimator.
  fraction_of_ceiling: float  # Of the matmul ceiling of its precision.
  # Of the examples/s its precision's kernels allow, each timed alone (None:
  # a report from before benchmarks/ceilings.py).
  fraction_of_kernels_alone: float | None
  ratio_to_first: float | None  # To the same trainer under the first Python.


@dataclasses.dataclass(frozen=True)
class Row:
  trainer: str
  label: str
  precision: str
  cells: list[Cell | None]  # One per Python, None: it did not run there.


def _python_path(python: str) -> str:
  path = python if os.path.isabs(python) else os.path.join(REPO, python)
  if not os.access(path, os.X_OK):
    raise KitError(f'--pythons: {python} is not an executable Python; create '
                   'that install profile (README, "Set-up") or name another '
                   'with --pythons')
  return path


def _has_tensorflow(python: str) -> bool:
  return subprocess.run(
      [python, '-c', 'import importlib.util, sys; '
       'sys.exit(importlib.util.find_spec("tensorflow") is None)'],
      check=False).returncode == 0


def run_one(python: str, throughput_args: list[str], report: str) -> dict:
  """throughput.py under python (throughput_jax.py under a Python with no
  TensorFlow: the jax profile's); its stderr (progress) shows as it runs."""
  script = THROUGHPUT if _has_tensorflow(python) else THROUGHPUT_JAX
  command = [python, script, f'--report={report}', '--skip_unavailable',
             *throughput_args]
  result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE,
                          text=True, check=False,
                          env={'TF_CPP_MIN_LOG_LEVEL': '2', **os.environ,
                               'PYTHONPATH': REPO})
  if result.returncode:
    raise KitError(f'benchmarks/{os.path.basename(script)} under {python} '
                   f'exited with {result.returncode} (its output is above); '
                   'nothing was written')
  return paths.read_json(report)


def rows(reports: list[dict]) -> list[Row]:
  """Every trainer that ran under any Python, in the order they ran."""
  baseline = reports[0]['trainers'].get('estimator', {}).get(
      'examples_per_second')
  first = reports[0]['trainers']
  order = list(dict.fromkeys(key for r in reports for key in r['trainers']))
  table = []
  for key in order:
    cells = []
    for report in reports:
      result = report['trainers'].get(key)
      if result is None:
        cells.append(None)
        continue
      rate = result['examples_per_second']
      cells.append(Cell(
          examples_per_second=rate,
          ratio_to_baseline=rate / baseline if baseline else None,
          fraction_of_ceiling=result['fraction_of_ceiling'],
          fraction_of_kernels_alone=result.get('fraction_of_kernels_alone'),
          ratio_to_first=(rate / first[key]['examples_per_second']
                          if key in first else None)))
    some = next(r['trainers'][key] for r in reports if key in r['trainers'])
    table.append(Row(key, some['label'], some['precision'], cells))
  return table


def _ratio(value: float | None) -> str:
  return '-' if value is None else f'{value:.2f}x'


def markdown(reports: list[dict], table: list[Row]) -> str:
  """The table, then each run's ceilings and machine."""
  versions = [r['machine'].get('framework') or
              f'TF {r["machine"]["tensorflow"]}' for r in reports]
  header = ['trainer']
  for i, version in enumerate(versions):
    header += [f'{version} examples/s', f'vs {versions[0]} TPUEstimator',
               'of its ceiling', 'of its kernels alone'] + (
                   [f'vs {versions[0]}'] if i else [])
  lines = ['| ' + ' | '.join(header) + ' |',
           '| --- |' + ' ---: |' * (len(header) - 1)]
  for row in table:
    cells = [row.label]
    for i, cell in enumerate(row.cells):
      if cell is None:
        cells += ['not run'] + ['-'] * (4 if i else 3)
        continue
      alone = cell.fraction_of_kernels_alone
      cells += [f'{cell.examples_per_second:,.0f}',
                _ratio(cell.ratio_to_baseline),
                f'{cell.fraction_of_ceiling:.0%}',
                '-' if alone is None else f'{alone:.0%}']
      if i:
        cells.append(_ratio(cell.ratio_to_first))
    lines.append('| ' + ' | '.join(cells) + ' |')
  lines.append('')
  for version, report in zip(versions, reports):
    ceilings = ', '.join(f'{rate / 1e9:.0f} GFLOP/s {dtype}' for dtype, rate
                         in report['matmul_flops_per_second'].items())
    alone = ', '.join(f'{figures["flops_per_second"] / 1e9:.0f} GFLOP/s '
                      f'{precision}' for precision, figures
                      in report.get('kernels_alone', {}).items())
    lines.append(f'- {version} (Keras {report["machine"]["keras"]}): '
                 f'ceilings {ceilings}' + (
                     f'; the model\'s kernels alone {alone}' if alone else ''))
  machine = reports[0]['machine']
  has = [flag for flag, present in machine['cpu_flags'].items() if present]
  lines.append(f'- {machine["cpu"]}, {machine["cores"]} cores '
               f'({" ".join(has)}); global batch {reports[0]["batch_size"]}')
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  throughput_args = argv[1:]
  try:
    pythons = [_python_path(python) for python in FLAGS.pythons]
    paths.check_folder_exists(FLAGS.report, f'--report {FLAGS.report}')
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
      for i, python in enumerate(pythons):
        print(f'[{i + 1}/{len(pythons)}] the trainers under {python}',
              file=sys.stderr, flush=True)
        report = run_one(python, throughput_args,
                         os.path.join(tmp, f'{i}.json'))
        report['python'] = python
        reports.append(report)
  except KitError as e:
    sys.exit(f'error: {e}')
  table = rows(reports)
  print(markdown(reports, table))
  atomic.write_json(FLAGS.report, {
      'runs': reports, 'rows': [dataclasses.asdict(row) for row in table]})
  print(f'JSON: {FLAGS.report}')


if __name__ == '__main__':
  app.run(main)
