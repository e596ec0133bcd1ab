"""migration-compare: a port checked against its legacy model_fn.

``harness`` drives both sides through the runners' interface (``runners``
declares it), ``checks`` judges each answer against ``tolerances``,
``golden`` records the legacy side and replays it, ``port_runner`` runs the
port, ``plot`` draws the losses, ``command`` is the command.
"""
