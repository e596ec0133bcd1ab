"""Deliberate bugs in the kit's PyTorch port (kit_pair/mnist_torch.py), each
a mistake met in real PyTorch ports of TPU-era models; the checks must fail
them and name the cause (tests/tools/test_torch_ports.py)."""
import dataclasses

import numpy as np

from kit_pair import mnist_torch


class SummedGradients(mnist_torch.MnistTorch):
  """The replicas' gradients summed, as torch.distributed.all_reduce does by
  default (op=SUM) when a hand-written loop forgets to divide by the world
  size: on N replicas the step is N times the model_fn's."""

  def all_reduce(self, gradients):
    return sum(gradients)


def summed_gradients():
  return dataclasses.replace(mnist_torch.make_port(), make=SummedGradients)


class FlattenedNchw(mnist_torch.MnistTorch):
  """The feature map flattened in PyTorch's order (channels first), so that
  dense/kernel's rows meet other features than in the model_fn."""

  def __init__(self, params, replicas, dropout):
    super().__init__(params, replicas, dropout)
    net = self.module

    def forward(images, taps=None):
      import torch  # pylint: disable=g-import-not-at-top
      from torch.nn import functional  # pylint: disable=g-import-not-at-top
      y = images.permute(0, 3, 1, 2)
      y = functional.max_pool2d(torch.relu(net.conv1(y)), 2)
      y = functional.max_pool2d(torch.relu(net.conv2(y)), 2)
      y = torch.relu(net.dense(y.flatten(1)))
      return net.logits(net.dropout(y))

    net.forward = forward


def flattened_nchw():
  return dataclasses.replace(mnist_torch.make_port(), make=FlattenedNchw,
                             layer_outputs=None)


class NanEveryOtherPredict(mnist_torch.MnistTorch):
  """A softmax of the logits x 1.01 (a bug that fails inference alone),
  behind a predict that gives NaN on every other call (a stale cache, a
  counter in the forward): the kit's forward noise, its second call, once
  took that NaN for rounding and made the bar infinite."""

  calls = 0

  def predict(self, features):
    import numpy as np  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    self.calls += 1
    logits = self.logits(features) * 1.01
    probabilities = torch.softmax(torch.as_tensor(logits), dim=1).numpy()
    if self.calls % 2 == 0:
      probabilities = np.full_like(probabilities, np.nan)
    return {'class_ids': logits.argmax(axis=1), 'probabilities': probabilities}


def nan_every_other_predict():
  return dataclasses.replace(mnist_torch.make_port(),
                             make=NanEveryOtherPredict)


class LossRaises(mnist_torch.MnistTorch):
  """A loss that raises (a shape its code did not expect): the checks that
  need a step say so, and none blames the bundle, which replays a correct
  port whole."""

  def loss(self, features, labels):
    raise ValueError('expected labels of shape [batch, 10]')


def loss_raises():
  return dataclasses.replace(mnist_torch.make_port(), make=LossRaises)


def _with_forward(base, dropout_of):
  """A port whose forward is the kit's, its dropout applied by
  dropout_of(net, y) (y: the dense layer's output)."""

  class Port(base):

    def __init__(self, params, replicas, dropout):
      super().__init__(params, replicas, dropout)
      net = self.module
      rate = net.dropout.p

      def forward(images, taps=None):
        del taps
        import torch  # pylint: disable=g-import-not-at-top
        from torch.nn import functional  # pylint: disable=g-import-not-at-top
        y = images.permute(0, 3, 1, 2)
        y = functional.max_pool2d(torch.relu(net.conv1(y)), 2)
        y = functional.max_pool2d(torch.relu(net.conv2(y)), 2)
        y = torch.relu(net.dense(y.permute(0, 2, 3, 1).flatten(1)))
        return net.logits(dropout_of(net, y, rate))

      net.forward = forward

  return Port


def dropout_at_inference():
  """F.dropout's training defaults to True: called without the module's
  training flag, it draws in predict too. Off with the dropout flag, as
  every check but dropout builds the port, it hides from them."""
  from torch.nn import functional  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(
      mnist_torch.make_port(), layer_outputs=None,
      make=_with_forward(mnist_torch.MnistTorch,
                         lambda net, y, rate: functional.dropout(y, rate)))


