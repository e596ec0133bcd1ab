"""TPU readiness of a port on JAX: will its step and its predict compile for
a TPU? Checked on the CPU, as keras_tf/tpu.py checks a Keras port's (the
arrays adapter's tpu_ready).

The port hands over its compiled functions with arguments of the shapes it
trains on (``ArrayPort.programs``). Each is

1. lowered and compiled with ``jax.jit``, as it will run;
2. lowered for a TPU (``jax.export`` with ``platforms=('tpu',)``), which
   needs no TPU: an operation with no TPU lowering is refused here;
3. read, as StableHLO text, for what stalls or refuses a TPU: calls back
   into Python on the host (``jax.debug.print``, ``jax.pure_callback``,
   ``io_callback``, which a legacy ``host_call`` becomes by mistake), and
   shapes known only at run time.

The rule table (``CAUSES``, ``HOST_CALLBACKS``) is apart from the reading
(``program_problems``), as in keras_tf/tpu.py.
"""
from __future__ import annotations

import re
from typing import Callable

from kit_core.errors import Interrupted
from kit_core.errors import one_line
from migration_tools.pair.frameworks import tpu
from migration_tools.pair.frameworks.tpu import Cause
from migration_tools.pair.frameworks.tpu import Problem

CAUSES = {
    'host_callback': Cause(
        'calls back into Python on the host',
        'a TPU waits for the host at every such call: return the values from '
        'the step and log them after it (what a host_call did), or drop the '
        'call (jax.debug.print, jax.pure_callback, io_callback)'),
    'dynamic_shape': Cause(
        'has a shape known only at run time',
        'a TPU compiles one shape: pad to a fixed size, and mask instead of '
        'dropping (jnp.where(mask, x, 0); jnp.nonzero with size=...)'),
    'tpu_lowering': Cause(
        'has no TPU lowering',
        'replace that operation with one JAX lowers for TPUs: '
        'jax.export.export(jax.jit(f), platforms=("tpu",)) shows the same '
        'error on a CPU'),
    'xla': Cause(
        'is refused by jax.jit',
        'make it traceable with static shapes (jax.jit(f).lower(...)'
        '.compile() shows the same error)'),
}
# The custom-call targets JAX's host callbacks lower to.
HOST_CALLBACKS = re.compile(
    r'custom_call @?"?(xla_(?:ffi_)?(?:partitioned_)?python_[a-z]+_callback)')
DYNAMIC = re.compile(r'tensor<[^>]*\?')


def program_problems(part: str, function: Callable, args: tuple
                     ) -> list[Problem]:
  """What a TPU refuses in one program (see module)."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax import export as jax_export  # pylint: disable=g-import-not-at-top
  jitted = jax.jit(function)
  try:
    lowered = jitted.lower(*args)
    lowered.compile()
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    return [Problem(part, 'xla', 'jax.jit', part, one_line(e))]
  text = lowered.as_text()
  problems = [Problem(part, 'host_callback', target, part)
              for target in dict.fromkeys(HOST_CALLBACKS.findall(text))]
  if DYNAMIC.search(text):
    problems.append(Problem(part, 'dynamic_shape', 'tensor<?>', part))
  try:
    jax_export.export(jitted, platforms=('tpu',))(*args)
  except Interrupted:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # A host callback has no TPU lowering either: said once, above.
    if not problems:
      problems.append(Problem(part, 'tpu_lowering', 'jax.export', part,
                              one_line(e)))
  return problems


def check(programs: dict[str, tuple[Callable, tuple]]) -> tpu.Readiness:
  """The TPU readiness of a port on JAX: {part: (function, arguments)}."""
  return tpu.read_programs(
      programs, program_problems, CAUSES, 'compile with jax.jit and lower for '
      'a TPU, with no host callback and static shapes')
