"""migration-scan --diff against tf_upgrade_v2 on the same files: what the
scanner reports before, after tf_upgrade_v2's rewrite and after applying
--diff's patch, counted as step-1 blockers (what stops the code running on
TF 2.15 at all) and findings in all.

  python tests/rewrite_comparison.py [PATH ...]   # default: tests/rewrite_sources

Needs tf_upgrade_v2, which TensorFlow 2.15 installs (the estimator
profile): run it with that profile's Python. Each tool works on its own
copy; nothing is changed in place.
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
  sys.path.insert(0, REPO)

# pylint: disable=g-import-not-at-top,wrong-import-position
from migration_tools.scanner import engine
# pylint: enable=g-import-not-at-top,wrong-import-position

SOURCES = os.path.join(HERE, 'rewrite_sources')


@dataclasses.dataclass(frozen=True)
class Counts:
  """What the scanner reports on one version of the files."""
  step1: int
  findings: int
  unchecked: int

  def __str__(self) -> str:
    return (f'{self.step1:>6} {self.findings:>9}' +
            (f' ({self.unchecked} unchecked)' if self.unchecked else ''))


@dataclasses.dataclass(frozen=True)
class Comparison:
  before: Counts
  tf_upgrade_v2: Counts
  diff: Counts
  # Files tf_upgrade_v2 could not rewrite (counted as they were).
  tf_upgrade_v2_failed: tuple[str, ...] = ()


def count(folder: str) -> Counts:
  result = engine.scan([folder])
  step1 = sum(f.step == 1 for f in result.findings) + sum(
      engine.NOT_PYTHON3 in u.reason for u in result.unchecked)
  return Counts(step1, len(result.findings), len(result.unchecked))


def tf_upgrade_v2_command() -> list[str]:
  """tf_upgrade_v2 beside this Python (TF 2.15 installs it)."""
  script = os.path.join(os.path.dirname(sys.executable), 'tf_upgrade_v2')
  if not os.path.exists(script):
    raise SystemExit('tf_upgrade_v2 is not installed beside this Python: run '
                     'this with the estimator profile\'s (.venv/bin/python)')
  return [script]


def run_tf_upgrade_v2(source: str, target: str) -> list[str]:
  """target: a copy of source with each Python file as tf_upgrade_v2
  rewrites it, file by file; a file it cannot rewrite (it stops on the whole
  tree then) is copied as it is. Returns those files."""
  shutil.copytree(source, target)
  failed = []
  for root, _, names in os.walk(target):
    for name in sorted(n for n in names if n.endswith('.py')):
      path = os.path.join(root, name)
      ran = subprocess.run([*tf_upgrade_v2_command(), '--infile', path,
                            '--outfile', path + '.upgraded', '--reportfile',
                            path + '.report.txt'],
                           capture_output=True, text=True, check=False)
      # On a file it cannot parse it may exit 0 and write nothing.
      written = (os.path.exists(path + '.upgraded') and
                 os.path.getsize(path + '.upgraded') or
                 not os.path.getsize(path))
      if ran.returncode == 0 and written:
        os.replace(path + '.upgraded', path)
      else:
        failed.append(os.path.relpath(path, target))
      for leftover in (path + '.upgraded', path + '.report.txt'):
        if os.path.exists(leftover):
          os.remove(leftover)
  return failed


def run_diff(source: str, target: str) -> None:
  """target: a copy of source with migration-scan --diff's patch applied."""
  shutil.copytree(source, target)
  patch = target + '.patch'
  scanned = subprocess.run(
      [sys.executable, '-m', 'migration_tools.scanner', '.',
       f'--diff={patch}', f'--output={target}.report.txt'],
      cwd=target, capture_output=True, text=True, check=False,
      env={**os.environ, 'PYTHONPATH': REPO})
  if scanned.returncode not in (0, 1):
    raise RuntimeError(scanned.stderr)
  if os.path.getsize(patch):
    subprocess.run(['patch', '-p1', '-s', '-i', patch], cwd=target,
                   check=True)


def compare(paths: list[str]) -> Comparison:
  with tempfile.TemporaryDirectory() as work:
    original = os.path.join(work, 'original')
    os.mkdir(original)
    for path in paths:
      destination = os.path.join(original, os.path.basename(path))
      (shutil.copytree if os.path.isdir(path) else shutil.copy)(
          path, destination)
    upgraded, patched = (os.path.join(work, n) for n in ('upgraded',
                                                          'patched'))
    failed = run_tf_upgrade_v2(original, upgraded)
    run_diff(original, patched)
    return Comparison(count(original), count(upgraded), count(patched),
                      tuple(failed))


def main(argv: list[str]) -> None:
  paths = argv[1:] or [SOURCES]
  comparison = compare(paths)
  print(f'{"":<22} step-1 findings')
  for label, counts in (('before', comparison.before),
                        ('after tf_upgrade_v2', comparison.tf_upgrade_v2),
                        ('after --diff', comparison.diff)):
    print(f'{label:<22} {counts}')
  for name in comparison.tf_upgrade_v2_failed:
    print(f'tf_upgrade_v2 could not rewrite {name}: counted as it was')


if __name__ == '__main__':
  main(sys.argv)
