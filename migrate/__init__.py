"""The migrated model: the estimator_mnist CNN on tf.distribute.

Runs on a TPU (TPUStrategy), on CPUs and GPUs (MirroredStrategy, or one device)
and on several machines (MultiWorkerMirroredStrategy), with two trainers:
Keras ``fit`` with ``steps_per_execution``, and a custom loop with
``strategy.run``. Its files line up with ``estimator_mnist``'s: model.py,
data.py, train.py, main.py. It imports nothing of ``tensorflow_estimator`` or
``estimator_mnist``.
"""
