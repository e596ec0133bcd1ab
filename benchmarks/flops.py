"""What a training example of the kit's CNN costs, counted from its layers'
shapes: for a Keras model on TensorFlow (Keras 2 or 3) or on JAX (Keras 3),
so that every trainer's fraction of the ceiling divides by the same count.
No framework is imported here."""


def forward_flops(layer) -> int | None:
  """Multiply-adds x 2 of one example through layer; None: not counted.
  By the layer's class name, the same in Keras 2 and 3."""
  kind = type(layer).__name__
  if kind == 'Conv2D':
    _, height, width, out = layer.output.shape
    kernel_h, kernel_w, inputs, _ = layer.kernel.shape
    return 2 * height * width * out * kernel_h * kernel_w * inputs
  if kind == 'Dense':
    inputs, out = layer.kernel.shape
    return 2 * inputs * out
  return None


def training_flops_per_example(model) -> dict:
  """Multiply-adds x 2 of each layer's forward pass, from its shapes.

  Training costs the forward pass, the weight gradients (as much again) and
  the input gradients (as much again, except for the first layer, whose input
  needs none). Pooling, activations and the loss are left out: they are small
  next to the convolutions.
  """
  layers = {layer.name: forward_flops(layer) for layer in model.layers}
  layers = {name: flops for name, flops in layers.items() if flops}
  forward = sum(layers.values())
  first = next(iter(layers.values()))
  return {'forward_by_layer': layers, 'forward': forward,
          'training': 3 * forward - first}
