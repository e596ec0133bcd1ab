"""Tools for a team's own TPUEstimator code: what to change, and proof.

One folder per tool, each with its command:

  scanner/     migration-scan PATH...: what the code must change
  compare/     migration-compare --port=...: the port against the legacy
               model_fn, live or against a golden bundle
  checkpoint/  migration-convert-checkpoint: an Estimator checkpoint for the
               port, or the port's Keras 2 one for Keras 3

Beside them, what they share: ``port`` (the Port contract), ``runners`` (the
interface both sides of a comparison answer), ``legacy`` (a model_fn run as
TPUEstimator runs it on CPU), ``serving``, ``outputs``, ``variable_map``,
``optimizers``, ``tolerances``; ``cli`` and ``pair`` are the commands' front
end, ``loading`` finds the user's code by name. The tools import nothing of
the worked example (estimator_mnist, migrate, mnist_common): the kit's own
pair is named by string, as a team names its own.
"""
