"""The legacy step's dropout masks handed to a port's dropout calls
(pair/masks.py): laid out for each call's input, taken in order, and a call
or a mask that does not pair named."""
import contextlib
import os

import numpy as np
import pytest

from migration_tools.pair import masks
from migration_tools.pair import port_draws


def test_a_mask_is_laid_out_for_the_input_that_takes_it():
  mask = np.arange(24).reshape(2, 3, 4) % 2 == 0
  assert masks.fit(mask, (2, 3, 4)) is not None
  # A noise shape broadcasts: drop connect's [batch, 1, 1, 1].
  per_example = np.array([True, False]).reshape(2, 1, 1, 1)
  fitted = masks.fit(per_example, (2, 8, 5, 5))
  assert fitted.shape == (2, 8, 5, 5) and not fitted[1].any()
  # A convolution's channels-last mask for a channels-first input.
  nhwc = np.random.default_rng(0).random((2, 5, 6, 3)) > 0.5
  nchw = masks.fit(nhwc, (2, 3, 5, 6))
  np.testing.assert_array_equal(nchw, np.transpose(nhwc, (0, 3, 1, 2)))
  assert masks.fit(mask, (2, 4, 3)) is None


def test_masks_are_taken_in_order_and_every_one_must_be():
  handed = masks.Handed([np.ones((2, 3), bool), np.zeros((2, 4), bool)],
                        ['a/RandomUniform', 'b/RandomUniform'])
  assert handed.take((2, 3), 'port.py:1').all()
  with pytest.raises(masks.DropoutMismatch,
                     match=r"the port's step made 1 dropout call where the "
                     r'legacy step drew 2 masks; none took b/RandomUniform'):
    handed.finish()
  assert not handed.take((2, 4), 'port.py:2').any()
  handed.finish()
  with pytest.raises(masks.DropoutMismatch,
                     match=r"the port's dropout at port.py:3 is call 3 of its "
                     r'step, where the legacy step drew 2 dropout masks'):
    handed.take((2, 4), 'port.py:3')


def test_a_call_whose_input_the_mask_does_not_fit_is_named():
  handed = masks.Handed([np.ones((2, 3), bool)], ['a/RandomUniform'])
  with pytest.raises(masks.DropoutMismatch,
                     match=r"call 1 \(at port.py:9\) takes a tensor of shape "
                     r"\[2, 7\], where the legacy's mask 1 \(a/RandomUniform\) "
                     r'is \[2, 3\]'):
    handed.take((2, 7), 'port.py:9')


def test_the_ports_place_is_found_by_where_the_libraries_are_installed():
  # A port in a folder named like its framework (a clone in .../torch/kit)
  # is the port's; the library's own frames, and the kit's, are not.
  library = os.path.join(os.path.dirname(np.__file__), 'core', 'numeric.py')
  kit = masks.__file__
  frames = [('/home/team/torch/kit/port.py', 12), (library, 40), (kit, 7),
            ('<frozen runpy>', 88)]
  assert masks.port_site(frames, ('numpy',)) == 'port.py:12'
  assert masks.port_site(frames[1:], ('numpy',)) == 'an unknown place'


def test_a_ports_own_draws_are_recorded_in_its_steps_only():
  seen = []

  @contextlib.contextmanager
  def watch():  # A framework's: it tells of each draw it sees.
    seen.append('watching')
    yield

  assert port_draws.current() is None
  with port_draws.stepping():  # Outside a scope: nothing watches.
    port_draws.drew('port.py:1', 'rand')
  with port_draws.recording(watch, 'draw it otherwise') as draws:
    port_draws.drew('port.py:2', 'rand')  # Told outside a step, as at init.
    with port_draws.stepping():
      port_draws.drew('port.py:3', 'torch.rand')
    assert seen == ['watching']
    assert port_draws.current() == {
        'switched_off': {}, 'left': {'port.py:2': 'rand',
                                     'port.py:3': 'torch.rand'},
        'remedy': 'draw it otherwise'}
  assert port_draws.current() is None and draws.left


def test_a_mismatch_names_the_draws_that_took_no_mask():
  draws = port_draws.Draws('Draw it with F.dropout.')
  with pytest.raises(masks.DropoutMismatch, match=r'^none$'):
    with masks.naming(draws, draws.remedy):
      raise masks.DropoutMismatch('none')  # Nothing drawn: as it was.
  draws.drawn['port.py:7'] = 'torch.rand_like'
  with pytest.raises(masks.DropoutMismatch) as raised:
    with masks.naming(draws, draws.remedy):
      raise masks.DropoutMismatch('the port\'s step made 0 dropout calls')
  assert str(raised.value) == (
      "the port's step made 0 dropout calls; the step also drew with "
      'torch.rand_like at port.py:7, which takes no mask. Draw it with '
      'F.dropout.')
