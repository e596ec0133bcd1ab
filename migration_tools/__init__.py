"""Tools for a team's own TPUEstimator code: what to change, and proof.

One folder per tool, each with its command:

  scanner/     migration-scan PATH...: what the code must change
  compare/     migration-compare --port=...: the port against the legacy
               model_fn, live or against a golden bundle
  checkpoint/  migration-convert-checkpoint: an Estimator checkpoint for the
               port, or the port's Keras 2 one for Keras 3

compare/ and checkpoint/ stand on ``pair/``: both sides of a pair behind one
interface (the model_fn as TPUEstimator ran it, the port under a strategy,
either recorded or replayed), the Port contract, the variable and slot maps,
and the flags and loading of a pair named on the command line. Beside them:
``outputs`` (how two outputs differ), ``tolerances`` (the bars) and ``cli``
(every command's front end). The tools import nothing of the worked example
(estimator_mnist, migrate, mnist_common): the kit's own pair (kit_pair/) is
named by string, as a team names its own.
"""
