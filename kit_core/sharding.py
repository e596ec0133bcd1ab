"""How a global batch splits over replicas (TPU cores)."""
from kit_core.errors import KitError


def per_replica_batch(global_batch: int, replicas: int, what: str) -> int:
  """The share of the global batch each replica (TPU core) computes.

  Raises KitError when it does not divide evenly; ``what`` names what sets the
  number of replicas (a flag, say), for the message.
  """
  if global_batch % replicas:
    raise KitError(f'--batch_size={global_batch} is not divisible by '
                   f'{what}={replicas}; each replica needs the same share of '
                   'the global batch')
  return global_batch // replicas
