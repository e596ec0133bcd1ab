"""The kit's own pair on JAX: estimator_mnist's model_fn (recorded in a golden
bundle on TF 2.15) beside migrate_jax's model, as an ArrayPort: the default
``--port`` of migration-compare where there is no TensorFlow.

What a team writes to check its own JAX port (docs/MIGRATION.md, "To JAX"):
the model and optimizer of its training code, and a step written with
Keras 3's stateless calls under ``jax.jit``, the batch laid out over the
devices as keras.distribution's DataParallel lays it out.
"""
from __future__ import annotations

import os

import numpy as np

from migration_tools.pair import array_port
from migration_tools.pair import optimizers


# What migration-convert-checkpoint writes for this port.
WEIGHTS_FILE = 'model.weights.h5'


class KerasJaxModel:
  """migrate_jax's model and optimizer on `replicas` JAX devices, as an
  ArrayModel: the global batch split over the devices, the loss the global
  batch's mean, its gradient summed over the devices by XLA."""

  def __init__(self, params: dict, replicas: int, dropout: bool):
    import jax  # pylint: disable=g-import-not-at-top
    import keras  # pylint: disable=g-import-not-at-top
    from migrate_jax import model as model_lib  # pylint: disable=g-import-not-at-top
    self._jax, self._keras, self._model_lib = jax, keras, model_lib
    devices = array_port.replica_devices(replicas)
    self.replicas = replicas
    mesh = keras.distribution.DeviceMesh((replicas,), ['batch'],
                                         devices[:replicas])
    self._distribution = keras.distribution.DataParallel(device_mesh=mesh)
    self._batch = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices[:replicas]), ('batch',)),
        jax.sharding.PartitionSpec('batch'))
    with self._distribution.scope():
      self.model = model_lib.build_model(
          dropout_rate=model_lib.DROPOUT_RATE if dropout else 0.0)
      self.optimizer = model_lib.make_optimizer(params['learning_rate'])
      self.optimizer.build(self.model.trainable_variables)
    self._paths = [v.path for v in self.model.variables]
    self._step = jax.jit(self._train_step)
    self._logits = jax.jit(self._inference)
    self._rate = 0.0

  # The arrays ------------------------------------------------------------

  def variables(self) -> dict[str, np.ndarray]:
    # Dropout's random state is no weight, and no legacy model has it.
    return {v.path: np.asarray(v.value) for v in self.model.variables
            if 'seed_generator' not in v.path}

  def trainable(self) -> list[str]:
    return [v.path for v in self.model.trainable_variables]

  def set_variables(self, values: dict[str, np.ndarray]) -> None:
    for variable in self.model.variables:
      if variable.path in values:
        variable.assign(values[variable.path])

  def _slot_variables(self) -> dict[tuple[str, str], object]:
    """{(model variable, token): optimizer variable}, by Keras 3's slot
    names ('conv1_kernel_momentum')."""
    found = {}
    for variable in self.optimizer.variables:
      for path in self.trainable():
        prefix = path.replace('/', '_') + '_'
        if variable.name.startswith(prefix):
          found[(path, variable.name[len(prefix):])] = variable
    return found

  def slots(self) -> dict[tuple[str, str], np.ndarray]:
    return {k: np.asarray(v.value) for k, v in self._slot_variables().items()}

  def set_slots(self, values: dict[tuple[str, str], np.ndarray]) -> None:
    for key, variable in self._slot_variables().items():
      if key in values:
        variable.assign(values[key])

  def step_count(self) -> int:
    return int(np.asarray(self.optimizer.iterations.value))

  def set_step_count(self, step: int) -> None:
    self.optimizer.iterations.assign(step)

  def describe_optimizer(self) -> optimizers.Description:
    return optimizers.describe_port(self.optimizer)

  def learning_rate(self) -> float:
    return self._rate

  def learning_rate_at(self, step: int) -> float:
    """The rate at this global step: the optimizer's schedule, which Keras
    keeps as _learning_rate, called there (the schedule check)."""
    schedule = self.optimizer._learning_rate  # pylint: disable=protected-access
    return float(np.asarray(schedule(step) if callable(schedule) else
                            schedule))

  # The steps -------------------------------------------------------------

  def _loss(self, trainable, non_trainable, images, labels):
    logits, non_trainable = self.model.stateless_call(
        trainable, non_trainable, images, training=True)
    loss = self._keras.ops.mean(self._model_lib.per_example_loss(labels,
                                                                 logits))
    return loss, non_trainable

  def _train_step(self, trainable, non_trainable, optimizer_state, images,
                  labels):
    (loss, non_trainable), gradients = self._jax.value_and_grad(
        self._loss, has_aux=True)(trainable, non_trainable, images, labels)
    trainable, optimizer_state = self.optimizer.stateless_apply(
        optimizer_state, gradients, trainable)
    return loss, gradients, trainable, non_trainable, optimizer_state

  def _inference(self, trainable, non_trainable, images):
    logits, _ = self.model.stateless_call(trainable, non_trainable, images,
                                          training=False)
    return logits

  def _values(self, variables) -> list:
    return [v.value for v in variables]

  def _on_devices(self, array: np.ndarray):
    return self._jax.device_put(np.asarray(array), self._batch)

  def train_step(self, features, labels) -> dict:
    # The rate this step applies: Keras evaluates the schedule at the
    # optimizer's step before it advances it.
    self._rate = float(np.asarray(self.optimizer.learning_rate))
    model, optimizer = self.model, self.optimizer
    loss, gradients, trainable, non_trainable, optimizer_state = self._step(
        self._values(model.trainable_variables),
        self._values(model.non_trainable_variables),
        self._values(optimizer.variables), self._on_devices(features),
        self._on_devices(labels))
    for variables, values in ((model.trainable_variables, trainable),
                              (model.non_trainable_variables, non_trainable),
                              (optimizer.variables, optimizer_state)):
      for variable, value in zip(variables, values):
        variable.assign(value)
    return {'loss': float(loss), 'examples': len(labels),
            'gradients': {path: np.asarray(g) for path, g in
                          zip(self.trainable(), gradients)}}

  def logits(self, features) -> np.ndarray:
    return np.asarray(self._logits(
        self._values(self.model.trainable_variables),
        self._values(self.model.non_trainable_variables),
        self._on_devices(features)))

  def programs(self, features, labels) -> dict:
    """The jit-compiled training step and predict, on arguments of the
    shapes they run on: what tpu_ready compiles for a TPU."""
    net, optimizer = self.model, self.optimizer
    trainable = self._values(net.trainable_variables)
    non_trainable = self._values(net.non_trainable_variables)
    return {'the training step': (self._step, (
                trainable, non_trainable, self._values(optimizer.variables),
                np.asarray(features), np.asarray(labels))),
            'predict': (self._logits, (trainable, non_trainable,
                                       np.asarray(features)))}

  def predict(self, features) -> dict[str, np.ndarray]:
    """The model_fn's PREDICT outputs, from the port's logits."""
    logits = self.logits(features)
    return {'class_ids': logits.argmax(axis=1),
            'probabilities': np.asarray(self._keras.ops.softmax(logits))}

  def save_weights(self, directory: str) -> str:
    """Keras 3's .weights.h5 of the model, its optimizer attached: the
    weights, the slots and the step, as model.load_weights restores them."""
    path = os.path.join(directory, WEIGHTS_FILE)
    self._attach_optimizer()
    self.model.save_weights(path)
    return path

  def load_weights(self, path: str) -> None:
    self._attach_optimizer()
    self.model.load_weights(path)

  def _attach_optimizer(self) -> None:
    # A model saves and loads its optimizer's variables with its own once
    # compiled with it.
    if getattr(self.model, 'optimizer', None) is not self.optimizer:
      self.model.compile(optimizer=self.optimizer)

  def evaluate(self, batches: list) -> dict[str, float]:
    """The model_fn's eval metrics: the mean loss and the accuracy."""
    losses, correct, count = [], 0, 0
    for features, labels in batches:
      logits = self.logits(features)
      losses.append(np.mean(np.asarray(self._model_lib.per_example_loss(
          labels, logits))))
      correct += int((logits.argmax(axis=1) == labels).sum())
      count += len(labels)
    return {'loss': float(np.mean(losses)), 'accuracy': correct / count}


