"""A check's bar, declared once (``Bar``): the values its judge applies,
built from the measured rules of tolerances.py, and the words that --help,
the report and the docs table print from those same values, so that none
of them can say another bar than the one applied.

Each check of the kit declares its ``BAR`` beside its judge (checks/<name>.py),
hands it to its ``registry.Check`` and its judge takes it (``bar=``).
"""
from __future__ import annotations

import dataclasses

from migration_tools import tolerances

# What a bar with the port's own noise adds (one_step, stepwise, updates):
# a difference counts only beyond this multiple of the noise measured in the
# same run (compare/noise.py).
NOISE_WORDS = (f'{tolerances.NOISE_MULTIPLE:g}x the port\'s own noise on '
               'each tensor (its step again, the examples reordered)')


def bar_text(value: float) -> str:
  """A bar's value as the docs write it: 1e-6, 2.5e-7, 5e-5."""
  mantissa, exponent = f'{value:e}'.split('e')
  return f'{float(mantissa):g}e{int(exponent)}'


@dataclasses.dataclass(frozen=True)
class Bar:
  """What a check holds the port to.

  atol: the absolute bar on its figure, or None.
  rtol: the bar relative to each value's scale, or None; with atol, the
    bar is atol + rtol x scale.
  scale: what rtol is relative to, where atol is given too ('the legacy
    rate').
  ulps: a difference within this many float32 units in the last place of
    the value is rounding, not counted; None: every difference counts.
  noise: '' (no noise measured), 'beyond' (a difference counts beyond the
    port's own noise, NOISE_WORDS) or 'or' (the bar is the larger of the two).
  multiple: the bar as a multiple of a figure measured in the run (scale
    names it), or None.
  words: what the numbers do not say ('integers exact'), or the whole rule
    where it is no tolerance ('exact', 'none found').
  """
  atol: float | None = None
  rtol: float | None = None
  scale: str = ''
  ulps: int | None = None
  noise: str = ''
  multiple: float | None = None
  words: str = ''

  def __post_init__(self):
    if self.noise not in ('', 'beyond', 'or'):
      raise ValueError(f'Bar.noise is \'\', \'beyond\' or \'or\', not '
                       f'{self.noise!r}')

  def text(self) -> str:
    """The bar in words, as --help, the report and the docs table show it."""
    parts = []
    if self.atol is not None and self.rtol is not None:
      parts.append(f'{bar_text(self.atol)} + {bar_text(self.rtol)} x '
                   f'{self.scale}')
    elif self.atol is not None:
      parts.append(bar_text(self.atol))
    elif self.rtol is not None:
      parts.append(f'relative {bar_text(self.rtol)}')
    if self.multiple is not None:
      parts.append(f'{self.multiple:g}x {self.scale}')
    if self.noise:
      parts.append(f'{self.noise} {NOISE_WORDS}')
    if self.ulps is not None:
      parts.append(f'{self.ulps} units in the last place are rounding')
    return '; '.join(p for p in (', '.join(parts), self.words) if p)

  def to_json(self) -> dict:
    """The report's 'bar' of a check: its values and its words."""
    return {'atol': self.atol, 'rtol': self.rtol, 'ulps': self.ulps,
            'multiple': self.multiple,
            'noise_multiple': (tolerances.NOISE_MULTIPLE if self.noise
                               else None),
            'text': self.text()}
