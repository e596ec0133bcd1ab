"""speed: how a timing becomes a finding, on figures given by hand (the
timing itself runs in test_compare.py's end-to-end tests)."""
from migration_tools.compare import checks
from migration_tools.compare.checks import speed


def _rate(examples_per_s, spread=0.02):
  return {'examples_per_s': examples_per_s, 'window_rates': [examples_per_s],
          'spread': spread}


TABLE = speed.kernel_table({'Conv2D': 10.0, 'MatMul': 2.0, 'Relu': 1.0},
                           {'Conv2D': 30.0, 'MatMul': 2.5, 'Cast': 4.0})


def test_kernels_are_listed_by_how_much_their_time_differs():
  assert [(r['kernel'], r['difference_ms']) for r in TABLE] == [
      ('Conv2D', 20.0), ('Cast', 4.0), ('Relu', -1.0), ('MatMul', 0.5)]
  assert len(speed.kernel_table({str(i): i for i in range(9)}, {})) == (
      speed.SHOWN)


def test_a_port_within_the_margin_passes_with_its_figures():
  result = speed.judge('speed (1 replica)', _rate(1000), _rate(950), TABLE)
  assert result.status == checks.PASSED
  assert result.figures['ratio'] == 0.95
  assert result.message.startswith(
      'the port trains at 0.95x the legacy step: 950 examples/s (spread 2%) '
      'against 1000 (spread 2%); kernels that differ most, ms per step legacy '
      '-> port: Conv2D 10.00 -> 30.00, Cast 0.00 -> 4.00')


def test_a_slower_port_is_for_review_and_fails_nothing():
  result = speed.judge('speed (1 replica)', _rate(1000), _rate(500), TABLE)
  assert result.status == checks.REVIEW and not result.failed
  assert 'below 90% of the legacy rate: look at the kernels above' in (
      result.message)
  assert result.summary().startswith('REVIEW speed (1 replica): the port '
                                     'trains at 0.50x')
  assert result.figures['kernels'] == TABLE


def test_from_a_bundle_only_the_port_is_timed():
  result = speed.judge('speed (2 replicas)', None, _rate(700), None)
  assert result.status == checks.SKIPPED
  assert result.message.startswith('the port trains at 700 examples/s')
  assert 'timed live only' in result.message
  assert 'ratio' not in result.figures


def test_timed_warms_up_once_then_times_each_window():
  calls = []
  figures = speed.timed(lambda: calls.append(1), examples=64, windows=3)
  assert len(calls) == 4 and len(figures['window_rates']) == 3
  assert figures['examples_per_s'] > 0 and figures['spread'] >= 0
