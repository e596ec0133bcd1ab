"""Tools for a team's own TPUEstimator code: what to change, and proof.

  migration-scan PATH...           what the code must change (scan.py)
  migration-compare --port=...     the port against the legacy model_fn
  migration-convert-checkpoint     an Estimator checkpoint for the port

The port is described by a ``port.Port`` (the contract); ``legacy`` runs the
user's model_fn as TPUEstimator does on CPU, ``port_runner`` runs the port,
``harness`` drives both and ``checks`` compares them against the bars in
``tolerances``; ``compare.py`` is the harness's command. ``kit_pair`` is
the kit's own pair, the commands' defaults and a worked example.
"""
