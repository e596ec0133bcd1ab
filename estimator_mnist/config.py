"""What a run of estimator_mnist takes: the common options and its own
(TPUConfig's and RunConfig's), as one frozen dataclass (main.py builds it
from the flags)."""
import dataclasses

from mnist_common import config


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(config.CommonConfig):
  """The flags of estimator_mnist/main.py, by name; their help says more."""
  iterations: int = 50
  save_checkpoints_steps: int | None = None
  num_shards: int = 8
  export_to_tpu: bool = False

  @property
  def shards(self) -> int:
    """The cores the global batch is split over: num_shards on a TPU, one
    off it."""
    return self.num_shards if self.use_tpu else 1
