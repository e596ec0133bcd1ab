"""python -m migrate_jax: see main.py."""
from migrate_jax import main

main.run()
