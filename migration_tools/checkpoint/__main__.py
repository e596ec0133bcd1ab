"""python -m migration_tools.checkpoint: migration-convert-checkpoint."""
from migration_tools.checkpoint import command

command.run()
