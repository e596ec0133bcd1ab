"""Code shared by both halves of the kit and the tools: MNIST data preparation,
common flags, and the Keras 2/3 differences (keras_compat).

Nothing here imports ``tensorflow_estimator``, so the migrated package can use it
without pulling in the legacy stack.
"""
