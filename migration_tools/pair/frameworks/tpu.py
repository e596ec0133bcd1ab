"""What every framework's TPU-readiness reading shares: a ``Problem`` (what a
TPU refuses, and where), a ``Cause`` (why, and the usual fix), their
description, and the ``Readiness`` an adapter answers with
(``Framework.tpu_ready``), which the harness's tpu_ready check reports.

Each framework reads its own programs for them, with its own rule table:
``keras_tf/tpu.py`` (XLA over tf.distribute), ``arrays/tpu.py`` (jax.jit and
jax.export), ``pytorch/`` (torch.export).
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Cause:
  """Why a TPU refuses something, and the usual fix."""
  what: str
  fix: str


@dataclasses.dataclass(frozen=True)
class Problem:
  """Something of the port that a TPU refuses.

  part: 'the training step', 'predict' or 'the input pipeline'.
  cause: a key of the framework's table of causes.
  op: the op's type, or the input's path.
  name: the op's name (its name scope says the layer), or the input's shape.
  detail: the compiler's own line, when it refused it.
  """
  part: str
  cause: str
  op: str
  name: str
  detail: str = ''


# Readiness.status: the check's PASSED, FAILED or SKIPPED
# (compare/verdict.py).
READY, NOT_READY, NOT_CHECKED = 'passed', 'failed', 'skipped'


@dataclasses.dataclass(frozen=True)
class Readiness:
  """A framework's answer: status (READY, NOT_READY or NOT_CHECKED), a
  summary that says in one line what was compiled, or what a TPU refuses
  and the fix, and the figures for the report."""
  status: str
  summary: str
  figures: dict[str, Any] = dataclasses.field(default_factory=dict)


def describe(problems: list[Problem], causes: dict[str, Cause],
             shown: int = 3) -> str:
  """The problems grouped by where and why: each group's first ops, what is
  wrong and the fix (from causes), once."""
  groups = {}
  for problem in problems:
    groups.setdefault((problem.part, problem.cause), []).append(problem)
  texts = []
  for (part, cause), group in groups.items():
    ops = ', '.join(f'{p.op} ({p.name})' + (f': {p.detail}' if p.detail else '')
                    for p in group[:shown]) + (
        f' and {len(group) - shown} more' if len(group) > shown else '')
    texts.append(f'{part}: {ops} {causes[cause].what}; {causes[cause].fix}')
  return '; '.join(texts)


def judged(problems: list[Problem], causes: dict[str, Cause], ready: str,
           figures: dict[str, Any], note: str = '') -> Readiness:
  """READY with the ready text, or NOT_READY naming the problems; note
  (a remark that fails nothing) follows either."""
  problems = list(dict.fromkeys(problems))  # A program read twice: once.
  figures = {'problems': [dataclasses.asdict(p) for p in problems],
             **figures}
  tail = f'; {note}' if note else ''
  if not problems:
    return Readiness(READY, ready + tail, figures)
  return Readiness(NOT_READY, 'not ready for a TPU: ' +
                   describe(problems, causes) + tail, figures)


def read_programs(programs: dict, problems_of, causes: dict[str, Cause],
                  ready: str) -> Readiness:
  """Each of a port's programs, {part: (program, arguments)}, read by
  problems_of(part, program, arguments) -> [Problem]; READY says
  '<parts> <ready>'."""
  problems = []
  for part, (program, args) in programs.items():
    problems += problems_of(part, program, args)
  return judged(problems, causes, f'{" and ".join(programs)} {ready}',
                {'programs': list(programs)})
