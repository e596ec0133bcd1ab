"""A TF 2.x compat.v1 TPUEstimator program, written for the scanner tests."""
import tensorflow.compat.v1 as tf  # expect: compat-v1-import
import tensorflow.compat.v2 as tf2


def model_fn(features, labels, mode, params):
  logits = tf.layers.Dense(10)(features)  # expect: layers-v1
  loss = tf.losses.softmax_cross_entropy(tf.one_hot(labels, 10), logits)  # expect: losses-v1
  learning_rate = tf.train.exponential_decay(0.1, tf.train.get_global_step(),  # expect: decay-v1, get-global-step
                                             1000, 0.9)
  optimizer = tf.tpu.CrossShardOptimizer(  # expect: cross-shard-optimizer
      tf.train.GradientDescentOptimizer(learning_rate))  # expect: sgd-v1
  hook = tf.train.LoggingTensorHook({'loss': loss}, every_n_iter=10)  # expect: session-hook
  return tf.estimator.tpu.TPUEstimatorSpec(  # expect: estimator-spec
      mode, loss=loss, train_op=optimizer.minimize(loss),
      training_hooks=[hook], scaffold_fn=None)  # expect: training-hooks, scaffold-fn


def serving_input_fn():
  image = tf.placeholder(tf.uint8, [None, 28, 28, 1])  # expect: placeholder
  return tf.estimator.export.TensorServingInputReceiver(image, image)  # expect: serving-receiver


def run(flags_obj):
  config = tf.estimator.tpu.RunConfig(  # expect: run-config
      tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=50))  # expect: tpu-config, iterations-per-loop
  estimator = tf.estimator.tpu.TPUEstimator(model_fn, config=config)  # expect: tpu-estimator
  tf.estimator.train_and_evaluate(estimator, None, None)  # expect: train-and-evaluate
  with tf.Session() as sess:  # migration-scan: ignore
    sess.run(tf.global_variables_initializer())  # expect: variables-initializer


def bfloat16_features(features):
  with tf.tpu.bfloat16_scope():  # expect: bfloat16-scope
    return tf.cast(features, tf.bfloat16)


def host_call_fn(step, lr, logits, labels):
  with tf2.summary.create_file_writer('/tmp/logs').as_default():
    tf2.summary.scalar('learning_rate', lr[0], step=step[0])
    in_top_5 = tf.nn.in_top_k(logits, labels, 5)  # expect: tf1-positional
    return tf.summary.all_v2_summary_ops(), in_top_5  # expect: summary-v1


def clipped_train_op(loss, learning_rate):
  optimizer = tf.train.AdamOptimizer(learning_rate, epsilon=1e-6)  # expect: optimizer-v1
  grads_and_vars = optimizer.compute_gradients(loss)  # expect: compute-gradients
  clipped = [(tf.clip_by_norm(g, 1.0), v) for g, v in grads_and_vars]
  return optimizer.apply_gradients(  # expect: apply-gradients-global-step-keyword
      clipped, global_step=tf.train.get_global_step())  # expect: get-global-step


def per_example_loss(labels, logits):
  return tf.losses.sparse_softmax_cross_entropy(  # expect: losses-v1
      labels, logits, reduction=tf.losses.Reduction.NONE)  # expect: losses-v1


def summed_loss(labels, logits, weights):
  return tf.losses.sparse_softmax_cross_entropy(  # expect: losses-v1
      labels, logits, weights,
      reduction=tf.losses.Reduction.SUM_BY_NONZERO_WEIGHTS)  # expect: losses-reduction-v1
