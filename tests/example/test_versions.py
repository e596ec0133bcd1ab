"""Which Estimator build runs: the report must follow the files, not pip's list."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from estimator_mnist import versions

# Commands in subprocesses and training jobs: apart from the fast tier.
pytestmark = pytest.mark.e2e

NIGHTLY = 'tf-estimator-nightly==2.16.0.dev2024012409'


def test_report_matches_the_installed_files():
  build = versions.estimator_build()
  assert build['dist'] in build['installed']
  assert build['version'] == build['installed'][build['dist']]
  assert os.path.isdir(build['path'])


def test_nightly_files_in_front_are_reported_and_run(tmp_path,
                                                      fake_data_dir):
  """Installs the nightly (from the package registry) ahead on sys.path."""
  target = tmp_path / 'nightly'
  install = subprocess.run(
      [sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps',
       '--target', str(target), NIGHTLY],
      capture_output=True, text=True, timeout=300, check=False)
  assert install.returncode == 0, (
      f'could not install {NIGHTLY} from the package registry: '
      f'{install.stderr[-1500:]}')
  env = dict(os.environ, PYTHONPATH=f'{target}{os.pathsep}{REPO}')

  def run(*args):
    return subprocess.run([sys.executable, '-m', 'estimator_mnist', *args],
                          cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)

  report = run('--version')
  assert report.returncode == 0, report.stderr[-1500:]
  assert re.search(r'^estimator tf-estimator-nightly==2\.16\.0\.dev2024012409 '
                   rf'\(files in {re.escape(str(target))}', report.stdout,
                   re.M), report.stdout
  # And the legacy model really trains on it.
  trained = run(f'--data_dir={fake_data_dir.data_dir}',
                f'--model_dir={tmp_path / "model"}', '--train_steps=5',
                '--batch_size=32', '--noenable_predict')
  assert trained.returncode == 0, trained.stderr[-2000:]
  assert 'Eval accuracy:' in trained.stdout
