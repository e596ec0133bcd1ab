"""The contract of a port on arrays (JAX), at the path a port imports it from
(``from migration_tools.pair import array_port``). Its code lives with its
framework: migration_tools/pair/frameworks/arrays/port.py."""
from migration_tools import moved

moved.public(__name__)
