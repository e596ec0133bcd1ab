"""Every runner answers every question its side's Protocol declares
(migration_tools/runners.py), and golden records and replays exactly those."""
import numpy as np
import pytest

from migration_tools import legacy
from migration_tools import runners
from migration_tools.compare import golden
from migration_tools.compare import port_runner

LEGACY_RUNNERS = (legacy.LegacyRunner, golden.RecordingRunner,
                  golden.ReplayedRunner)


@pytest.mark.parametrize('runner_class', LEGACY_RUNNERS,
                         ids=lambda c: c.__name__)
def test_each_legacy_runner_answers_every_question(runner_class):
  assert runners.missing(runner_class, runners.LegacySide) == []


def test_the_port_runner_answers_every_question():
  assert runners.missing(port_runner.PortRunner, runners.PortSide) == []


def test_missing_names_a_method_a_runner_leaves_to_the_protocol():

  class Side(runners.LegacySide):

    def state(self):
      return {}

  left = runners.missing(Side, runners.LegacySide)
  assert 'state' not in left
  assert {'step', 'set_state', 'serve'} <= set(left)


def test_a_question_added_to_the_protocol_fails_until_answered(monkeypatch):
  # What a new question does: every legacy runner but the recorded ones
  # (which make theirs from the Protocol) is named until it answers.
  def new_question(self) -> int:
    """A question no runner answers yet."""
  monkeypatch.setattr(runners.LegacySide, 'new_question', new_question,
                      raising=False)
  assert runners.missing(legacy.LegacyRunner,
                         runners.LegacySide) == ['new_question']


def test_golden_records_and_replays_the_protocol_questions():
  assert set(runners.QUESTIONS) == set(runners.members(
      runners.LegacySide)) - {'set_state'}

  class Fake:
    shards = 1

    def __getattr__(self, name):
      return lambda *args: {'asked': name, 'args': len(args)}

  tape = golden.Tape()
  recording = golden.RecordingRunner(Fake(), tape, '1 replica')
  answers = {q: getattr(recording, q)(np.zeros(1)) for q in runners.QUESTIONS}
  replayed = golden.ReplayedRunner(tape, '1 replica')
  assert {q: getattr(replayed, q)(None) for q in runners.QUESTIONS} == answers