def dropout_left_out():
  """The dropout before the logits left out."""
  return dataclasses.replace(
      mnist_torch.make_port(), layer_outputs=None,
      make=_with_forward(mnist_torch.MnistTorch, lambda net, y, rate: y))


def dropout_twice():
  """A second dropout where the model_fn has one."""
  return dataclasses.replace(
      mnist_torch.make_port(), layer_outputs=None,
      make=_with_forward(mnist_torch.MnistTorch,
                         lambda net, y, rate: net.dropout(net.dropout(y))))


def _by_rand(net, y, rate):
  """Dropout drawn by hand, following the module's training flag."""
  import torch  # pylint: disable=g-import-not-at-top
  if not net.training or rate == 0:
    return y
  return y * (torch.rand_like(y) >= rate) / (1 - rate)


def dropout_by_rand():
  """Dropout written as rand >= rate: right in law, but no dropout call the
  kit can hand a mask to; named in the dropout check."""
  return dataclasses.replace(
      mnist_torch.make_port(), layer_outputs=None,
      make=_with_forward(mnist_torch.MnistTorch, _by_rand))


def noise_always_on():
  """Gaussian noise added in every training step, whatever the dropout flag
  asks: a step that draws anew, named by one_step."""
  import torch  # pylint: disable=g-import-not-at-top

  def noisy(net, y, rate):
    del rate
    return y + 0.01 * torch.randn_like(y) if net.training else y
  return dataclasses.replace(
      mnist_torch.make_port(), layer_outputs=None,
      make=_with_forward(mnist_torch.MnistTorch, noisy))


# A port may not widen its own bars (the kit's noise is its step again,
# and its predict on weights one unit apart): each bug below hides behind
# a port that computes something else at some calls, and the kit names that.
def _jitter(module, size: float, seed: int) -> None:
  """Moves every parameter by size times a normal draw of numpy's (not
  torch's: no draw of the step the kit watches)."""
  import torch  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  with torch.no_grad():
    for parameter in module.parameters():
      parameter.add_(torch.as_tensor(
          size * rng.standard_normal(tuple(parameter.shape)),
          dtype=parameter.dtype, device=parameter.device))

class WeightDecayBehindAJitter(mnist_torch.MnistTorch):
  """SGD with weight_decay=1e-3 (fails one_step and updates alone), its
  weights moved by 1e-4 at every other step: the reordered step once
  widened every bar past the decay."""

  calls = 0

  def __init__(self, params, replicas, dropout):
    import torch  # pylint: disable=g-import-not-at-top
    super().__init__(params, replicas, dropout)
    self.optimizer = torch.optim.SGD(self.module.parameters(),
                                     lr=params['learning_rate'],
                                     weight_decay=1e-3)
    self.scheduler = torch.optim.lr_scheduler.LambdaLR(
        self.optimizer, lambda step: mnist_torch.DECAY_RATE ** (
            step / mnist_torch.DECAY_STEPS))

  def train_step(self, features, labels):
    taken = super().train_step(features, labels)
    self.calls += 1
    if self.calls % 2:
      _jitter(self.module, 1e-4, self.calls)
    return taken


def weight_decay_behind_a_jitter():
  return dataclasses.replace(mnist_torch.make_port(),
                             make=WeightDecayBehindAJitter)


class LogitsScaledBehindAJitter(mnist_torch.MnistTorch):
  """A softmax of the logits x 1.01 (fails inference alone), predicted on
  weights jittered by 3e-3 at each call: the forward noise once took the
  jitter for rounding and passed it."""

  calls = 0

  def predict(self, features):
    import torch  # pylint: disable=g-import-not-at-top
    saved = [p.detach().clone() for p in self.module.parameters()]
    self.calls += 1
    _jitter(self.module, 3e-3, self.calls)
    try:
      logits = self.logits(features) * 1.01
    finally:
      with torch.no_grad():
        for parameter, value in zip(self.module.parameters(), saved):
          parameter.copy_(value)
    return {'class_ids': logits.argmax(axis=1), 'probabilities':
            torch.softmax(torch.as_tensor(logits), dim=1).numpy()}


def logits_scaled_behind_a_jitter():
  return dataclasses.replace(mnist_torch.make_port(),
                             make=LogitsScaledBehindAJitter)
