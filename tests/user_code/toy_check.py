"""A toy check, registered as a team would add one: this file and its test
(tests/tools/test_registry.py), nothing else edited.

It compares nothing: it waits TOY_CHECK_SECONDS (default 1), saying so, to
show a long check's progress lines.
"""
import os
import time

from migration_tools.compare import checks
from migration_tools.compare import registry


def wait(run, replicas) -> checks.CheckResult:
  del replicas  # Once, after the replica runs.
  seconds = float(os.environ.get('TOY_CHECK_SECONDS', '1'))
  run.progress.now('toy_wait: waiting')
  time.sleep(seconds)
  return checks.CheckResult('toy_wait', checks.PASSED,
                            f'waited {seconds:g} s',
                            figures={'waited_s': seconds,
                                     'steps': len(run.batches)})


CHECK = registry.register(registry.Check(
    'toy_wait', 'nothing: it waits, to show the progress lines',
    registry.AFTER, wait, bar='none'))
