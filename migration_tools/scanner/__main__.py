"""python -m migration_tools.scanner: migration-scan."""
from migration_tools.scanner import command

command.run()
