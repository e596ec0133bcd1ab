"""``python -m estimator_mnist``: see main.py."""
from estimator_mnist import main

if __name__ == '__main__':
  main.run()
