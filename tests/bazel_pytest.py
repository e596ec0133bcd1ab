"""Runs one test file under pytest (setup.cfg's options: the default run,
no slow test, no catalogue): the main of every Bazel py_test here.

  bazel test //tests:test_scan     (BUILD passes the file as the argument)
"""
import os
import sys

import pytest

if __name__ == '__main__':
  # The runfiles root holds the repository's files as they are in the tree.
  here = os.path.dirname(os.path.abspath(__file__))
  os.chdir(os.path.dirname(here))
  sys.exit(pytest.main(['-p', 'no:cacheprovider', '-q', *sys.argv[1:]]))
