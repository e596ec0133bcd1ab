"""The download path, against a real HTTP server on 127.0.0.1."""
import functools
import http.server
import os
import socket
import threading
import time

import numpy as np
import pytest

from mnist_common import download
from mnist_common import idx
from mnist_common import prepare
from mnist_common.errors import DataError


class _QuietHandler(http.server.SimpleHTTPRequestHandler):

  def log_message(self, *args):
    pass


@pytest.fixture
def mirror(tmp_path):
  """A local MNIST mirror: serves tmp_path/www over HTTP, stopped after."""
  www = tmp_path / 'www'
  www.mkdir()
  rng = np.random.RandomState(0)
  for n, (images_stem, labels_stem) in zip((30, 10), idx.FILES.values()):
    idx.write_idx(str(www / (images_stem + '.gz')),
                  rng.randint(0, 256, (n, 28, 28)))
    idx.write_idx(str(www / (labels_stem + '.gz')), rng.randint(0, 10, n))
  handler = functools.partial(_QuietHandler, directory=str(www))
  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield www, f'http://127.0.0.1:{server.server_port}/'
  finally:
    server.shutdown()
    server.server_close()


def test_download_then_convert(mirror, tmp_path):
  _, url = mirror
  data_dir = str(tmp_path / 'data')
  info = prepare.prepare(data_dir, 'download', url=url)
  assert (info.source, info.train_examples, info.test_examples) == (
      'download', 30, 10)
  assert sorted(f for f in os.listdir(data_dir) if f.endswith('.gz')) == sorted(
      stem + '.gz' for pair in idx.FILES.values() for stem in pair)


def test_missing_file_on_server(mirror, tmp_path):
  www, url = mirror
  os.remove(www / 't10k-labels-idx1-ubyte.gz')
  with pytest.raises(DataError, match=r'cannot download .*t10k-labels.*HTTP 404'):
    download.download_idx(url, str(tmp_path / 'data'))
  leftovers = os.listdir(tmp_path / 'data')
  assert not any(name.startswith('.tmp') for name in leftovers)
  assert 't10k-labels-idx1-ubyte.gz' not in leftovers


def test_server_sends_a_wrong_file(mirror, tmp_path):
  www, url = mirror
  os.replace(www / 'train-labels-idx1-ubyte.gz',
             www / 'train-images-idx3-ubyte.gz')
  with pytest.raises(DataError, match=r'did not give a valid IDX file.*'
                     r'magic number 2049'):
    download.download_idx(url, str(tmp_path / 'data'))
  assert os.listdir(tmp_path / 'data') == []


def test_no_network_fails_fast(tmp_path):
  # A port with nothing listening, as on a machine with no route out.
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  start = time.monotonic()
  with pytest.raises(DataError, match='cannot download .*without network'):
    download.download_idx(f'http://127.0.0.1:{port}/', str(tmp_path))
  assert time.monotonic() - start < 10
