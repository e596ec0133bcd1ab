"""Tools for a team's own TPUEstimator code: what to change, and proof.

  migration-scan PATH...           what the code must change (scan.py)
  migration-compare --port=...     the port against the legacy model_fn;
                                   --record_bundle / --bundle: the same
                                   checks against a recording (golden.py)
  migration-convert-checkpoint     an Estimator checkpoint for the port, or
                                   the port's Keras 2 one for Keras 3

The port is described by a ``port.Port`` (the contract); ``legacy`` runs the
user's model_fn as TPUEstimator does on CPU, ``port_runner`` runs the port,
``harness`` drives both and ``checks`` compares them against the bars in
``tolerances``; ``golden`` records and replays the legacy side;
``compare.py`` is the harness's command. ``kit_pair`` is
the kit's own pair, the commands' defaults and a worked example.
"""
