"""The options both halves take from the common flags (flags.py), as a
frozen dataclass each half's config extends.

Each field's default is the one place the option's default is written: the
flags take theirs from it (``default``). Each half's ``main.py`` alone reads
flags: it builds its config with ``from_flags`` and hands it to
``train.run(config)``. Tests and benchmarks build one naming only what they
change: ``Config(model_dir=..., train_steps=20)``.
"""
import dataclasses
from typing import TypeVar

from absl import flags

from mnist_common import download

_Config = TypeVar('_Config', bound='CommonConfig')


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommonConfig:
  """What the flags of mnist_common/flags.py say; their help says more.
  None means the flag's unset meaning (its help says which)."""
  use_tpu: bool = False
  tpu: str | None = None
  tpu_zone: str | None = None
  gcp_project: str | None = None
  data_dir: str | None = None
  data_source: str = 'auto'
  data_url: str = download.DEFAULT_URL
  model_dir: str | None = None
  batch_size: int = 1024
  train_steps: int = 1000
  eval_steps: int | None = None
  learning_rate: float = 0.05
  enable_predict: bool = True
  num_predictions: int = 10
  skip_resource_checks: bool = False
  seed: int = 0

  @classmethod
  def default(cls, name: str):
    """The field's default: its flag's."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)

  @classmethod
  def from_flags(cls: type[_Config], flag_values: flags.FlagValues,
                 **overrides) -> _Config:
    """The config the parsed flags give, a field per flag of its name."""
    values = {field.name: flag_values[field.name].value
              for field in dataclasses.fields(cls)}
    return cls(**{**values, **overrides})
