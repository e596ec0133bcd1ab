"""Carries a trained Estimator checkpoint over to the migrated model.

  python -m migrate.convert_checkpoint --estimator_dir=OLD_MODEL_DIR \
      --output=NEW_MODEL_DIR [--verify]

Reads the latest name-based checkpoint in --estimator_dir, maps each variable
onto the migrated model by the explicit VARIABLE_MAP, checks names and shapes,
and writes an object-based checkpoint (model and optimizer, the step kept) into
--output, a directory that ``python -m migrate --model_dir=NEW_MODEL_DIR``
restores and resumes from. --verify then predicts test images with both and
requires the same classes and probabilities within
tolerances.CONVERSION_PROBABILITY_ATOL.
"""
import os
import shutil
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from migrate import data
from migrate import legacy
from migrate import model as model_lib
from migrate import tolerances
from mnist_common import prepare
from mnist_common import tfrecords
from mnist_common.errors import KitError

# Estimator checkpoint name -> migrated variable name (without ':0').
VARIABLE_MAP = {name: name for name in (
    'conv1/kernel', 'conv1/bias', 'conv2/kernel', 'conv2/bias',
    'dense/kernel', 'dense/bias', 'logits/kernel', 'logits/bias')}
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
                  variable_map: dict = VARIABLE_MAP) -> None:
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
    raise KitError('the checkpoint does not match the migrated model; ' +
                   '; '.join(problems))


def convert(estimator_dir: str, output: str,
            variable_map: dict = VARIABLE_MAP) -> str:
  """Writes the converted checkpoint into the new directory output.

  Returns the checkpoint path. Nothing is left at output on failure.
  """
  output = os.path.abspath(output)
  if os.path.exists(output) and os.listdir(output):
    raise KitError(f'--output {output} exists and is not empty; choose a new '
                   'directory')
  source, values = read_checkpoint(estimator_dir)
  model = model_lib.build_model()
  optimizer = model_lib.make_optimizer(0.0)  # The rate is not in checkpoints.
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


def verify(estimator_dir: str, output: str, info: prepare.DatasetInfo,
           model_fn, count: int) -> dict:
  """Predicts `count` test images with both checkpoints; raises on mismatch."""
  test = tf.data.TFRecordDataset(info.path('test')).take(count).map(
      tfrecords.parse_example).batch(count)
  images = data.scale_image(next(iter(test))[0]).numpy()
  theirs = legacy.predict_probabilities(
      model_fn, tf.train.latest_checkpoint(estimator_dir), images,
      {'use_tpu': False, 'learning_rate': 0.0})
  model = model_lib.build_model()
  tf.train.Checkpoint(model=model).restore(
      tf.train.latest_checkpoint(output)).expect_partial()
  ours = tf.nn.softmax(model(images, training=False)).numpy()
  same_class = float(np.mean(theirs.argmax(1) == ours.argmax(1)))
  max_diff = float(np.abs(theirs - ours).max())
  result = {'images': len(images), 'same_class_fraction': same_class,
            'max_probability_diff': max_diff}
  if same_class < 1.0 or max_diff > tolerances.CONVERSION_PROBABILITY_ATOL:
    raise KitError(f'verification failed: {same_class:.4f} of {len(images)} '
                   f'images get the same class, probabilities differ by up to '
                   f'{max_diff:.2e} (allowed '
                   f'{tolerances.CONVERSION_PROBABILITY_ATOL:.0e}); is a '
                   'kernel mis-mapped or transposed?')
  return result


def _define_flags() -> None:
  """Command-line flags; defined only when run as a command, so that
  importing this module defines none."""
  flags.DEFINE_string('estimator_dir', None, 'Estimator model_dir to read.')
  flags.DEFINE_string('output', None, 'New directory for the TF2 checkpoint.')
  flags.DEFINE_bool('verify', False, 'Check predictions of both sides agree.')
  flags.DEFINE_integer('verify_images', 1000,
                       'How many test images --verify predicts.', lower_bound=1)
  flags.DEFINE_string('legacy_model_fn', legacy.DEFAULT_MODEL_FN,
                      'The legacy model_fn for --verify, as package.module:name.')
  flags.DEFINE_string('data_dir', None, 'Data for --verify (see python -m '
                      'migrate --helpfull); unset: the kit\'s default.')
  flags.mark_flags_as_required(['estimator_dir', 'output'])


FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  tf.get_logger().handlers.clear()
  try:
    path = convert(FLAGS.estimator_dir, FLAGS.output)
    print(f'Checkpoint: {path}')
    if FLAGS.verify:
      try:
        result = verify(FLAGS.estimator_dir, FLAGS.output,
                        prepare.prepare(FLAGS.data_dir),
                        legacy.load_callable(FLAGS.legacy_model_fn),
                        FLAGS.verify_images)
      except KitError as e:
        shutil.rmtree(FLAGS.output, ignore_errors=True)
        raise KitError(f'{e}; {FLAGS.output} was removed') from e
      print(f'Verified on {result["images"]} test images: same classes, '
            f'probabilities within {result["max_probability_diff"]:.2e}')
  except KitError as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
