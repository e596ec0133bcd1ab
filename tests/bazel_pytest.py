"""Runs one test file under pytest, its slow test left out: the main of every
Bazel py_test here.

  bazel test //tests:test_scan     (BUILD passes the file as the argument)
"""
import os
import sys

import pytest

if __name__ == '__main__':
  # The runfiles root holds the repository's files as they are in the tree.
  here = os.path.dirname(os.path.abspath(__file__))
  os.chdir(os.path.dirname(here))
  # The one slow test, a full default training job, runs under pytest only
  # (.ci/run runs both): Bazel would double CI's longest test.
  sys.exit(pytest.main(['-p', 'no:cacheprovider', '-q', '-m', 'not slow',
                        *sys.argv[1:]]))
