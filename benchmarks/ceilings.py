"""What the machine and the model allow: the ceilings trainers are held to.

  python benchmarks/ceilings.py [--batch_size=1024] [--report=ceilings.json]

Two ceilings, in each precision a trainer runs in (float32, mixed_bfloat16):

- **The matmul ceiling**: the FLOP/s of a large square ``tf.matmul`` in that
  dtype, about the best this CPU does (with AMX, bfloat16 matmuls run on its
  tiles; with AVX512_BF16 on its dot-product instructions).
- **The model's kernels alone**: every convolution and dense layer of the
  kit's CNN, its forward pass, weight gradient and input gradient, each run
  by itself at the global batch on the kernel TensorFlow picks for it
  (oneDNN's, where it is on). Their times add up to the least a training step
  can take on TensorFlow's kernels for these shapes; the examples/s that
  allows is what a trainer would reach if nothing else ran.

How to read the two: a trainer near its kernels alone but far below the
matmul ceiling is held back by TensorFlow's kernels for these layer shapes,
which no port can change; a trainer far below its kernels alone loses its
time elsewhere (casts, layout changes, pooling, the optimizer, the host), and
benchmarks/kernels.py shows where. benchmarks/throughput.py measures both
ceilings in its own process and holds each trainer to them.
"""
import dataclasses
import statistics
import sys
import time
from typing import Callable

from absl import app
from absl import flags
import tensorflow as tf

import flops as flops_lib  # pylint: disable=g-bad-import-order
import timing  # pylint: disable=g-bad-import-order
from kit_core import atomic  # pylint: disable=g-import-not-at-top
from kit_core import cpu  # pylint: disable=g-import-not-at-top
from migrate import model as model_lib  # pylint: disable=g-import-not-at-top

# The ceiling each trainer is held to, by the precision of its math.
CEILING_DTYPES = {'float32': tf.float32, 'mixed_bfloat16': tf.bfloat16}

# The activations the kit's layers use, as the ops a fused kernel takes in.
_ACTIVATIONS = {'relu': tf.nn.relu, 'linear': tf.identity}


def matmul_flops_per_second(size: int, dtype: tf.DType = tf.float32,
                            repeats: int = 10) -> float:
  """FLOP/s of a size x size matmul in dtype, the median of several."""
  a = tf.cast(tf.random.normal([size, size]), dtype)
  b = tf.cast(tf.random.normal([size, size]), dtype)
  matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
  matmul(a, b).numpy()  # Traces and warms up.
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a, b).numpy()
    times.append(time.perf_counter() - start)
  return 2 * size ** 3 / statistics.median(times)


# ------------------------------------------------- the kernels, one by one --

@dataclasses.dataclass(frozen=True)
class Part:
  """One kernel of a training step: a layer's forward pass or a gradient."""
  layer: str
  part: str  # 'forward', 'weight gradient' or 'input gradient'.
  dtype: str  # The layer's compute dtype.
  flops: int  # For the whole batch.
  run: Callable[[], tf.Tensor]
  shape: tuple[int, ...]  # What run() returns: the output or the gradient.


def _random(shape, dtype: str) -> tf.Tensor:
  return tf.cast(tf.random.normal([int(d) for d in shape]), dtype)


Kernels = dict[str, tuple[Callable[[], tf.Tensor], tuple[int, ...]]]


def _conv_parts(layer, batch: int) -> Kernels:
  """The three kernels of a Conv2D layer, on random tensors of its shapes,
  each with the shape it returns."""
  dtype = layer.compute_dtype
  x = _random([batch, *layer.input.shape[1:]], dtype)
  dy = _random([batch, *layer.output.shape[1:]], dtype)
  kernel = _random(layer.kernel.shape, dtype)
  bias = _random(layer.bias.shape, dtype)
  strides = [1, *layer.strides, 1]
  padding = layer.padding.upper()
  activation = _ACTIVATIONS[layer.activation.__name__]
  # As the model runs them: conv, bias and activation, which Grappler fuses
  # into one kernel (_FusedConv2D), as it does in the trainers' steps.
  forward = tf.function(lambda: activation(tf.nn.bias_add(
      tf.nn.conv2d(x, kernel, strides, padding), bias)))
  weight = tf.function(lambda: tf.raw_ops.Conv2DBackpropFilter(
      input=x, filter_sizes=tf.shape(kernel), out_backprop=dy,
      strides=strides, padding=padding))
  inputs = tf.function(lambda: tf.raw_ops.Conv2DBackpropInput(
      input_sizes=tf.shape(x), filter=kernel, out_backprop=dy,
      strides=strides, padding=padding))
  return {'forward': (forward, tuple(dy.shape)),
          'weight gradient': (weight, tuple(kernel.shape)),
          'input gradient': (inputs, tuple(x.shape))}


def _dense_parts(layer, batch: int) -> Kernels:
  """The three matmuls of a Dense layer, on random tensors of its shapes,
  each with the shape it returns."""
  dtype = layer.compute_dtype
  inputs, out = layer.kernel.shape
  x = _random([batch, inputs], dtype)
  dy = _random([batch, out], dtype)
  kernel = _random([inputs, out], dtype)
  bias = _random([out], dtype)
  activation = _ACTIVATIONS[layer.activation.__name__]
  forward = tf.function(lambda: activation(tf.nn.bias_add(
      tf.matmul(x, kernel), bias)))
  weight = tf.function(lambda: tf.matmul(x, dy, transpose_a=True))
  input_gradient = tf.function(lambda: tf.matmul(dy, kernel,
                                                 transpose_b=True))
  return {'forward': (forward, (batch, out)),
          'weight gradient': (weight, (inputs, out)),
          'input gradient': (input_gradient, (batch, inputs))}


