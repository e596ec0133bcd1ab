"""TensorFlow, imported where it is first used rather than where it is
named, so that the modules a JAX port's comparison runs through load on the
jax profile, which has no TensorFlow.

``from kit_core.lazy import tensorflow as tf`` stands for ``import
tensorflow as tf`` in such a module: the first ``tf.<name>`` imports it. On
a profile without it, that first use raises a KitError that says which
profile has it, instead of an ImportError deep inside a check. The module
must not use tf at import time (decorators, base classes, default values);
``from __future__ import annotations`` keeps its annotations unevaluated.
"""
import importlib
import importlib.util

from kit_core.errors import KitError


def installed(name: str) -> bool:
  return importlib.util.find_spec(name) is not None


class LazyModule:
  """A module imported on its first attribute."""

  def __init__(self, name: str, missing: str):
    self._name, self._missing = name, missing

  def __getattr__(self, attribute: str):
    try:
      module = importlib.import_module(self._name)
    except ModuleNotFoundError as e:
      if e.name != self._name:
        raise
      raise KitError(self._missing) from e
    return getattr(module, attribute)


tensorflow = LazyModule(
    'tensorflow', 'this needs TensorFlow, which this profile does not install '
    '(the jax profile runs JAX ports from golden bundles); use the estimator '
    'or newest profile (README, "Set-up")')
