"""Downloading the MNIST IDX files, one path to the data among several.

Many machines that train models (this one, and many TPU workers) have no
internet, so a download fails fast, with a message that says how else to
provide the data, instead of retrying for minutes.
"""
import os
import threading
import urllib.error
import urllib.request

from absl import logging

from kit_core import atomic
from mnist_common import idx
from mnist_common.errors import DataError

# The mirror TensorFlow's own MNIST tutorials used.
DEFAULT_URL = 'https://storage.googleapis.com/cvdf-datasets/mnist/'
_CHUNK = 1 << 16


def _fetch(url: str, dest: str, timeout: float) -> int:
  """Streams url into dest; returns the number of bytes."""
  with urllib.request.urlopen(url, timeout=timeout) as response, \
      open(dest, 'wb') as out:
    total = 0
    while chunk := response.read(_CHUNK):
      out.write(chunk)
      total += len(chunk)
  return total


def _fetch_with_deadline(url: str, dest: str, timeout: float) -> int:
  # urlopen's timeout covers connect and each read, but not a DNS lookup,
  # which can hang for a long time on a machine with a broken resolver.
  result = {}

  def target():
    try:
      result['size'] = _fetch(url, dest, timeout)
    except BaseException as e:  # pylint: disable=broad-except
      result['error'] = e

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(timeout * 4)
  if thread.is_alive():
    raise TimeoutError(f'no complete answer within {timeout * 4:.0f}s')
  if 'error' in result:
    raise result['error']
  return result['size']


def download_idx(base_url: str, dest_dir: str, timeout: float = 5.0) -> None:
  """Downloads the four gzipped IDX files from base_url into dest_dir.

  Each file is checked (magic number and size) before it is moved into place,
  so dest_dir never holds a partial or wrong file.
  """
  os.makedirs(dest_dir, exist_ok=True)
  base_url = base_url if base_url.endswith('/') else base_url + '/'
  for pair in idx.FILES.values():
    for stem in pair:
      name = stem + '.gz'
      final = os.path.join(dest_dir, name)
      if os.path.isfile(final):
        continue
      url = base_url + name
      with atomic.temporary_path(final) as tmp:
        logging.info('Downloading %s', url)
        try:
          size = _fetch_with_deadline(url, tmp, timeout)
        except urllib.error.HTTPError as e:
          raise DataError(f'cannot download {url}: the server answered HTTP '
                          f'{e.code} {e.reason}; check --data_url') from e
        except (urllib.error.URLError, OSError, TimeoutError) as e:
          reason = getattr(e, 'reason', e)
          raise DataError(
              f'cannot download {url} ({reason}); without network, put the '
              'MNIST IDX files or mnist.npz in --data_dir, or use '
              '--data_source=digits') from e
        reader = idx.read_images if 'images' in stem else idx.read_labels
        try:
          reader(tmp)
        except DataError as e:
          raise DataError(f'{url} did not give a valid IDX file: '
                          f'{str(e).replace(tmp, name)}') from e
      logging.info('Downloaded %s (%d bytes)', name, size)
