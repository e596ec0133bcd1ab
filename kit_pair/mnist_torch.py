"""The kit's own pair on PyTorch: estimator_mnist's model_fn (recorded in a
golden bundle on TF 2.15) beside the same CNN written with torch.nn and
torch.optim, as a TorchPort: ``--port=kit_pair.mnist_torch:make_port`` on the
torch profile.

What a team writes to check its own PyTorch port (docs/MIGRATION.md, "To
PyTorch"): its module, optimizer and schedule, the loss of one replica's
share, and the model_fn's PREDICT outputs. The pitfalls of the port are
named where they are met: NCHW against NHWC, the flatten's order, the mean
of the cross-entropy, the schedule read at the step.
"""
from __future__ import annotations

import numpy as np

from migration_tools.pair.frameworks import pytorch as torch_port

NUM_CLASSES = 10
DROPOUT_RATE = 0.4
DECAY_STEPS = 100000
DECAY_RATE = 0.96
SEED = 0
# The layers keep the model_fn's names: conv1.weight is handed over as
# conv1/kernel, in TF's layout (pytorch.LAYOUTS).
LAYERS = ('conv1', 'conv2', 'dense', 'logits')


def _network(dropout: bool):
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top
  from torch.nn import functional  # pylint: disable=g-import-not-at-top

  class Net(nn.Module):
    """estimator_mnist's CNN: [batch, 28, 28, 1] scaled images -> logits."""

    def __init__(self):
      super().__init__()
      # padding=2 is TF's 'same' for a 5x5 window at stride 1.
      self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
      self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
      self.dense = nn.Linear(7 * 7 * 64, 128)
      self.dropout = nn.Dropout(DROPOUT_RATE if dropout else 0.0)
      self.logits = nn.Linear(128, NUM_CLASSES)

    def forward(self, images, taps: dict | None = None):
      # The legacy input_fn yields NHWC; PyTorch convolves NCHW.
      y = images.permute(0, 3, 1, 2)
      y = torch.relu(self.conv1(y))
      self._tap(taps, 'conv1', y)
      y = torch.relu(self.conv2(functional.max_pool2d(y, 2)))
      self._tap(taps, 'conv2', y)
      y = functional.max_pool2d(y, 2)
      # Flattened in TF's order (height, width, channels), so dense/kernel's
      # rows pair with the model_fn's; NCHW's flatten would permute them.
      y = torch.relu(self.dense(y.permute(0, 2, 3, 1).flatten(1)))
      self._tap(taps, 'dense', y)
      logits = self.logits(self.dropout(y))
      self._tap(taps, 'logits', logits)
      return logits

    @staticmethod
    def _tap(taps, name, value):
      if taps is not None:  # NHWC, as the model_fn's layers give them.
        taps[name] = (value.permute(0, 2, 3, 1) if value.dim() == 4
                      else value)

  return Net()


class MnistTorch(torch_port.TorchModel):
  """The CNN on `replicas` shares of each batch, plain SGD on the legacy
  decay schedule."""

  def __init__(self, params: dict, replicas: int, dropout: bool):
    import torch  # pylint: disable=g-import-not-at-top
    torch.manual_seed(SEED)  # The same initial state on every make.
    self.replicas = replicas
    # The accelerator where there is one: cuDNN's TF32 is on there.
    self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    self.module = _network(dropout).to(self.device)
    self.optimizer = torch.optim.SGD(self.module.parameters(),
                                     lr=params['learning_rate'])
    # tf.compat.v1.train.exponential_decay, not staircase, read at the step
    # the update applies (LambdaLR's step() follows optimizer.step()).
    self.scheduler = torch.optim.lr_scheduler.LambdaLR(
        self.optimizer, lambda step: DECAY_RATE ** (step / DECAY_STEPS))

  def loss(self, features, labels):
    from torch.nn import functional  # pylint: disable=g-import-not-at-top
    # The mean over this share; the all-reduce's mean of the shares' is the
    # global batch's mean, as the model_fn's loss was.
    return functional.cross_entropy(self.module(features),
                                    labels.reshape(-1).long())

  def logits(self, features) -> np.ndarray:
    import torch  # pylint: disable=g-import-not-at-top
    self.module.eval()
    with torch.no_grad():
      return self.module(self.tensor(features)).cpu().numpy()

  def predict(self, features) -> dict[str, np.ndarray]:
    import torch  # pylint: disable=g-import-not-at-top
    logits = self.logits(features)
    return {'class_ids': logits.argmax(axis=1),
            'probabilities': torch.softmax(torch.as_tensor(logits),
                                           dim=1).numpy()}

  def evaluate(self, batches: list) -> dict[str, float]:
    import torch  # pylint: disable=g-import-not-at-top
    from torch.nn import functional  # pylint: disable=g-import-not-at-top
    losses, correct, count = [], 0, 0
    for features, labels in batches:
      logits = self.logits(features)  # On the host, as numpy.
      # The labels there too: on a GPU, the module's device is not the
      # logits' (seen on an H200: cross_entropy refused the two devices).
      losses.append(float(functional.cross_entropy(
          torch.as_tensor(logits),
          torch.as_tensor(np.asarray(labels)).reshape(-1).long())))
      correct += int((logits.argmax(axis=1) == np.asarray(labels)).sum())
      count += len(labels)
    return {'loss': float(np.mean(losses)), 'accuracy': correct / count}


