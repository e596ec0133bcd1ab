"""Finding the TPU, or saying at once that there is none.

``TPUClusterResolver`` alone is a poor first step off a TPU: given no name it
raises a bare ValueError, given a name it asks the GCE metadata server with no
time limit, and given an address it succeeds, only for the first session to
wait for a server that never answers. ``find_tpu`` checks each case first and
answers within seconds.
"""
import glob
import os
import socket
import threading
import urllib.parse

import tensorflow as tf

from mnist_common.errors import TPUNotFoundError

_HINT = ('pass --tpu=NAME (Cloud TPU name), --tpu=grpc://IP:8470, or '
         '--tpu=local on a TPU VM; or drop --use_tpu to train on CPU/GPU')
# Device files of TPUs attached to this VM (TPU VMs).
_LOCAL_TPU_DEVICES = ('/dev/accel*', '/dev/vfio/[0-9]*')
# Environment variables through which Cloud TPU tooling names the TPU.
_TPU_ENV = ('TPU_NAME', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS', 'TPU_CONFIG')


def has_local_tpu() -> bool:
  return any(glob.glob(pattern) for pattern in _LOCAL_TPU_DEVICES)


# An HTTP/2 client's first bytes: its preface and an empty SETTINGS frame.
_HTTP2_HELLO = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + bytes(
    [0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4


def _check_reachable(master: str, timeout: float, hint: str = _HINT) -> None:
  """Raises TPUNotFoundError unless a gRPC server (a TPU worker speaks gRPC,
  which is HTTP/2) answers at master. Anything else there would make
  TensorFlow's C++ abort the process when it connects."""
  address = urllib.parse.urlparse(master)
  try:
    with socket.create_connection((address.hostname, address.port or 8470),
                                  timeout=timeout) as connection:
      connection.sendall(_HTTP2_HELLO)
      # An HTTP/2 server's first frame is its SETTINGS: 9 header bytes,
      # the fourth the frame type.
      reply = b''
      while len(reply) < 9:
        chunk = connection.recv(9 - len(reply))
        if not chunk:
          break
        reply += chunk
  except OSError as e:
    raise TPUNotFoundError(f'no TPU answers at {master} ({e}); {hint}') from e
  if len(reply) < 9 or reply[3] != _SETTINGS_FRAME:
    raise TPUNotFoundError(
        f'something answers at {master}, but not a TPU: it does not speak '
        f'gRPC (it replied {reply[:20]!r}); check the address and port; '
        f'{hint}')


def _resolve(tpu, zone, project, timeout, hint=_HINT):
  # The resolver may ask the metadata server, with no time limit of its own.
  result = {}

  def target():
    try:
      resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
          tpu=tpu, zone=zone, project=project)
      # For a named TPU, master() asks the Cloud TPU API for its address.
      result['master'] = '' if tpu == 'local' else resolver.master()
      result['resolver'] = resolver
    except Exception as e:  # pylint: disable=broad-except
      result['error'] = e

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(timeout)
  if thread.is_alive():
    raise TPUNotFoundError(f'looking up TPU {tpu!r} took over {timeout:.0f}s '
                           f'(is this a GCE VM?); {hint}')
  if 'error' in result:
    e = result['error']
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    raise TPUNotFoundError(f'TPU {tpu!r} not found ({reason}); {hint}') from e
  return result['resolver'], result['master']


def find_tpu(tpu: str | None, zone: str | None = None,
             project: str | None = None, timeout: float = 15.0
             ) -> 'tf.distribute.cluster_resolver.TPUClusterResolver':
  """Returns a resolver for a TPU that is there, or raises TPUNotFoundError.

  Args:
    tpu: name, grpc:// address, 'local', or None (TPU_NAME and friends, then a
      TPU attached to this VM).
    zone: GCE zone, or None to ask the metadata server.
    project: GCP project, or None to ask the metadata server.
    timeout: seconds allowed for the lookup and for reaching the TPU.
  """
  if not tpu and not any(os.environ.get(v) for v in _TPU_ENV):
    if not has_local_tpu():
      raise TPUNotFoundError(f'no TPU found on this machine; {_HINT}')
    tpu = 'local'
  hint = _HINT
  if not tpu:
    # TPU_NAME and the like are read by the resolver itself: a user who set
    # none of the flags must learn that the environment chose the TPU.
    chosen = [v for v in _TPU_ENV if os.environ.get(v)]
    hint = (f'the environment variable {chosen[0]}='
            f'{os.environ[chosen[0]]!r} chose this TPU: unset it, or {_HINT}')
    tpu = os.environ.get('TPU_NAME')
  if tpu == 'local' and not has_local_tpu():
    raise TPUNotFoundError(f'--tpu=local but this machine has no TPU device '
                           f'(/dev/accel*, /dev/vfio); {hint}')
  resolver, master = _resolve(tpu, zone, project, timeout, hint)
  if master:
    _check_reachable(master, timeout, hint)
  return resolver
