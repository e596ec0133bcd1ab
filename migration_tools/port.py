"""The port contract's path before it moved to migration_tools.pair.port:
a port written for that release still imports it, with a DeprecationWarning
(migration_tools/moved.py). It goes in the next release."""
from migration_tools import moved

moved.alias(__name__)
