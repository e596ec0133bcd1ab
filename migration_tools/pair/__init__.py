"""Both sides of a pair, behind one interface (side.py): the legacy
model_fn run as TPUEstimator ran it (legacy.py), the port run by its
framework, and either side recorded or replayed (recorded.py); each
framework a port is written in, one folder each (frameworks/<name>/: its
registered adapter, its contract, its runner, precision, TPU readiness and
where it ran), the contracts imported from port.py and array_port.py; what
every report says of where a port ran (runs_on.py); the variable
and slot maps between the two (variable_map.py, optimizers.py); and the
flags and loading of a pair named on the command line (flags.py,
loading.py). compare/ and checkpoint/ are tools on top of it."""
