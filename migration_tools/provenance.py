"""Which kit made a recording: its version and, where it runs from a git
checkout, the commit of its code, so that a bundle says what recorded it."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess

DISTRIBUTION = 'tpu-migration-kit'
# The checkout the kit's code sits in, if it is one.
_SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> str | None:
  if shutil.which('git') is None or not os.path.exists(
      os.path.join(_SOURCE, '.git')):
    return None
  try:
    result = subprocess.run(['git', '-C', _SOURCE, *args],
                            capture_output=True, text=True, timeout=10,
                            check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return result.stdout.strip() if result.returncode == 0 else None


def kit() -> dict[str, str]:
  """{'kit': version} and, from a git checkout, 'kit_commit' (the commit,
  with '+changes' if tracked files differ from it)."""
  found = {}
  try:
    found['kit'] = importlib.metadata.version(DISTRIBUTION)
  except importlib.metadata.PackageNotFoundError:
    pass
  commit = _git('rev-parse', 'HEAD')
  if commit:
    changed = _git('status', '--porcelain', '--untracked-files=no')
    found['kit_commit'] = commit + ('+changes' if changed else '')
  return found
