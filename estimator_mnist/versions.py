"""Which Estimator build is really running.

``tensorflow-estimator`` and ``tf-estimator-nightly`` install into the same
``tensorflow_estimator/`` folder, so pip can list both while the files on disk
are one build's, whichever was installed last. This module compares the files
Python imports against each distribution's RECORD hashes.
"""
import base64
import hashlib
import importlib.metadata
import os

ESTIMATOR_DISTS = ('tensorflow-estimator', 'tf-estimator-nightly')
# A file that differs between the 2.15.0 release and the last nightly.
_PROBE = 'tensorflow_estimator/python/estimator/estimator.py'


def _file_hash(path: str) -> str:
  with open(path, 'rb') as f:
    digest = hashlib.sha256(f.read()).digest()
  return 'sha256=' + base64.urlsafe_b64encode(digest).rstrip(b'=').decode()


def estimator_build() -> dict:
  """Returns {'dist', 'version', 'path', 'installed'} of the running Estimator.

  'dist' is the distribution whose recorded hash matches the imported files
  ('unknown' if none does); 'installed' lists every Estimator distribution pip
  knows of, with its version.
  """
  import tensorflow_estimator  # pylint: disable=g-import-not-at-top
  package_dir = os.path.dirname(os.path.abspath(tensorflow_estimator.__file__))
  probe = os.path.join(os.path.dirname(package_dir), _PROBE)
  actual = _file_hash(probe)
  installed, running = {}, ('unknown', 'unknown')
  for name in ESTIMATOR_DISTS:
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      continue
    installed[name] = dist.version
    for f in dist.files or ():
      if f.as_posix() == _PROBE and f.hash and \
          f'{f.hash.mode}={f.hash.value}' == actual:
        running = (name, dist.version)
  return {'dist': running[0], 'version': running[1], 'path': package_dir,
          'installed': installed}


def report() -> str:
  """A few lines naming the TensorFlow, Keras and Estimator builds in use."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  build = estimator_build()
  others = ', '.join(f'{k}=={v}' for k, v in build['installed'].items())
  return '\n'.join([
      f'tensorflow {tf.__version__}',
      f'keras {importlib.metadata.version("keras")}',
      f'estimator {build["dist"]}=={build["version"]} (files in '
      f'{build["path"]}; installed: {others})',
  ])
