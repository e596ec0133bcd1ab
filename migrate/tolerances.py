"""The bars the equivalence checks hold a port to (float32, CPU), in one place.

The figures they reach on the kit's own pair are in the README.
"""
# Class probabilities after checkpoint conversion; class ids must be equal.
CONVERSION_PROBABILITY_ATOL = 1e-6
