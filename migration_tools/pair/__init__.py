"""Both sides of a pair, behind one interface (side.py): the legacy
model_fn run as TPUEstimator ran it (legacy.py), the port run under a
strategy (port_runner.py), and either side recorded or replayed
(recorded.py); the port contract a team writes to (port.py, array_port.py)
and the framework each is written in, one registered adapter each
(frameworks/), with where it runs (runs_on.py); the variable
and slot maps between the two (variable_map.py, optimizers.py); and the
flags and loading of a pair named on the command line (flags.py,
loading.py). compare/ and checkpoint/ are tools on top of it."""
