"""The port contract: what a team hands the harness about its migrated model.

The harness (``compare``) runs a legacy ``model_fn`` and the team's port side
by side. It does not guess how the port is built: the team writes one
function, named on the command line (``--port=my_port.harness:make_port``),
that returns a ``Port``. Each field is a piece of the port's own code, used as
is, so that what is proven is what trains:

  build_model     () -> tf.keras.Model; called inside ``strategy.scope()``.
  make_optimizer  (learning_rate) -> a Keras optimizer; inside the scope.
  trainer_class   a class following the ``Trainer`` protocol below.
  distribute      the port's input pipeline (see ``Distribute``).
  export          (model, base_dir, strategy) -> the SavedModel's path.
  variable_map    {legacy variable name: port variable name}, e.g.
                  ``{'conv1/kernel': 'conv1/kernel'}``.

``check_port`` turns every way a Port can fall short of this into one line
that names the missing piece and says what to do. docs/MIGRATION.md ("Plug
your own pair in") walks through writing one; ``migration_tools.kit_pair``
is the kit's own.
"""
import dataclasses
import inspect
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

import tensorflow as tf

from migration_tools import cli
from mnist_common.errors import KitError
from mnist_common.errors import one_line

GUIDE = 'docs/MIGRATION.md, "Plug your own pair in"'


@runtime_checkable
class Trainer(Protocol):
  """The port's training and evaluation steps, as the harness drives them.

  Constructed as ``trainer_class(model, optimizer, strategy, global_batch)``
  with the model and optimizer built in ``strategy.scope()``; ``global_batch``
  is the batch over all replicas, what the legacy ``params['batch_size']``
  was. The harness calls the methods below and nothing else, so a port whose
  real trainer is Keras ``fit`` can wrap the same model, loss and optimizer in
  a small class of this shape (``migrate.custom_loop.Trainer`` is one).
  """

  def loss_and_gradients(self, features: Any, labels: Any
                         ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
    """One replica's forward and backward pass on its share of a batch.

    Called inside ``strategy.run`` in a ``tf.function``; it must not update
    anything.

    Args:
      features: this replica's features, as the port's input pipeline yields
        them.
      labels: this replica's labels.

    Returns:
      (per_example_loss [per-replica batch], outputs, gradients): the
      gradients of the loss this replica contributes (divided by the *global*
      batch), one per ``model.trainable_variables``, in that order.
    """

  def train_steps(self, iterator: Iterator, steps: tf.Tensor) -> tf.Tensor:
    """Takes ``steps`` training steps from the distributed iterator.

    Args:
      iterator: an iterator over the port's distributed training dataset.
      steps: a scalar int tensor.

    Returns:
      The optimizer's step after them (a tensor).
    """

  def eval_steps(self, iterator: Iterator, steps: tf.Tensor) -> None:
    """Runs ``steps`` evaluation steps, accumulating the metrics."""

  def reset(self) -> dict[str, float]:
    """Returns the metrics accumulated since the last reset, and resets them.

    Returns:
      {metric name: value}; 'loss' (the mean per-example loss) is required,
      'accuracy' is compared when the legacy eval metrics have it.
    """


# (strategy, data_dir, split, global_batch, training, seed=0) -> a
# tf.distribute.DistributedDataset of (features, labels), each replica getting
# global_batch // replicas examples; in file order when training is False.
Distribute = Callable[..., Any]

TRAINER_METHODS = ('loss_and_gradients', 'train_steps', 'eval_steps', 'reset')


@dataclasses.dataclass(frozen=True)
class Port:
  """The pieces of a migrated model that the harness exercises (see module)."""
  build_model: Callable[[], tf.keras.Model]
  make_optimizer: Callable[[float], Any]
  trainer_class: type
  distribute: Distribute
  export: Callable[[tf.keras.Model, str, tf.distribute.Strategy], str]
  variable_map: dict[str, str]


def load_port(spec: str) -> Port:
  """Calls the function --port names and checks what it returns.

  Raises:
    KitError: it cannot be loaded, it raises, or it breaks the contract.
  """
  factory = cli.load_callable(spec, '--port')
  try:
    port = factory()
  except Exception as e:  # pylint: disable=broad-except
    raise KitError(f'--port {spec} raised {one_line(e)}') from e
  return check_port(port, spec)


def check_port(port: Any, where: str) -> Port:
  """Returns port if it follows the contract.

  Args:
    port: what the user's --port callable returned.
    where: how the user named it (for the message), e.g. 'my_port:make_port'.

  Raises:
    KitError: one line naming the first thing missing and what to do.
  """
  if not isinstance(port, Port):
    raise KitError(f'--port {where} returned a {type(port).__name__}, not a '
                   'migration_tools.port.Port; return Port(build_model=..., '
                   f'...) (see {GUIDE})')
  for field in ('build_model', 'make_optimizer', 'distribute', 'export'):
    if not callable(getattr(port, field)):
      raise KitError(f'the port\'s {field} is a '
                     f'{type(getattr(port, field)).__name__}, not a callable '
                     f'(see {GUIDE})')
  if not inspect.isclass(port.trainer_class):
    raise KitError('the port\'s trainer_class must be a class, constructed as '
                   'trainer_class(model, optimizer, strategy, global_batch)')
  missing = [m for m in TRAINER_METHODS
             if not callable(getattr(port.trainer_class, m, None))]
  if missing:
    raise KitError(f'the port\'s trainer_class {port.trainer_class.__name__} '
                   f'lacks {", ".join(missing)}: implement the Trainer '
                   'protocol of migration_tools/port.py (see '
                   f'{GUIDE})')
  if not isinstance(port.variable_map, dict) or not port.variable_map:
    raise KitError('the port\'s variable_map must be a non-empty dict '
                   '{legacy variable name: port variable name}')
  return port


def variables_by_name(model: tf.keras.Model) -> dict[str, tf.Variable]:
  """The model's trainable variables by name, without the ':0'."""
  return {v.name.removesuffix(':0'): v for v in model.trainable_variables}


def check_variable_map(port: Port, model: tf.keras.Model) -> None:
  """Raises KitError when the map names a variable the port's model lacks.

  Keras names unnamed layers conv2d, conv2d_1, ... by creation order, so a
  port built without layer names has no stable variable names.
  """
  ours = variables_by_name(model)
  unknown = sorted(v for v in port.variable_map.values() if v not in ours)
  if unknown:
    raise KitError(
        f'the port\'s variable_map names {", ".join(unknown[:4])}'
        f'{" ..." if len(unknown) > 4 else ""}, which its model does not have '
        f'(it has {", ".join(sorted(ours)[:6])}{" ..." if len(ours) > 6 else ""}'
        '); give each Keras layer a fixed name (name=...) and map the legacy '
        'names onto those')
