"""migration-compare: a port checked against its legacy model_fn.

``registry`` holds the checks, each one unit; ``checks/`` is the kit's
own, one file each (driver, judge, hint, bar), registered in the run order
``checks.ORDER``; what they share is ``verdict`` (the result and how it is
judged), ``passes`` (the passes over a run that several checks judge) and
``step_record`` (what one step did, both sides); ``harness`` runs the plan
on both sides (pair/side.py) with the run's context (``context``);
``golden`` keeps the recorded legacy side in a bundle; ``plot`` draws the
losses; ``command`` is the command.
"""
