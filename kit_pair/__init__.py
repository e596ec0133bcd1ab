"""The kit's own pair: estimator_mnist's model_fn beside migrate's port, as
the tools take a team's (``mnist.make_port``). It stands apart from both
halves of the example, which import nothing of the tools."""
