"""Carries a trained Estimator checkpoint over to the port.

  migration-convert-checkpoint --estimator_dir=OLD_MODEL_DIR \
      --output=NEW_MODEL_DIR [--port=my_port:make_port] [--verify]

Reads the latest name-based checkpoint in --estimator_dir, maps each variable
onto the port's model by the port's explicit variable map (port.Port), checks
names and shapes, and writes an object-based checkpoint (model and optimizer,
the step kept) into --output, a directory the port restores and resumes from
(the kit's: ``python -m migrate --model_dir=NEW_MODEL_DIR``). --verify then
feeds the same batches of the legacy input_fn to the legacy model_fn (with the
old checkpoint) and to the port's model (with the new one) and requires the
same classes and probabilities within tolerances.CONVERSION_PROBABILITY_ATOL.
"""
import os
import shutil
import tempfile

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from migration_tools import cli
from migration_tools import kit_pair
from migration_tools import legacy
from migration_tools import port as port_lib
from migration_tools import tolerances
from mnist_common import prepare
from mnist_common.errors import KitError
from mnist_common.errors import one_line

STEP_NAME = 'global_step'  # -> optimizer.iterations


def read_checkpoint(estimator_dir: str) -> tuple[str, dict]:
  """The latest checkpoint in estimator_dir and its {name: array}."""
  path = tf.train.latest_checkpoint(estimator_dir)
  if path is None:
    raise KitError(f'no checkpoint in --estimator_dir {estimator_dir}')
  reader = tf.train.load_checkpoint(path)
  return path, {name: reader.get_tensor(name)
                for name in reader.get_variable_to_shape_map()}


def check_mapping(values: dict, model: tf.keras.Model,
                  variable_map: dict[str, str]) -> None:
  """Raises KitError listing every missing, extra or wrong-shaped variable."""
  ours = {v.name.removesuffix(':0'): v for v in model.variables}
  missing = sorted(set(variable_map) - set(values))
  extra = sorted(set(values) - set(variable_map) - {STEP_NAME})
  unmapped = sorted(set(ours) - set(variable_map.values()))
  shapes = [f'{name} {list(values[name].shape)} -> '
            f'{variable_map[name]} {ours[variable_map[name]].shape.as_list()}'
            for name in sorted(set(variable_map) & set(values))
            if variable_map[name] in ours and
            values[name].shape != tuple(ours[variable_map[name]].shape)]
  problems = [f'{label}: {", ".join(items)}' for label, items in (
      ('missing from the checkpoint', missing), ('extra in the checkpoint',
                                                 extra),
      ('model variables with no source', unmapped), ('wrong shape', shapes))
              if items]
  if problems:
    raise KitError('the checkpoint does not match the port\'s model; ' +
                   '; '.join(problems))


def convert(estimator_dir: str, output: str, port: port_lib.Port) -> str:
  """Writes the converted checkpoint into the new directory output.

  Args:
    estimator_dir: an Estimator model_dir (its latest checkpoint is read).
    output: a new (or empty) directory.
    port: builds the model and optimizer; its variable_map names the pairs.

  Returns:
    The checkpoint path. Nothing is left at output on failure.

  Raises:
    KitError: no checkpoint, an output in the way, or a checkpoint that does
      not match the port's model (every mismatch listed).
  """
  output = os.path.abspath(output)
  if os.path.exists(output) and os.listdir(output):
    raise KitError(f'--output {output} exists and is not empty; choose a new '
                   'directory')
  source, values = read_checkpoint(estimator_dir)
  variable_map = port.variable_map
  model = port.build_model()
  optimizer = port.make_optimizer(0.0)  # The rate is not in checkpoints.
  optimizer.build(model.trainable_variables)
  check_mapping(values, model, variable_map)
  ours = {v.name.removesuffix(':0'): v for v in model.variables}
  for name, target in variable_map.items():
    ours[target].assign(values[name])
  step = int(values.get(STEP_NAME, 0))
  optimizer.iterations.assign(step)

  parent = os.path.dirname(output)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix='.tmp-convert-')
  try:
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    tf.train.CheckpointManager(checkpoint, tmp, max_to_keep=1).save(
        checkpoint_number=step)
    if os.path.exists(output):
      os.rmdir(output)
    os.replace(tmp, output)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  path = tf.train.latest_checkpoint(output)
  logging.info('Converted %s (step %d, %d variables) into %s', source, step,
               len(variable_map), path)
  return path


