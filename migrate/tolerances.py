"""Every bar the equivalence checks hold the port to, in one place (float32, CPU).

The figures they reach on the kit's own pair are in the README.
"""
# Forward pass at identical weights, and every gradient of one step.
INFERENCE_ATOL = 1e-6
GRADIENT_ATOL = 1e-6
# Loss of every step over a trajectory, and the weights at its end.
TRAJECTORY_ATOL = 1e-5
# Class probabilities after checkpoint conversion; class ids must be equal.
CONVERSION_PROBABILITY_ATOL = 1e-6
