"""Asking for a TPU where there is none fails fast, and never leaves this machine.

conftest points the GCE metadata server at 127.0.0.1:9 (closed), so the named-
TPU case exercises the real lookup path against a local refusal.
"""
import socket
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
  with pytest.raises(TPUNotFoundError, match="TPU 'env-tpu' not found"):
    tpu.find_tpu(None, timeout=10)
