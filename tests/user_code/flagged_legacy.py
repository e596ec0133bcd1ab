"""Legacy code as TPU-era repositories wrote it: absl flags defined at import,
with the names nearly every such repository used, and a model_fn that reads
FLAGS. It re-exports the kit's own legacy pair, so the port must match it."""
from absl import flags

from estimator_mnist import data
from estimator_mnist import model
from estimator_mnist import train

flags.DEFINE_string('data_dir', None, 'Where the data is.')
flags.DEFINE_string('model_dir', None, 'Where checkpoints go.')
flags.DEFINE_integer('batch_size', 1024, 'Global batch.')
flags.DEFINE_float('learning_rate', 0.05, 'Learning rate.')
flags.DEFINE_bool('use_tpu', True, 'Train on a TPU.')
flags.DEFINE_string('tpu', None, 'The TPU.')
FLAGS = flags.FLAGS


def model_fn(features, labels, mode, params):
  # Reads FLAGS at call time, as many model_fns did: on a CPU it needs
  # --nouse_tpu (CrossShardOptimizer has no CPU kernel).
  return model.model_fn(features, labels, mode,
                        dict(params, use_tpu=FLAGS.use_tpu))


eval_input_fn = data.eval_input_fn
serving_input_receiver_fn = train.serving_input_receiver_fn
