"""The legacy reference: the classic TPUEstimator MNIST CNN, runnable on TF 2.15.

Run it with ``python -m estimator_mnist`` (CPU) or ``--use_tpu`` (Cloud TPU).
Its files line up with ``migrate``'s: model.py, data.py, train.py, main.py.
"""
