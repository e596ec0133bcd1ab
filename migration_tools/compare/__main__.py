"""python -m migration_tools.compare: migration-compare."""
from migration_tools.compare import command

command.run()