def training_parts(model: tf.keras.Model, batch: int) -> list[Part]:
  """Every counted kernel of a training step of model, in the order of its
  layers; the first layer has no input gradient (its input needs none), as
  training_flops_per_example counts it."""
  parts = []
  counted = [layer for layer in model.layers if flops_lib.forward_flops(layer)]
  for layer in counted:
    builder = (_conv_parts if isinstance(layer, tf.keras.layers.Conv2D)
               else _dense_parts)
    for name, (run, shape) in builder(layer, batch).items():
      if name == 'input gradient' and layer is counted[0]:
        continue
      parts.append(Part(layer.name, name, layer.compute_dtype,
                        flops_lib.forward_flops(layer) * batch, run,
                        tuple(int(d) for d in shape)))
  return parts


def kernels_alone(precision: str, batch: int, repeats: int = 10) -> dict:
  """Each kernel of the kit's CNN in precision timed alone, and the step
  they allow: examples/s and FLOP/s if the step ran nothing else."""
  model = model_lib.build_model(precision=precision)
  kernels = []
  for part in training_parts(model, batch):
    # A kernel fed the wrong tensors would time something else.
    shape = tuple(part.run().shape)
    if shape != part.shape:
      raise AssertionError(f'{part.layer} {part.part} returned {shape}, '
                           f'not {part.shape}')
    seconds = timing.median_seconds(part.run, repeats)
    kernels.append({'layer': part.layer, 'part': part.part,
                    'dtype': part.dtype, 'seconds': seconds,
                    'flops_per_second': part.flops / seconds})
  seconds = sum(k['seconds'] for k in kernels)
  flops = flops_lib.training_flops_per_example(model)['training'] * batch
  return {'kernels': kernels, 'seconds_per_step': seconds,
          'examples_per_second': batch / seconds,
          'flops_per_second': flops / seconds}


def measure(batch: int, matmul_size: int, repeats: int,
            precisions=tuple(CEILING_DTYPES)) -> dict:
  """Both ceilings in every precision asked, logged as they come."""
  report = {}
  for precision in precisions:
    dtype = CEILING_DTYPES[precision]
    matmul = matmul_flops_per_second(matmul_size, dtype)
    print(f'{precision}: matmul ceiling {matmul / 1e9:.1f} GFLOP/s',
          file=sys.stderr, flush=True)
    alone = kernels_alone(precision, batch, repeats)
    alone['fraction_of_matmul'] = alone['flops_per_second'] / matmul
    for kernel in alone['kernels']:
      kernel['fraction_of_matmul'] = kernel['flops_per_second'] / matmul
    print(f'{precision}: the model\'s kernels alone '
          f'{alone["flops_per_second"] / 1e9:.1f} GFLOP/s',
          file=sys.stderr, flush=True)
    report[precision] = {'matmul_flops_per_second': matmul,
                         'kernels_alone': alone}
  return report


def table(report: dict, batch: int) -> str:
  """Each precision's kernels: ms per step, GFLOP/s, of the matmul ceiling."""
  lines = []
  for precision, figures in report.items():
    alone = figures['kernels_alone']
    lines += [f'{precision}: the model\'s kernels alone take '
              f'{alone["seconds_per_step"] * 1e3:.0f} ms per step of '
              f'{batch}: {alone["examples_per_second"]:,.0f} examples/s, '
              f'{alone["flops_per_second"] / 1e9:.0f} GFLOP/s, '
              f'{alone["fraction_of_matmul"]:.0%} of the '
              f'{figures["matmul_flops_per_second"] / 1e9:.0f} GFLOP/s '
              'matmul ceiling',
              '| layer | kernel | dtype | ms | GFLOP/s | of the matmul ceiling |',
              '| --- | --- | --- | ---: | ---: | ---: |']
    for k in alone['kernels']:
      lines.append(f'| {k["layer"]} | {k["part"]} | {k["dtype"]} | '
                   f'{k["seconds"] * 1e3:.1f} | '
                   f'{k["flops_per_second"] / 1e9:.0f} | '
                   f'{k["fraction_of_matmul"]:.0%} |')
    lines.append('')
  return '\n'.join(lines)


FLAGS = flags.FLAGS


def _define_flags() -> None:
  """This script's flags; apart, as benchmarks/throughput.py imports the
  module and has flags of the same names."""
  flags.DEFINE_integer('batch_size', 1024, 'Global batch of the step.',
                       lower_bound=1)
  flags.DEFINE_integer('matmul_size', 4096, 'Side of the square matmuls.',
                       lower_bound=16)
  flags.DEFINE_integer('repeats', 10, 'Timed calls per kernel (the median '
                       'counts).', lower_bound=1)
  flags.DEFINE_string('report', 'ceilings.json', 'Where the JSON goes.')


def main(argv: list[str]) -> None:
  del argv
  tf.get_logger().setLevel('ERROR')
  report = measure(FLAGS.batch_size, FLAGS.matmul_size, FLAGS.repeats)
  print(table(report, FLAGS.batch_size), end='')
  print(f'{cpu.name()}; TensorFlow {tf.__version__}; flags: ' + ' '.join(
      flag for flag, present in cpu.matmul_flags().items() if present))
  atomic.write_json(FLAGS.report, {
      'batch_size': FLAGS.batch_size, 'matmul_size': FLAGS.matmul_size,
      'precisions': report,
      'machine': {'cpu': cpu.name(), 'cpu_flags': cpu.matmul_flags(),
                  'tensorflow': tf.__version__}})
  print(f'JSON: {FLAGS.report}')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
