"""Workers of a multi-worker job meet before TensorFlow connects them.

MultiWorkerMirroredStrategy() blocks, holding Python's interpreter lock, until
every worker of TF_CONFIG has joined; a worker that never comes leaves the
others waiting for good, and TensorFlow's own SIGTERM handler (its preemption
notifier) keeps even a polite kill from ending them. So the workers first
meet on their own ports in plain Python, where a deadline and signals work:
each listens on its TF_CONFIG address, tells every peer its index, and waits
until it has reached all of them and heard from all of them. Then each lets
its port go to TensorFlow's server. A port another process holds is found
here too.
"""
import select
import socket
import time

from absl import logging

from kit_core.errors import KitError

_POLL_SECONDS = 0.2


def _address(worker: str) -> tuple[str, int]:
  host, _, port = worker.rpartition(':')
  return host.strip('[]'), int(port)


def _check_addresses(members: list[tuple[str, str]]) -> None:
  """KitError for an address that is no host:port or whose host does not
  resolve: TensorFlow's coordination service would wait on it for good."""
  for name, address in members:
    try:
      host, port = _address(address)
      socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except ValueError as e:
      raise KitError(f'TF_CONFIG gives {name} the address {address!r}, whose '
                     'port is not a number; write host:port') from e
    except OSError as e:
      raise KitError(f'TF_CONFIG gives {name} the host {host!r}, which does '
                     f'not resolve ({e.strerror or e}); check the address') from e


def _listen(worker: str, index: int, count: int) -> socket.socket:
  _, port = _address(worker)
  listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  # TensorFlow's server takes the port as soon as this lets it go.
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    listener.bind(('', port))
  except OSError as e:
    listener.close()
    raise KitError(f'this worker ({index} in TF_CONFIG) cannot listen '
                   f'on {worker}: {e.strerror}; free the port, or give this '
                   'worker another one in TF_CONFIG on every worker') from e
  listener.listen(count)
  listener.setblocking(False)
  return listener


def _greet(worker: str, index: int) -> bool:
  """Tells the worker at `worker` our index; False if it is not listening."""
  try:
    with socket.create_connection(_address(worker), timeout=1) as connection:
      connection.sendall(f'migrate-worker {index}\n'.encode())
    return True
  except OSError:
    return False


def _heard(listener: socket.socket, count: int) -> set[int]:
  """The indexes of the peers that greeted us since the last call."""
  heard = set()
  while select.select([listener], [], [], 0)[0]:
    try:
      connection, _ = listener.accept()
    except BlockingIOError:
      break
    with connection:
      connection.settimeout(1)
      try:
        words = connection.recv(64).decode(errors='replace').split()
      except OSError:
        continue
      if (len(words) == 2 and words[0] == 'migrate-worker' and
          words[1].isdigit() and int(words[1]) < count):
        heard.add(int(words[1]))
  return heard


def wait_for_workers(members: list[tuple[str, str]], rank: int,
                     timeout: float) -> None:
  """Returns once every task of the cluster is up and has heard from us.

  Args:
    members: the training tasks of TF_CONFIG, ('chief 0', 'host:port') each,
      in one order on every task (strategy.cluster_members).
    rank: this task's place in it.
    timeout: seconds to wait for the others.

  Raises:
    KitError: an address that does not resolve, this task's port is taken,
      or a task did not come in time.
  """
  _check_addresses(members)
  peers = {i for i in range(len(members)) if i != rank}
  if not peers:
    return
  addresses = [address for _, address in members]
  listener = _listen(addresses[rank], members[rank][0], len(members))
  reached, heard = set(), set()
  deadline = time.monotonic() + timeout
  logging.info('Waiting up to %.0f s (--worker_wait_seconds) for %s of '
               'TF_CONFIG', timeout, ', '.join(members[i][0]
                                               for i in sorted(peers)))
  try:
    while True:
      heard |= _heard(listener, len(members))
      reached |= {i for i in peers - reached if _greet(addresses[i], rank)}
      heard |= _heard(listener, len(members))
      if reached >= peers and heard >= peers:
        break
      if time.monotonic() > deadline:
        missing = sorted(peers - (reached & heard))
        raise KitError(
            f'{", ".join(f"{members[i][0]} ({addresses[i]})" for i in missing)}'
            f' did not come within {timeout:.0f} s (--worker_wait_seconds); '
            'start every task of TF_CONFIG, or check the addresses')
      time.sleep(_POLL_SECONDS)
  finally:
    listener.close()
  logging.info('All %d tasks are up', len(members))
