"""Each TF 1 optimizer, the Keras optimizer and settings that reproduce it,
and what differs in Keras's defaults: the guide's table
(docs/MIGRATION.md, "TF 1 optimizers"), read from here, and backed by a test
per row (tests/tools/test_tf1_optimizers.py) that runs both on the same
gradients and judges every update with the ``updates`` check's bar.

``RMSpropFromOnes`` is the one setting Keras has no argument for: TF 1's
RMSPropOptimizer starts its mean-square slot at 1, Keras's RMSprop at 0.
"""
# migration-scan: skip-file (it names TF 1 optimizers on purpose)
import dataclasses
from typing import Callable

import tensorflow as tf


class RMSpropFromOnes(tf.keras.optimizers.RMSprop):
  """Keras's RMSprop with its mean-square slots ('velocity') starting at 1,
  as TF 1's RMSPropOptimizer starts its 'rms' slots. From 0, the first step
  is lr * g / sqrt((1 - rho) * g^2): about 3.2 lr at rho=0.9 for every
  weight, whatever its gradient; from 1 it is about lr * g, as in TF 1."""

  def build(self, var_list):
    # Keras 2 builds once per variable list, Keras 3 once: fill only the
    # slots this call made.
    before = {id(v) for v in getattr(self, '_velocities', ())}
    super().build(var_list)
    for velocity in self._velocities:
      if id(velocity) not in before:
        velocity.assign(tf.ones(velocity.shape, velocity.dtype))


@dataclasses.dataclass(frozen=True)
class Row:
  """One TF 1 optimizer.

  legacy: the TF 1 constructor, as written in a model_fn (rate 0.1).
  make_legacy: (rate) -> that optimizer.
  keras: the Keras optimizer and settings that reproduce it ('' if none).
  make_keras: (rate) -> that optimizer; None if none reproduces it.
  differences: each way Keras's defaults (or Keras itself) compute
    otherwise, as the guide says it.
  keras_defaults: (rate) -> the Keras counterpart as it is, with its own
    defaults, which does *not* reproduce it (the test proves the
    differences matter); None where the defaults agree.
  sparse_reproduced: whether the Keras settings also reproduce its updates
    of an embedding whose rows looked up change from step to step. TF 1's
    sparse updates of Momentum, RMSProp, Adadelta and Ftrl touch only the
    rows looked up (their slots stand still elsewhere); Keras's move every
    row's slots at every step.
  """
  legacy: str
  make_legacy: Callable
  keras: str
  make_keras: Callable | None
  differences: tuple[str, ...]
  keras_defaults: Callable | None = None
  sparse_reproduced: bool = True


_V1 = tf.compat.v1.train
_K = tf.keras.optimizers

