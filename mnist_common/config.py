"""The options both halves take from the common flags (flags.py), as a
frozen dataclass each half's config extends.

Each half's ``main.py`` alone reads flags: it builds its config with
``from_flags`` and hands it to ``train.run(config)``. Tests and benchmarks
build one by hand.
"""
import dataclasses
from typing import TypeVar

from absl import flags

_Config = TypeVar('_Config', bound='CommonConfig')


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommonConfig:
  """What the flags of mnist_common/flags.py say; their help says more.

  No field has a default: the flags' defaults are the only ones.
  """
  use_tpu: bool
  tpu: str | None
  tpu_zone: str | None
  gcp_project: str | None
  data_dir: str | None
  data_source: str
  data_url: str
  model_dir: str | None
  batch_size: int
  train_steps: int
  eval_steps: int | None
  learning_rate: float
  enable_predict: bool
  num_predictions: int
  skip_resource_checks: bool
  seed: int

  @classmethod
  def from_flags(cls: type[_Config], flag_values: flags.FlagValues,
                 **overrides) -> _Config:
    """The config the parsed flags give, a field per flag of its name."""
    values = {field.name: flag_values[field.name].value
              for field in dataclasses.fields(cls)}
    return cls(**{**values, **overrides})
