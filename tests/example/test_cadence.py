"""migrate's Cadence, which both loops hand each execution's end to, on a
fake manager: when it saves and logs, what it checks first, when it asks
SIGTERM."""
import pytest

from migrate import cadence
from mnist_common.errors import DivergedError


class FakeManager:
  """A FiniteCheckpointManager's surface: saves by number, weights finite
  unless told."""

  def __init__(self):
    self.saved, self.non_finite = [], []

  @property
  def latest_checkpoint(self):
    return f'/m/ckpt-{self.saved[-1]}' if self.saved else None

  def non_finite_weights(self):
    return self.non_finite

  def save(self, checkpoint_number):
    self.saved.append(checkpoint_number)


class FakeSigterm:

  def __init__(self, events):
    self.events = events

  def save_checkpoint_if_preempted(self):
    self.events.append('sigterm asked')


def _metrics(events):
  def read():
    events.append('metrics read')
    return {'loss': 0.5, 'accuracy': 0.9}
  return read


def test_saves_and_logs_when_an_execution_passes_a_boundary():
  manager, events = FakeManager(), []
  plan = cadence.Cadence(manager, checkpoint_steps=10, total_steps=25,
                         sigterm=FakeSigterm(events))
  for step in (5, 10, 15, 20, 25):
    plan.after_execution(step, 1.0, _metrics(events))
  # The boundaries 10 and 20, and the end.
  assert manager.saved == [10, 20, 25]
  assert events.count('metrics read') == 3
  assert events.count('sigterm asked') == 5
  # Saved and logged before SIGTERM is asked: its save then finds the step
  # already saved.
  assert events[:3] == ['sigterm asked', 'metrics read', 'sigterm asked']


def test_an_execution_that_jumps_a_boundary_still_saves_once():
  manager = FakeManager()
  plan = cadence.Cadence(manager, checkpoint_steps=10, total_steps=100,
                         start=8)
  plan.after_execution(14, 1.0, _metrics([]))
  plan.after_execution(18, 1.0, _metrics([]))
  assert manager.saved == [14]


def test_steps_to_boundary_stops_at_saves_and_at_the_end():
  plan = cadence.Cadence(FakeManager(), checkpoint_steps=10,
                         total_steps=23)
  assert [plan.steps_to_boundary(s) for s in (0, 4, 10, 19, 20)] == [
      10, 6, 10, 1, 3]


def test_divergence_stops_before_anything_is_saved():
  manager = FakeManager()
  plan = cadence.Cadence(manager, checkpoint_steps=10, total_steps=30)
  plan.after_execution(10, 1.0, _metrics([]))
  manager.non_finite = ['dense/kernel']
  with pytest.raises(DivergedError, match=r'dense/kernel\) by step 20: .*'
                     r'ckpt-10, is the last good one'):
    plan.after_execution(20, 1.0, _metrics([]))
  with pytest.raises(DivergedError, match='loss became nan'):
    cadence.Cadence(FakeManager(), 10, 30).after_execution(
        20, float('nan'), _metrics([]))
  assert manager.saved == [10]


def test_end_saves_unless_the_last_execution_did():
  manager = FakeManager()
  plan = cadence.Cadence(manager, checkpoint_steps=10, total_steps=20)
  plan.after_execution(20, 1.0, _metrics([]))
  plan.end(20)
  assert manager.saved == [20]
