"""The legacy side recorded and replayed: the answers of a live run on a
tape, and a run that answers from the tape on any TensorFlow.

Each answer is kept under a key that says what was asked of which run at
which of its steps ('1 replica|3|state|0': the state of the single-replica
run after 3 steps). The legacy side is deterministic and never reads the
port, so its answers do not depend on what the port does; a question the
recording never saw (other options, another version of the kit) is an error
that says so. compare/golden.py writes a tape into a bundle and reads it
back.
"""
from typing import Any, Iterable, Protocol

import numpy as np

from kit_core.errors import KitError
from migration_tools.pair import side


class Keeper(Protocol):
  """Where a RecordingRunner keeps answers: a Tape, or golden's Recording
  (which writes each to disk as it is kept)."""
  shards: dict[str, int]

  def keep(self, key: str, answer: Any) -> None:
    ...


class Answers(Protocol):
  """What a ReplayedRunner asks: a Tape, or a loaded bundle's tape (which
  reads each answer from disk as it is asked)."""
  shards: dict[str, int]

  def answer(self, key: str) -> Any:
    ...

  def __contains__(self, key: str) -> bool:
    ...


class Tape:
  """The legacy side's answers, by key (see the module docstring), and the
  replicas each recorded run took its steps as on (shards, by run).

  This one holds its answers as given; golden's tapes write each answer to
  disk as it is kept, or read each from disk as it is asked, so that a
  large model's recording is never held whole.
  """

  def __init__(self, answers: dict | None = None,
               shards: dict | None = None):
    self._answers = {} if answers is None else answers
    self.shards: dict[str, int] = {} if shards is None else shards

  def keep(self, key: str, answer: Any) -> None:
    self._answers[key] = answer

  def answer(self, key: str) -> Any:
    """The answer kept under key; KeyError if none was."""
    return self._answers[key]

  def __contains__(self, key: str) -> bool:
    return key in self._answers

  def keys(self) -> Iterable[str]:
    return self._answers.keys()

  def __len__(self) -> int:
    return len(self._answers)


class _Keys:
  """Counts the steps taken and the questions asked at each."""

  def __init__(self, purpose: str):
    self.purpose, self.steps, self._asked = purpose, 0, {}

  def next(self, method: str) -> str:
    base = f'{self.purpose}|{self.steps}|{method}'
    count = self._asked.get(base, 0)
    self._asked[base] = count + 1
    if method == 'step':
      self.steps += 1
    return f'{base}|{count}'


class _Taped(side.LegacySide):
  """A legacy side whose every question (side.QUESTIONS) goes through
  _answer; a question added to LegacySide stays abstract here, and no
  recording can be made, until it is written out below."""
  shards: int

  @property
  def replicas(self) -> int:
    return self.shards

  def _answer(self, question: str, *args) -> Any:
    raise NotImplementedError

  def state(self):
    return self._answer('state')

  def slots(self, rate):
    return self._answer('slots', rate)

  def schedule(self):
    return self._answer('schedule')

  def global_step(self):
    return self._answer('global_step')

  def averages(self):
    return self._answer('averages')

  def describe_optimizer(self):
    return self._answer('describe_optimizer')

  def describe_run(self):
    return self._answer('describe_run')

  def step(self, features, labels):
    return self._answer('step', features, labels)

  def predict(self, features):
    return self._answer('predict', features)

  def layer_outputs(self, features):
    return self._answer('layer_outputs', features)

  def evaluate(self, batches):
    return self._answer('evaluate', batches)

  def evaluate_weights(self, batches):
    return self._answer('evaluate_weights', batches)

  def serving_inputs(self, data, seed):
    return self._answer('serving_inputs', data, seed)

  def serve(self, base_dir, inputs):
    return self._answer('serve', base_dir, inputs)

  def receiver_spec(self):
    return self._answer('receiver_spec')

  def train_variables(self):
    return self._answer('train_variables')


class RecordingRunner(_Taped):
  """A legacy side whose answers are written to a tape as they are given."""

  def __init__(self, runner: side.LegacySide, tape: Keeper, purpose: str,
               gradients: bool = True):
    self._runner, self._tape, self._keys = runner, tape, _Keys(purpose)
    self._gradients = gradients
    self.shards = runner.replicas
    tape.shards[purpose] = runner.replicas

  def set_state(self, values) -> None:
    self._runner.set_state(values)

  def _answer(self, question: str, *args) -> Any:
    first_step = self._keys.steps == 0
    key = self._keys.next(question)
    answer = getattr(self._runner, question)(*args)
    kept = answer
    if question == 'step' and not first_step:
      # Only a run's first gradients are compared (one_step): the others
      # would double the bundle.
      kept = {k: v for k, v in answer.items() if k != 'gradients'}
    elif question == 'step' and not self._gradients:
      # Their names only (which variables the optimizer moves), as empty
      # arrays: a model-sized array less, and no value to misread.
      kept = {**answer, 'gradients': {
          name: np.zeros((0,), np.asarray(g).dtype)
          for name, g in answer.get('gradients', {}).items()}}
    self._tape.keep(key, kept)
    return answer


class NoAnswer(KitError):
  """A replayed legacy run was asked a question its tape has no answer to:
  asked out of the recorded order (an earlier error broke it), or recorded
  with other options."""


class NoRun(KitError):
  """A replayed legacy run the recording never made (other replica counts,
  or a check the recording's kit did not have)."""


class ReplayedRunner(_Taped):
  """Answers as the recorded legacy run did, without running it."""

  def __init__(self, tape: Answers, purpose: str):
    if purpose not in tape.shards:
      raise NoRun(f'the bundle holds no legacy run "{purpose}": record it '
                     'with the replica counts you check')
    self._tape, self._keys = tape, _Keys(purpose)
    self.shards = tape.shards[purpose]
    # The bundle format its recording asked in (golden.FORMAT's history);
    # None: this kit's.
    self.recorded_format = getattr(tape, 'recorded_format', None)

  def set_state(self, values) -> None:
    del values  # The recorded run started from the same state.

  def _answer(self, question: str, *args) -> Any:
    del args  # The harness asks the same questions in each run.
    key = self._keys.next(question)
    if key not in self._tape:
      raise NoAnswer(f'the bundle holds no answer to {key!r}: it was '
                     'recorded with other options or another version of '
                     'the kit; record it again')
    return self._tape.answer(key)
