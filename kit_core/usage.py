"""A command's --help: its usage text, then each of its flags with its help
and default, whichever module defined them. (absl's own --help lists only
the flags of the module it takes for the main one, which for a console
script or ``python -m package`` is none of the command's.)"""
import sys
import textwrap
from typing import Iterable

from absl import flags

HELP = ('-h', '-help', '--help', '--helpshort', '--helpfull', '-?')


def asked(argv: list[str]) -> bool:
  """Whether argv asks for help."""
  return any(arg in HELP for arg in argv[1:])


def flags_help(flag_list: Iterable[flags.Flag]) -> str:
  """Each flag, once and sorted by name, with its help and default."""
  lines = []
  for flag in sorted({id(f): f for f in flag_list}.values(),
                     key=lambda f: f.name):
    default = '' if flag.default is None else (
        f" (default: {flag.default_as_str or repr(flag.default)})")
    lines += textwrap.wrap(f'--{flag.name}: {flag.help}{default}', 78,
                           initial_indent='  ', subsequent_indent='    ')
  return '\n'.join(lines)


def print_and_exit(usage: str, flag_list: Iterable[flags.Flag]) -> None:
  print(usage.strip() + '\n\nflags:\n' + flags_help(flag_list))
  sys.exit(0)
