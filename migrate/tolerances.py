"""The bars the equivalence checks hold a port to (float32, CPU), in one place.

The figures they reach on the kit's own pair are in the README.
"""
# Class probabilities after checkpoint conversion; class ids must be equal.
CONVERSION_PROBABILITY_ATOL = 1e-6
# Forward pass at identical weights (probabilities), and the input pipelines'
# images for the same records.
INFERENCE_ATOL = 1e-6
INPUT_ATOL = 1e-6
# Evaluation accuracy at identical weights: the same examples right and wrong
# (an argmax flips only at a near-tie, which outputs within INFERENCE_ATOL
# make vanishingly rare).
EVAL_ACCURACY_ATOL = 0.0
# One step at identical weights: the loss, every gradient, the updated weights.
ONE_STEP_ATOL = 1e-6
# The learning rate each side applied at a step.
LEARNING_RATE_ATOL = 1e-9
# The loss of every step of a trajectory, and the weights at its end.
TRAJECTORY_ATOL = 1e-5
# With several replicas the gradient sum runs in another order than the
# single-replica sum (differences of ~5e-8 in one step), and this network's
# early training amplifies such differences about twofold per step: measured,
# they pass 1e-5 after 13 (2 replicas) and 17 (4 replicas) steps. So a
# multi-replica trajectory is held to TRAJECTORY_ATOL over its first steps,
# and its whole length is reported. The bugs it is there for (loss scaled per
# replica, global batch per replica) differ from the first step on. Every step
# of it is also held to ONE_STEP_ATOL with the port re-synchronised to the
# legacy weights before each step (compare.stepwise), which no amplification
# can reach.
MULTI_REPLICA_EXACT_STEPS = 10
