"""The loss-curve plot of the equivalence harness (``migration-compare``)."""

import matplotlib
matplotlib.use('Agg')  # Files only: no display on a server or in CI.
from matplotlib import pyplot  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from kit_core import atomic
from migration_tools import tolerances  # pylint: disable=wrong-import-position

# Differences below this are drawn on a linear scale, so that exact zeros
# (bit-identical steps) show on the axis instead of vanishing from a log plot.
_LINEAR_BELOW = 1e-9


def loss_curves(checks: list, path: str) -> None:
  """Legacy and port losses of every trajectory check, and |difference|
  (with the per-step differences of the stepwise checks).

  Written to a temporary name and renamed.
  """
  runs = [c for c in checks if 'port_losses' in c]
  figure, (losses, diffs) = pyplot.subplots(2, 1, figsize=(8, 7), sharex=True)
  for index, check in enumerate(runs):
    theirs = np.array(check['legacy_losses'])
    ours = np.array(check['port_losses'])
    steps = np.arange(1, len(theirs) + 1)
    color = f'C{index}'
    losses.plot(steps, theirs, color=color, label=f'legacy, {check["name"]}')
    losses.plot(steps, ours, color=color, linestyle='--', marker='.',
                markersize=3, label=f'port, {check["name"]}')
    diffs.plot(steps, np.abs(theirs - ours), color=color,
               label=check['name'] + ('' if check['judged_each_step'] else
                                      ' (free run, reported)'))
  for index, check in enumerate(c for c in checks if 'per_step_max_diff' in c):
    per_step = check['per_step_max_diff']
    diffs.plot(range(1, len(per_step) + 1), per_step, color=f'C{index + 1}',
               linestyle=':', label=f'{check["name"]}: re-synchronised each '
               'step (loss, state)')
  if runs:
    diffs.axhline(tolerances.TRAJECTORY_ATOL, color='gray', linestyle=':',
                  label='tolerance (a run that replays exactly)')
  losses.set_ylabel('training loss')
  if losses.get_legend_handles_labels()[0]:  # None when no run finished.
    losses.legend(fontsize='small')
  diffs.set_yscale('symlog', linthresh=_LINEAR_BELOW)
  diffs.set_ylim(bottom=0)
  diffs.set_ylabel('|legacy - port|')
  diffs.set_xlabel('step')
  if diffs.get_legend_handles_labels()[0]:
    diffs.legend(loc='upper left', fontsize='x-small')
  figure.suptitle('migration-compare: legacy model_fn vs port')
  figure.tight_layout()
  with atomic.temporary_path(path) as tmp:
    figure.savefig(tmp, dpi=100)
  pyplot.close(figure)
