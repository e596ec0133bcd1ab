"""Legacy constructs reached indirectly: through an object, a wrapper, a
shape, or tf.compat.v1 spelt out in full; each beside the TF 2 form that
must stay clean. In the style of BERT, tensor2tensor and tf-models; written
for the scanner tests. `# expect:` lists the rule ids of its line."""
import tensorflow.compat.v1 as tf  # expect: compat-v1-import
from tensor2tensor.utils import contrib
from tensorflow.contrib import layers as contrib_layers  # expect: contrib-layers
from tensorflow.contrib.training.python.training import evaluation  # expect: contrib-training


def classifier_head(output_layer, model_layer):
  hidden_size = output_layer.shape[-1].value  # expect: dimension-value
  width = output_layer.get_shape()[1].value  # expect: dimension-value
  depth = model_layer.shape.dims[0].value  # A Dimension in TF 2 too.
  input_shape = model_layer.get_shape()
  batch = input_shape[0].value  # expect: dimension-value
  fine = output_layer.shape[-1]
  also_fine = tf.compat.dimension_value(output_layer.shape[-1])
  normed = contrib_layers.layer_norm(inputs=output_layer, begin_norm_axis=-1)  # expect: layer-norm-epsilon
  return hidden_size, width, depth, batch, fine, also_fine, normed


def datasets(dataset):
  shapes = dataset.output_shapes  # expect: dataset-output-shapes
  types = dataset.output_types  # expect: dataset-output-shapes
  classes = dataset.output_classes  # expect: dataset-output-shapes
  spec = dataset.element_spec
  return shapes, types, classes, spec


def training(optimizer, loss, tvars, global_step):
  a = optimizer.minimize(loss, global_step)  # expect: minimize-global-step
  b = optimizer.minimize(loss, tf.train.get_global_step())  # expect: minimize-global-step, get-global-step
  c = optimizer.minimize(loss, global_step=global_step)  # expect: minimize-global-step-keyword
  d = optimizer.minimize(loss, var_list=tvars)
  e = optimizer.minimize(loss, trainable_variables)
  tf.compat.v1.logging.info('step %d', 1)  # expect: logging
  tf.compat.v2.summary.scalar('loss', loss, step=1)
  return a, b, c, d, e


def t2t_style_estimator(model_fn, run_config):
  estimator = contrib.tpu().TPUEstimator(model_fn=model_fn, config=run_config)  # expect: wrapper-call
  config = contrib.tpu().RunConfig()
  return estimator, config


def continuous_eval(model_dir):
  for checkpoint in evaluation.checkpoints_iterator(model_dir):  # expect: checkpoints-iterator
    yield checkpoint
  for checkpoint in tf.train.checkpoints_iterator(model_dir):
    yield checkpoint


def a_repositorys_own_executor(executor, estimator, eval_input_fn, metric_fn):
  executor.evaluate(eval_input_fn, metric_fn)
  executor.evaluate(eval_input_fn=eval_input_fn, eval_metric_fn=metric_fn)
  return estimator.evaluate(eval_input_fn, steps=10)  # expect: estimator-call


class Port:
  """The kit's contract: a strategy's input pipeline reads the global batch
  from params['batch_size'], as TPUEstimator's did; TF 2 code."""

  def input_pipeline(self, strategy, params):
    return strategy, params['batch_size']


def input_fn(params):
  return params['batch_size']  # expect: batch-size-param
