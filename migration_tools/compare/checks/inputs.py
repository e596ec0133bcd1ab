"""inputs: the port's input pipeline against the legacy input_fn, on each
replica count: examples per step, every feature and label.
"""
from __future__ import annotations

import numpy as np

from migration_tools import outputs
from migration_tools import tolerances
from migration_tools.compare.bars import Bar
from migration_tools.compare.context import Replicas
from migration_tools.compare.context import Run
from migration_tools.compare.registry import Check
from migration_tools.compare.registry import EACH
from migration_tools.compare.verdict import CheckResult
from migration_tools.compare.verdict import FAILED
from migration_tools.compare.verdict import judged
from migration_tools.compare.verdict import SKIPPED

# The bar: every input array within an absolute bar.
BAR = Bar(atol=tolerances.INPUT_ATOL)


def judge(legacy_batch: tuple, port_batch: tuple | None, bar: Bar = BAR
          ) -> CheckResult:
  """The port's input pipeline gives the legacy input_fn's first batch.

  Args:
    legacy_batch, port_batch: (features, labels) of the first global batch
      (the port's replicas concatenated); port_batch None if the port gives
      no input_pipeline.
  """
  if port_batch is None:
    return CheckResult('inputs', SKIPPED, 'the port gives no input_pipeline '
                       '(Port.input_pipeline) to compare with the legacy '
                       'input_fn')
  theirs = _leaves({'features': legacy_batch[0], 'labels': legacy_batch[1]}
                   if legacy_batch[1] is not None else
                   {'features': legacy_batch[0]})
  ours = _leaves({'features': port_batch[0], 'labels': port_batch[1]}
                 if port_batch[1] is not None else {'features': port_batch[0]})
  examples = [len(next(iter(theirs.values()))), len(next(iter(ours.values())))]
  figures = {'legacy_examples': examples[0], 'port_examples': examples[1]}
  if examples[0] != examples[1]:
    return CheckResult(
        'inputs', FAILED, f'the port\'s input pipeline gives {examples[1]} '
        f'examples per step where the legacy input_fn gives {examples[0]} '
        '(e.g. the global batch used as the per-replica batch)',
        figures=figures)
  if set(theirs) != set(ours):
    return CheckResult(
        'inputs', FAILED, 'the two pipelines yield other structures (legacy: '
        f'{sorted(theirs)}, port: {sorted(ours)}): the port\'s model must '
        'take the features as the legacy input_fn yields them',
        figures=figures)
  diffs = {k: outputs.output_diff(theirs[k], ours[k]) for k in theirs}
  worst = max(diffs, key=diffs.get)
  figures.update(worst=worst, **{
      f'{side}_range': [float(d[worst].min()), float(d[worst].max())]
      for side, d in (('legacy', theirs), ('port', ours))
      if outputs.numeric(d[worst]) and d[worst].size})
  said = outputs.non_finite(theirs[worst], ours[worst])
  return judged('inputs', diffs[worst], bar.atol, figures,
                f'the port\'s input pipeline gives another {worst} than the '
                'legacy input_fn for the same records' + (
                    f' ({worst} holds {said})' if said else '') + (
                    f' (legacy range {_range(figures["legacy_range"])}, port '
                    f'range {_range(figures["port_range"])})'
                    if 'port_range' in figures else '') +
                ': compare the preprocessing, e.g. a scaling, and the order')


def _leaves(structure) -> dict[str, np.ndarray]:
  """{path: array} of a tensor or a nested dict of them."""
  if isinstance(structure, dict):
    return {f'{k}/{p}'.rstrip('/'): v for k in sorted(structure)
            for p, v in _leaves(structure[k]).items()}
  return {'': np.asarray(structure)}


def _range(pair: list) -> str:
  return f'[{pair[0]:.3g}, {pair[1]:.3g}]'


def drive(run: Run, replicas: Replicas) -> CheckResult:
  # On several replicas, the port's own pipeline on that many (e.g. a
  # per-replica batch that is the global one shows only there).
  return judge(run.data.batches[0],
               replicas.port.first_pipeline_batch())


CHECK = Check(
    'inputs', 'the port\'s input pipeline against the `input_fn`: examples '
    'per step, every feature and label', EACH, drive,
    needs=('port.first_pipeline_batch',), bar=BAR,
    bare_on_first=True)