def layer_outputs(model: KerasJaxModel, features) -> dict[str, np.ndarray]:
  """Each layer with weights: its output on the first example, in order."""
  import keras  # pylint: disable=g-import-not-at-top
  net = model.model
  layers = [layer for layer in net.layers if layer.weights and
            not all('seed_generator' in w.path for w in layer.weights)]
  probe = keras.Model(net.inputs, [layer.output for layer in layers])
  outputs = probe.predict_on_batch(np.asarray(features)[:1])
  return {layer.name: np.asarray(output).ravel()
          for layer, output in zip(layers, outputs)}


def input_batch(params: dict) -> tuple[np.ndarray, np.ndarray]:
  """The first global batch of migrate_jax's reading of the test split, in
  file order: what kit_pair.mnist.legacy_input_fn's first batch holds."""
  from migrate_jax import data  # pylint: disable=g-import-not-at-top
  from mnist_common import prepare  # pylint: disable=g-import-not-at-top
  images, labels = data.load(prepare.prepare(params.get('data_dir')), 'test')
  return images[:params['batch_size']], labels[:params['batch_size']]


def export(model: KerasJaxModel, base_dir: str) -> str:
  """migrate_jax's export: the predict function, lowered with the weights."""
  from migrate_jax import export as export_lib  # pylint: disable=g-import-not-at-top
  return export_lib.export(model.model, base_dir)


def serve(path: str, inputs: dict) -> dict:
  """The exported program, loaded without the model's code, on the legacy
  receiver's input ('image', raw uint8 pixels)."""
  from migrate_jax import export as export_lib  # pylint: disable=g-import-not-at-top
  return export_lib.load(path)(inputs['image'])


def make_port() -> array_port.ArrayPort:
  from migrate_jax import devices  # pylint: disable=g-import-not-at-top
  devices.use_jax_backend()  # Before Keras loads.
  import jax  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  return array_port.ArrayPort(
      make=KerasJaxModel,
      framework=f'JAX {jax.__version__}, Keras {keras.__version__}',
      export=export, serve=serve, layer_outputs=layer_outputs,
      input_batch=input_batch,
      programs=lambda model, features, labels: model.programs(features,
                                                              labels),
      save_weights=lambda model, directory: model.save_weights(directory),
      load_weights=lambda model, path: model.load_weights(path),
      # The layers keep the model_fn's names.
      variable_map={name: name for name in (
          'conv1/kernel', 'conv1/bias', 'conv2/kernel', 'conv2/bias',
          'dense/kernel', 'dense/bias', 'logits/kernel', 'logits/bias')})
