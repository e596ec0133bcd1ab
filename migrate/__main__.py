"""``python -m migrate``: see main.py."""
from migrate import main

if __name__ == '__main__':
  main.run()
