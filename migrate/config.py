"""What a run of migrate takes: the common options and migrate's own, as
one frozen dataclass (main.py builds it from the flags)."""
import dataclasses

from mnist_common import config


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(config.CommonConfig):
  """The flags of migrate/main.py, by name; their help says more.

  strategy: 'tpu' when use_tpu is set (main.py resolves it).
  """
  strategy: str = 'auto'
  num_cpu_devices: int = 1
  steps_per_execution: int = 50
  loop: str = 'fit'
  precision: str = 'float32'
  worker_wait_seconds: int = 300
  checkpoint_steps: int = 100
  jit_compile: bool = False
