"""A TF 2.x compat.v1 TPUEstimator program, written for the scanner tests."""
import tensorflow.compat.v1 as tf


def model_fn(features, labels, mode, params):
  logits = tf.layers.Dense(10)(features)
  loss = tf.losses.softmax_cross_entropy(tf.one_hot(labels, 10), logits)
  learning_rate = tf.train.exponential_decay(0.1, tf.train.get_global_step(),
                                             1000, 0.9)
  optimizer = tf.tpu.CrossShardOptimizer(
      tf.train.GradientDescentOptimizer(learning_rate))
  hook = tf.train.LoggingTensorHook({'loss': loss}, every_n_iter=10)
  return tf.estimator.tpu.TPUEstimatorSpec(
      mode, loss=loss, train_op=optimizer.minimize(loss),
      training_hooks=[hook], scaffold_fn=None)


def serving_input_fn():
  image = tf.placeholder(tf.uint8, [None, 28, 28, 1])
  return tf.estimator.export.TensorServingInputReceiver(image, image)


def run(flags_obj):
  config = tf.estimator.tpu.RunConfig(
      tpu_config=tf.estimator.tpu.TPUConfig(iterations_per_loop=50))
  estimator = tf.estimator.tpu.TPUEstimator(model_fn, config=config)
  tf.estimator.train_and_evaluate(estimator, None, None)
  with tf.Session() as sess:  # migration-scan: ignore
    sess.run(tf.global_variables_initializer())


def bfloat16_features(features):
  with tf.tpu.bfloat16_scope():
    return tf.cast(features, tf.bfloat16)
