"""Python 2, as old TPU repositories often still hold; it must not crash the scan."""
import tensorflow as tf

print "training", tf.__version__  # expect-unchecked: Python 2
