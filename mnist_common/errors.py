"""The one error type the kit shows to users as a single line."""


class KitError(Exception):
  """A problem with the user's input or environment.

  Its message is one line that says what is wrong and what to do about it; the
  command-line entry points print it as ``error: <message>`` and exit non-zero.
  """


class DataError(KitError):
  """Missing, malformed or inconsistent data files."""


class TPUNotFoundError(KitError):
  """A TPU was asked for and none could be reached."""
