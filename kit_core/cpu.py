"""What the CPU can do for the matmuls: its name and instruction-set flags.

oneDNN picks its kernels by these flags, so they decide how fast float32 and
bfloat16 math can go on a CPU: the vector width (AVX2, AVX-512), bfloat16 dot
products (AVX512_BF16) and Intel AMX tiles. Read from /proc/cpuinfo; None
where it cannot be read (not Linux).
"""
import platform

# The flags that decide the matmul ceilings, as /proc/cpuinfo spells them.
MATMUL_FLAGS = ('avx2', 'fma', 'avx512f', 'avx512_vnni', 'avx512_bf16',
                'avx_vnni', 'amx_tile', 'amx_bf16', 'amx_int8')
# Either gives the CPU bfloat16 arithmetic of its own.
BFLOAT16_FLAGS = ('avx512_bf16', 'amx_bf16')


def _cpuinfo(key: str) -> str | None:
  """The first value of key in /proc/cpuinfo."""
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        name, _, value = line.partition(':')
        if name.strip() == key:
          return value.strip()
  except OSError:
    pass
  return None


def name() -> str:
  return _cpuinfo('model name') or platform.processor() or 'unknown'


def matmul_flags() -> dict[str, bool | None]:
  """{flag: present} for MATMUL_FLAGS; None for each if unknown."""
  line = _cpuinfo('flags')
  present = set(line.split()) if line is not None else None
  return {flag: None if present is None else flag in present
          for flag in MATMUL_FLAGS}


def has_bfloat16_arithmetic() -> bool | None:
  """Whether the CPU computes in bfloat16 itself (None: unknown)."""
  flags = matmul_flags()
  if any(flags[f] is None for f in BFLOAT16_FLAGS):
    return None
  return any(flags[f] for f in BFLOAT16_FLAGS)


def has_amx_bfloat16() -> bool | None:
  """Whether the CPU has Intel AMX's bfloat16 tiles (None: unknown)."""
  return matmul_flags()['amx_bf16']
