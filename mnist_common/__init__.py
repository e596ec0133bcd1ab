"""Code shared by both halves of the kit: MNIST data preparation and common flags.

Nothing here imports ``tensorflow_estimator``, so the migrated package can use it
without pulling in the legacy stack.
"""
