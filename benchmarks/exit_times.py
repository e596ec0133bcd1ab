"""How long each command of the kit takes to exit after its last output.

  python benchmarks/exit_times.py [--work_dir=DIR]

Runs every command on small synthetic data, one after the other, records the
moment of each line it prints, and reports the seconds from the last line to
the process's exit (on TF 2.15 that gap was minutes before the kit ended its
processes itself: kit_core/process.py). Each command's exit code is
checked; the table goes to stdout.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string('work_dir', None, 'Where the runs write; unset: a new '
                    'temporary directory.')
FLAGS = flags.FLAGS


def timed(command: list[str]) -> tuple[int, float, float]:
  """Runs command; returns (exit code, seconds to its last line, seconds from
  its last line to its exit)."""
  start = time.monotonic()
  process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, 'PYTHONPATH': REPO})
  last = start
  for _ in process.stdout:
    last = time.monotonic()
  process.wait()
  return process.returncode, last - start, time.monotonic() - last


def commands(work: str) -> list[tuple[str, list[str], int]]:
  """(label, argv, expected exit code) of every command, on fake data."""
  python = sys.executable
  data = f'--data_dir={work}/data'
  params = '--params=' + json.dumps({'learning_rate': 0.05,
                                     'data_dir': f'{work}/data'})
  small = ['--train_steps=40', '--batch_size=64', data]
  return [
      ('estimator-mnist', [python, '-m', 'estimator_mnist', *small,
                           '--data_source=fake',
                           f'--model_dir={work}/estimator'], 0),
      ('migrate-mnist --loop=fit', [python, '-m', 'migrate', *small,
                                    f'--model_dir={work}/fit'], 0),
      ('migrate-mnist --loop=custom, 2 replicas',
       [python, '-m', 'migrate', *small, '--loop=custom',
        '--num_cpu_devices=2', f'--model_dir={work}/custom'], 0),
      ('migration-convert-checkpoint --verify',
       [python, '-m', 'migration_tools.checkpoint',
        f'--estimator_dir={work}/estimator', f'--output={work}/converted',
        '--verify', params], 0),
      ('migration-compare, 20 steps, 1/2/4 replicas',
       [python, '-m', 'migration_tools.compare', '--steps=20', params,
        f'--report={work}/report.json'], 0),
      ('migration-scan', [python, '-m', 'migration_tools.scanner',
                          'estimator_mnist'], 1),
  ]


def main(argv: list[str]) -> None:
  del argv
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix='exit_times_')
  print(f'{"command":45s} {"exit":>4s} {"work s":>7s} {"exit wait s":>11s}',
        flush=True)
  failed = False
  for label, command, expected in commands(work):
    code, work_s, wait_s = timed(command)
    failed |= code != expected
    print(f'{label:45s} {code:4d} {work_s:7.1f} {wait_s:11.1f}'
          f'{"" if code == expected else f"  (expected exit {expected})"}',
          flush=True)
  sys.exit(1 if failed else 0)


if __name__ == '__main__':
  app.run(main)
