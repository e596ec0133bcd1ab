"""What a run of migrate_jax takes: the common options and its own, as one
frozen dataclass (main.py builds it from the flags)."""
import dataclasses

from mnist_common import config


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(config.CommonConfig):
  """The flags of migrate_jax/main.py, by name; their help says more.

  num_cpu_devices: on a CPU, the devices XLA makes (replicas); every device
  JAX has trains (a TPU's cores, where there is one).
  """
  num_cpu_devices: int = 1
  steps_per_execution: int = 50
  precision: str = 'float32'
  checkpoint_steps: int = 100
  keep_checkpoints: int = 5
