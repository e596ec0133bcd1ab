"""estimator_mnist's CNN on JAX: Keras 3 on its JAX backend, with
keras.distribution's DataParallel for the replicas (TPU cores, or logical
CPU devices), and no TensorFlow.

The third half of the worked example: what a team that leaves TPUEstimator
for JAX writes, file for file beside migrate/ (README, "The worked
example"). Run it with ``python -m migrate_jax``.
"""
