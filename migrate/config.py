"""What a run of migrate takes: the common options and migrate's own, as
one frozen dataclass (main.py builds it from the flags)."""
import dataclasses

from mnist_common import config


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(config.CommonConfig):
  """The flags of migrate/main.py, by name; their help says more.

  strategy: 'tpu' when use_tpu is set (main.py resolves it).
  """
  strategy: str
  num_cpu_devices: int
  steps_per_execution: int
  loop: str
  precision: str
  worker_wait_seconds: int
  checkpoint_steps: int
  jit_compile: bool