ROWS = (
    Row('GradientDescentOptimizer(lr)',
        lambda lr: _V1.GradientDescentOptimizer(lr), 'SGD(lr)',
        lambda lr: _K.SGD(lr), ()),
    Row('MomentumOptimizer(lr, 0.9)',
        lambda lr: _V1.MomentumOptimizer(lr, 0.9), 'SGD(lr, momentum=0.9)',
        lambda lr: _K.SGD(lr, momentum=0.9),
        ('the slot holds the accumulated gradients in TF 1 (a = 0.9a + g; '
         'w -= lr a), the accumulated steps in Keras (v = 0.9v - lr g; '
         'w += v): v = -lr a, the same updates while the rate is constant; '
         'a rate schedule changes the rate inside the average in Keras only',),
        sparse_reproduced=False),
    Row('MomentumOptimizer(lr, 0.9, use_nesterov=True)',
        lambda lr: _V1.MomentumOptimizer(lr, 0.9, use_nesterov=True),
        'SGD(lr, momentum=0.9, nesterov=True)',
        lambda lr: _K.SGD(lr, momentum=0.9, nesterov=True),
        ('as MomentumOptimizer',),
        sparse_reproduced=False),
    Row('AdamOptimizer(lr)', lambda lr: _V1.AdamOptimizer(lr),
        'Adam(lr, epsilon=1e-8)', lambda lr: _K.Adam(lr, epsilon=1e-8),
        ('epsilon: 1e-8 in TF 1, 1e-7 in Keras',),
        lambda lr: _K.Adam(lr)),
    Row('RMSPropOptimizer(lr)', lambda lr: _V1.RMSPropOptimizer(lr),
        'RMSpropFromOnes(lr, epsilon=1e-10)',
        lambda lr: RMSpropFromOnes(lr, epsilon=1e-10),
        ('the mean-square slot starts at 1 in TF 1, at 0 in Keras '
         '(RMSpropFromOnes starts it at 1)',
         'epsilon: 1e-10 in TF 1, 1e-7 in Keras; both add it inside the '
         'square root',
         'TF 1 keeps a momentum slot even at momentum 0 (it holds the last '
         'step); Keras keeps none, and the kit does not compare it'),
        lambda lr: _K.RMSprop(lr),
        sparse_reproduced=False),
    Row('RMSPropOptimizer(lr, decay=0.9, momentum=0.9, epsilon=1e-3)',
        lambda lr: _V1.RMSPropOptimizer(lr, decay=0.9, momentum=0.9,
                                        epsilon=1e-3),
        'RMSpropFromOnes(lr, rho=0.9, momentum=0.9, epsilon=1e-3)',
        lambda lr: RMSpropFromOnes(lr, rho=0.9, momentum=0.9, epsilon=1e-3),
        ('decay is Keras\'s rho',
         'the mean-square slot starts at 1 in TF 1, at 0 in Keras',
         'the momentum slot holds the steps on both (no scale)'),
        lambda lr: _K.RMSprop(lr, rho=0.9, momentum=0.9, epsilon=1e-3),
        sparse_reproduced=False),
    Row('RMSPropOptimizer(lr, centered=True)',
        lambda lr: _V1.RMSPropOptimizer(lr, centered=True),
        'RMSpropFromOnes(lr, epsilon=1e-10, centered=True)',
        lambda lr: RMSpropFromOnes(lr, epsilon=1e-10, centered=True),
        ('as RMSPropOptimizer; the mean-gradient slot starts at 0 on both',),
        lambda lr: _K.RMSprop(lr, centered=True),
        sparse_reproduced=False),
    Row('AdagradOptimizer(lr)', lambda lr: _V1.AdagradOptimizer(lr),
        'Adagrad(lr, epsilon=0)', lambda lr: _K.Adagrad(lr, epsilon=0.0),
        ('TF 1 adds no epsilon (w -= lr g / sqrt(acc)); Keras adds 1e-7 '
         'inside the square root',
         'the accumulator starts at 0.1 on both'),
        lambda lr: _K.Adagrad(lr)),
    Row('AdadeltaOptimizer(lr)', lambda lr: _V1.AdadeltaOptimizer(lr),
        'Adadelta(lr, epsilon=1e-8)',
        lambda lr: _K.Adadelta(lr, epsilon=1e-8),
        ('epsilon: 1e-8 in TF 1, 1e-7 in Keras; rho 0.95 on both',),
        lambda lr: _K.Adadelta(lr),
        sparse_reproduced=False),
    Row('FtrlOptimizer(lr, l1_regularization_strength=0.001)',
        lambda lr: _V1.FtrlOptimizer(lr, l1_regularization_strength=0.001),
        'Ftrl(lr, l1_regularization_strength=0.001)',
        lambda lr: _K.Ftrl(lr, l1_regularization_strength=0.001),
        ('the accumulator starts at 0.1 on both; beta is folded into the '
         'l2 strength on both (l2 + beta / (2 lr))',),
        sparse_reproduced=False),
    Row('ProximalAdagradOptimizer(lr)',
        lambda lr: _V1.ProximalAdagradOptimizer(lr), '', None,
        ('no Keras optimizer: write one (a keras.optimizers.Optimizer '
         'subclass); the kit reads the TF 1 one by what it does and pairs '
         'the slots through Port.slot_map',)),
    Row('ProximalGradientDescentOptimizer(lr)',
        lambda lr: _V1.ProximalGradientDescentOptimizer(lr), '', None,
        ('no Keras optimizer: at l1 = l2 = 0 it is SGD(lr); else write '
         'one',)),
    Row('AdagradDAOptimizer(lr, global_step)',
        lambda lr: _V1.AdagradDAOptimizer(
            lr, tf.compat.v1.train.get_or_create_global_step()), '', None,
        ('no Keras optimizer: write one; its update reads the global step',)),
)


def markdown_table() -> str:
  """The guide's table, a row per TF 1 optimizer."""
  lines = ['| TF 1 (`tf.compat.v1.train.`) | Keras (`keras.optimizers.`) '
           'that reproduces it | what differs | an embedding |',
           '| --- | --- | --- | --- |']
  for row in ROWS:
    keras = f'`{row.keras}`' if row.keras else 'none'
    sparse = ('' if row.make_keras is None else 'the same' if
              row.sparse_reproduced else 'differs: TF 1 moves only the rows '
              'looked up')
    lines.append(f'| `{row.legacy}` | {keras} | '
                 f'{"; ".join(row.differences) or "nothing"} | {sparse} |')
  return '\n'.join(lines)
