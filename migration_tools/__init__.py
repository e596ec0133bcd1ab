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
and the flags and loading of a pair named on the command line. A port may
take ``tf1_keras/``: Keras pieces that compute what TF 1 computed (each TF 1
optimizer's Keras settings, batch norm as TF 1's fused kernel on Keras 3);
no tool imports it. Beside them:
``outputs`` (how two outputs differ), ``tolerances`` (the bars), ``cli``
(every command's front end) and ``moved`` (the import paths of an earlier
release that moved: ``port`` is one, kept for a release). The tools import nothing of the worked example
(estimator_mnist, migrate, mnist_common): the kit's own pair (kit_pair/) is
named by string, as a team names its own.
"""
