"""The bars the equivalence checks hold a port to (float32, CPU), in one place.

The figures they reach are in docs/EQUIVALENCE.md.
"""
# Every float output of --verify after checkpoint conversion (integer outputs,
# e.g. class ids, must be equal).
CONVERSION_ATOL = 1e-6
# Forward pass at identical weights (probabilities), and the input pipelines'
# images for the same records.
INFERENCE_ATOL = 1e-6
INPUT_ATOL = 1e-6
# Every eval metric at identical weights, relative to max(1, |legacy value|):
# counts (accuracy, top-k) must agree to the example over up to 1e5 examples,
# means of float outputs to their summation order.
EVAL_METRIC_RTOL = 1e-5
# One step at identical weights: the loss, every gradient, the updated weights.
ONE_STEP_ATOL = 1e-6
# The learning rate each side applied at a step.
LEARNING_RATE_ATOL = 1e-9
# The loss of every step of a trajectory, and the weights at its end.
TRAJECTORY_ATOL = 1e-5
# A free-running multi-replica trajectory is not held to TRAJECTORY_ATOL.
# The replicas sum each gradient in another order than one replica does (the
# weights differ by ~5e-8 after one step), and early training amplifies such
# rounding differences two- to threefold per step. Measured on the kit's own
# (correct) pair, the losses part from the legacy ones (pass 1e-5) after 5 to
# 21 steps, at random between batch sizes and replica counts; a legacy run
# perturbed by the same amount parts from an unperturbed one after 6 to 41
# steps, just as much at random, so no bar derived from it separates
# rounding from a bug. So each of its steps is judged with the port
# re-synchronised to the legacy weights before it (stepwise, ONE_STEP_ATOL),
# which no amplification reaches, and the free run is reported: it must
# complete with finite losses, and where it parts is in the report.
