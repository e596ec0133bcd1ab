"""Timing helpers every benchmark shares, on any framework: no framework is
imported here (throughput_jax.py runs where there is no TensorFlow)."""
import statistics
import time
from typing import Callable


def median_rate(stamps: list, steps_per_window: int, batch: int) -> dict:
  """Examples/s from window-end timestamps; stamps[0] ends the warm-up."""
  rates = [steps_per_window * batch / (b - a)
           for a, b in zip(stamps, stamps[1:])]
  return {'examples_per_second': statistics.median(rates),
          'window_rates': rates}


def median_seconds(run: Callable[[], object], repeats: int) -> float:
  """The median time of run() after two warm-up calls (tracing or
  compiling, first-call setup). run() must return once its work is done
  (a tf.function on a CPU does; wait on a JAX array inside it)."""
  run()
  run()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return statistics.median(times)
