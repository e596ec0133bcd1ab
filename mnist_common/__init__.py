"""What the example's two halves share: MNIST data preparation, the common
flags and the config they give, the example's errors, TPU lookup.

Nothing here imports ``tensorflow_estimator``, so the migrated half can use
it without pulling in the legacy stack; the tools use none of it.
"""
