"""migration-compare: a port checked against its legacy model_fn.

``registry`` holds the checks, each one unit (``units`` registers the
kit's own); ``harness`` runs the plan on both sides (pair/side.py) with
what the checks share (``context``); ``checks``, ``updates``, ``speed`` and
``tpu_ready`` judge against ``tolerances``; ``golden`` keeps the recorded
legacy side in a bundle; ``plot`` draws the losses; ``command`` is the
command.
"""