def layer_outputs(model: MnistTorch, features) -> dict[str, np.ndarray]:
  """Each layer with weights: its output on the first example (after its
  activation, NHWC, as the model_fn's layers give them), in order."""
  import torch  # pylint: disable=g-import-not-at-top
  taps = {}
  model.module.eval()
  with torch.no_grad():
    model.module(model.tensor(np.asarray(features)[:1]), taps)
  return {name: taps[name].cpu().numpy().ravel() for name in LAYERS}


def input_batch(params: dict) -> tuple[np.ndarray, np.ndarray]:
  """The first global batch of the test split, in file order, read without
  TensorFlow: what kit_pair.mnist.legacy_input_fn's first batch holds."""
  from mnist_common import prepare  # pylint: disable=g-import-not-at-top
  from mnist_common import tfrecords  # pylint: disable=g-import-not-at-top
  info = prepare.prepare(params.get('data_dir'))
  images, labels = tfrecords.read_split(info.path('test'))
  batch = params['batch_size']
  scaled = images[:batch].astype(np.float32) / np.float32(255.0) - np.float32(
      0.5)
  return scaled, labels[:batch]


class _Serving:
  """The exported program's module: raw uint8 pixels -> the PREDICT
  outputs, as the legacy serving_input_receiver_fn took them."""

  @staticmethod
  def module(net):
    import torch  # pylint: disable=g-import-not-at-top

    class Serve(torch.nn.Module):

      def __init__(self):
        super().__init__()
        self.net = net

      def forward(self, image):
        logits = self.net(image.to(torch.float32) / 255.0 - 0.5)
        return logits.argmax(dim=1), torch.softmax(logits, dim=1)

    return Serve().eval()


def export(model: MnistTorch, base_dir: str) -> str:
  """torch.export's program of the serving module, saved as one .pt2 file."""
  import os  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  # Any batch: the serving batch is the export's one dynamic dimension.
  example = torch.zeros((2, 28, 28, 1), dtype=torch.uint8,
                        device=model.device)
  program = torch.export.export(
      _Serving.module(model.module), (example,),
      dynamic_shapes=({0: torch.export.Dim('batch', min=1)},))
  os.makedirs(base_dir, exist_ok=True)
  path = os.path.join(base_dir, 'mnist.pt2')
  torch.export.save(program, path)
  return path


def serve(path: str, inputs: dict) -> dict:
  """The exported program, loaded without the model's code."""
  import torch  # pylint: disable=g-import-not-at-top
  program = torch.export.load(path).module()
  device = next(iter(program.state_dict().values())).device
  with torch.no_grad():
    class_ids, probabilities = program(torch.as_tensor(np.asarray(
        inputs['image']), device=device))
  return {'class_ids': class_ids.cpu().numpy(),
          'probabilities': probabilities.cpu().numpy()}


def programs(model: MnistTorch, features, labels) -> dict:
  """The modules of the loss and of predict, on the shapes they run on:
  what tpu_ready exports."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch.nn import functional  # pylint: disable=g-import-not-at-top
  net = model.module

  class Loss(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.net = net

    def forward(self, images, targets):
      return functional.cross_entropy(self.net(images), targets.long())

  images = model.tensor(features)
  return {'the loss': (Loss(), (images, model.tensor(labels).reshape(-1))),
          'predict': (net.eval(), (images,))}


def make_port() -> torch_port.TorchPort:
  """The module, optimizer and schedule, the export, the pipeline's first
  batch, and the programs tpu_ready exports."""
  import torch  # pylint: disable=g-import-not-at-top
  return torch_port.TorchPort(
      make=MnistTorch, framework=f'PyTorch {torch.__version__}',
      export=export, serve=serve, layer_outputs=layer_outputs,
      input_batch=input_batch, programs=programs,
      variable_map={f'{layer}/{part}': f'{layer}/{part}'
                    for layer in LAYERS for part in ('kernel', 'bias')})