def verify(estimator_dir: str, output: str, port: port_lib.Port, model_fn,
           input_fn, data_dir: str, count: int) -> dict:
  """Predicts the same batches with both checkpoints; raises on mismatch.

  Args:
    estimator_dir, output: the old and the converted checkpoint's folders.
    port: builds the model the converted checkpoint is restored into.
    model_fn: the legacy model_fn, run in PREDICT mode on the old checkpoint.
    input_fn: a legacy input_fn reading params['data_dir'] (its features are
      fed to both sides, so each applies its own preprocessing after it).
    data_dir: handed to input_fn.
    count: how many examples, at most.

  Returns:
    {'examples', 'same_class_fraction', 'max_probability_diff'}.
  """
  batches = legacy.legacy_batches(input_fn, data_dir, min(count, 256))
  features = np.concatenate([f for f, _ in batches])[:count]
  if not len(features):
    raise KitError(f'--legacy_input_fn gave no examples from {data_dir}')
  theirs = legacy.predict_probabilities(
      model_fn, tf.train.latest_checkpoint(estimator_dir), features,
      {'use_tpu': False, 'learning_rate': 0.0})
  model = port.build_model()
  tf.train.Checkpoint(model=model).restore(
      tf.train.latest_checkpoint(output)).expect_partial()
  ours = tf.nn.softmax(model(features, training=False)).numpy()
  same_class = float(np.mean(theirs.argmax(1) == ours.argmax(1)))
  max_diff = float(np.abs(theirs - ours).max())
  result = {'examples': len(features), 'same_class_fraction': same_class,
            'max_probability_diff': max_diff}
  if same_class < 1.0 or max_diff > tolerances.CONVERSION_PROBABILITY_ATOL:
    raise KitError(f'verification failed: {same_class:.4f} of {len(features)} '
                   f'examples get the same class, probabilities differ by up '
                   f'to {max_diff:.2e} (allowed '
                   f'{tolerances.CONVERSION_PROBABILITY_ATOL:.0e}); is a '
                   'kernel mis-mapped or transposed?')
  return result


def define_flags(tool_flags: flags.FlagValues) -> None:
  """The command's flags, on the tool's own FlagValues (see cli)."""
  define = dict(flag_values=tool_flags)
  flags.DEFINE_string('estimator_dir', None, 'Estimator model_dir to read.',
                      **define)
  flags.DEFINE_string('output', None, 'New directory for the TF2 checkpoint.',
                      **define)
  flags.DEFINE_string('port', kit_pair.PORT,
                      'A function returning the migration_tools.port.Port '
                      'whose model the checkpoint is converted for.', **define)
  flags.DEFINE_bool('verify', False, 'Check predictions of both sides agree.',
                    **define)
  flags.DEFINE_integer('verify_examples', 1000,
                       'How many examples --verify predicts, at most.',
                       lower_bound=1, **define)
  flags.DEFINE_string('legacy_model_fn', kit_pair.LEGACY_MODEL_FN,
                      'The legacy model_fn for --verify, as '
                      'package.module:name.', **define)
  flags.DEFINE_string('legacy_input_fn', kit_pair.LEGACY_INPUT_FN,
                      'The legacy input_fn whose features --verify feeds to '
                      'both sides; it reads params["data_dir"] and '
                      'params["batch_size"].', **define)
  cli.define_legacy_flags(tool_flags)
  flags.DEFINE_string('data_dir', None, 'Data for --verify (see python -m '
                      'migrate --helpfull); unset: the kit\'s default.',
                      **define)
  flags.mark_flags_as_required(['estimator_dir', 'output'],
                               flag_values=tool_flags)


def main(tool_flags: flags.FlagValues, args: list[str]) -> None:
  """Converts, and with --verify checks the predictions of both sides."""
  if args:
    raise KitError(f'unexpected arguments {args}; flags take the form '
                   '--name=value (see --help)')
  logging.set_verbosity(logging.INFO)
  tf.get_logger().handlers.clear()
  port = port_lib.load_port(tool_flags.port)
  if tool_flags.verify:
    model_fn = cli.load_callable(tool_flags.legacy_model_fn,
                                    '--legacy_model_fn')
    input_fn = cli.load_callable(tool_flags.legacy_input_fn,
                                    '--legacy_input_fn')
    cli.set_legacy_flags(tool_flags.legacy_flags)
    data_dir = prepare.prepare(tool_flags.data_dir).data_dir
  path = convert(tool_flags.estimator_dir, tool_flags.output, port)
  print(f'Checkpoint: {path}')
  if tool_flags.verify:
    try:
      result = verify(tool_flags.estimator_dir, tool_flags.output, port,
                      model_fn, input_fn, data_dir, tool_flags.verify_examples)
    except Exception as e:  # pylint: disable=broad-except
      shutil.rmtree(tool_flags.output, ignore_errors=True)
      raise KitError(f'{one_line(e)}; {tool_flags.output} was removed') from e
    print(f'Verified on {result["examples"]} examples: same classes, '
          f'probabilities within {result["max_probability_diff"]:.2e}')


def run() -> None:
  """Console-script entry point (``migration-convert-checkpoint``)."""
  cli.run(main, define_flags, __doc__)


if __name__ == '__main__':
  run()
