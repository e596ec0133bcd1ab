"""A toy ArrayModel in numpy, no framework: the port contract's tests
(tools/test_array_port.py) and the converter's (tools/test_convert_units.py)
share it."""
import numpy as np

from migration_tools.pair import optimizers


class Linear:
  """y = x @ w, mean squared output as the loss, momentum SGD by hand with
  Keras 3's slot token 'momentum'."""

  def __init__(self, params, replicas, dropout):
    assert not dropout  # The harness compares steps without dropout.
    self.replicas, self.rate = replicas, params['learning_rate']
    self.w = np.full((3, 2), 0.5, np.float32)
    self.velocity = np.zeros_like(self.w)
    self.steps = 0

  def variables(self):
    return {'dense/w': self.w.copy()}

  def trainable(self):
    return ['dense/w']

  def set_variables(self, values):
    self.w = np.array(values['dense/w'], np.float32)

  def slots(self):
    return {('dense/w', 'momentum'): self.velocity.copy()}

  def set_slots(self, values):
    self.velocity = np.array(values[('dense/w', 'momentum')], np.float32)

  def step_count(self):
    return self.steps

  def set_step_count(self, step):
    self.steps = step

  def describe_optimizer(self):
    return optimizers.Description(optimizers.MOMENTUM, {'momentum': 0.9})

  def learning_rate(self):
    return self.rate

  def train_step(self, features, labels):
    del labels
    out = features @ self.w
    gradient = 2 * features.T @ out / out.size
    self.velocity = 0.9 * self.velocity - self.rate * gradient
    self.w = self.w + self.velocity
    self.steps += 1
    return {'loss': float(np.mean(out ** 2)), 'gradients': {
        'dense/w': gradient}, 'host_call': {'lr': np.float32(self.rate)}}

  def predict(self, features):
    return {'output': features @ self.w}

  def evaluate(self, batches):
    return {'loss': float(np.mean([np.mean((f @ self.w) ** 2)
                                   for f, _ in batches]))}
