"""Asking for a TPU where there is none fails fast, and never leaves this machine.

conftest points the GCE metadata server at 127.0.0.1:9 (closed), so the named-
TPU case exercises the real lookup path against a local refusal.
"""
import http.server
import socket
import socketserver
import subprocess
import sys
import threading
import time

import pytest

from mnist_common import tpu
from mnist_common.errors import TPUNotFoundError


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.mark.parametrize('name, message', [
    (None, 'no TPU found on this machine'),
    ('local', '--tpu=local but this machine has no TPU device'),
    ('my-tpu', "TPU 'my-tpu' not found"),
    ('grpc://127.0.0.1:{port}', 'no TPU answers at grpc://127.0.0.1'),
])
def test_no_tpu_fails_fast_with_hint(name, message):
  if name:
    name = name.format(port=_closed_port())
  start = time.monotonic()
  with pytest.raises(TPUNotFoundError, match=message) as raised:
    tpu.find_tpu(name, timeout=10)
  assert time.monotonic() - start < 15
  assert 'drop --use_tpu' in str(raised.value)
  assert '\n' not in str(raised.value)


def test_tpu_name_from_environment_is_used(monkeypatch):
  monkeypatch.setenv('TPU_NAME', 'env-tpu')
  with pytest.raises(TPUNotFoundError, match=r"TPU 'env-tpu' not found .*; "
                     r"the environment variable TPU_NAME='env-tpu' chose this "
                     'TPU: unset it, or pass --tpu'):
    tpu.find_tpu(None, timeout=10)


def test_an_address_where_no_grpc_server_answers_is_no_tpu():
  """A plain HTTP/1 server: TensorFlow would abort the process on it."""
  server = socketserver.TCPServer(('127.0.0.1', 0),
                                  http.server.BaseHTTPRequestHandler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    master = f'grpc://127.0.0.1:{server.server_address[1]}'
    with pytest.raises(TPUNotFoundError, match=f'something answers at '
                       f'{master}, but not a TPU: it does not speak gRPC'):
      tpu.find_tpu(master, timeout=10)
  finally:
    server.shutdown()
    server.server_close()


@pytest.mark.e2e
def test_a_grpc_server_passes_the_probe(tmp_path):
  """TensorFlow's own gRPC server, in a process of its own (it cannot be
  stopped otherwise), is taken for what a TPU worker would be."""
  port = _closed_port()
  server = subprocess.Popen(
      [sys.executable, '-c', 'import tensorflow as tf, time; '
       f'tf.distribute.Server({{"worker": ["127.0.0.1:{port}"]}}, '
       '"worker", 0); time.sleep(120)'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 60
    while True:
      try:
        socket.create_connection(('127.0.0.1', port), timeout=1).close()
        break
      except OSError:
        assert time.monotonic() < deadline and server.poll() is None
        time.sleep(0.5)
    resolver = tpu.find_tpu(f'grpc://127.0.0.1:{port}', timeout=10)
    assert resolver.master() == f'grpc://127.0.0.1:{port}'
  finally:
    server.kill()
    server.wait()
