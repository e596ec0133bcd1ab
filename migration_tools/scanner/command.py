"""Finds what legacy TPUEstimator-era code still has to change for TF 2.

  migration-scan PATH... [--format=text|json|sarif] [--output=FILE]
  python -m migration_tools.scanner PATH...

Parses each Python file (the code is never imported or run) and reports
every legacy construct with file, line, severity, what it is, what it
becomes, and the section of docs/MIGRATION.md to read; the text report ends
with a plan by severity and guide section. Directories are walked.

Severities: ``silent`` (runs on TF 2 but computes something else) and
``breaks`` (fails on TF 2) are errors, ``compat`` (runs through
tf.compat.v1 until that goes) is a warning, ``style`` a note.

A file with a line ``# migration-scan: skip-file`` is skipped and listed as
such (for code that touches the legacy API on purpose, as the kit's own
comparison tools do); a line ending in ``# migration-scan: ignore`` is not
reported. The scanner imports the standard library and absl only, so it
runs where TensorFlow is not installed.

A folder that cannot be listed and a special file named ``*.py`` (a FIFO,
a socket, a device: never opened, as a FIFO would block the scan) are listed
as unchecked; so is a file past the scanner's size limits (4 MiB of Python
in a .py file or a notebook's code cells, 64 MiB of notebook), unread, so
that its memory stays bounded (a syntax tree takes about 200 times its
source). A long scan prints a line on stderr at least every 30 s.
--output may not be a scanned file or a file inside a scanned folder, nor a
symbolic link.

Exit code: 0 nothing to change (style notes at most); 1 findings, or files
or folders that could not be read, parsed or analysed (they are unchecked,
not clean); 2 bad input.
"""
import os
import sys

from absl import flags

from kit_core import atomic
from kit_core import exits
from kit_core import paths as kit_paths
from kit_core import progress as progress_lib
from kit_core.errors import KitError
from kit_core.errors import printable
from migration_tools import cli
from migration_tools.scanner import engine
from migration_tools.scanner import report
from migration_tools.scanner import rewrite
from migration_tools.scanner import rules

# The library entry points, importable from the command's module too.
scan, scan_source = engine.scan, engine.scan_source


def define_flags(tool_flags: flags.FlagValues) -> None:
  """The command's flags, on the tool's own FlagValues (see cli)."""
  flags.DEFINE_enum('format', 'text', sorted(report.FORMATS),
                    'text: grouped by file, with a plan; json; sarif: SARIF '
                    '2.1.0 for code-review tools.', flag_values=tool_flags)
  flags.DEFINE_string('output', None, 'Write the report to this file '
                      '(written whole, or not at all) instead of stdout.',
                      flag_values=tool_flags)
  flags.DEFINE_string('diff', None, 'Also write a unified diff of the '
                      'rewrites that are safe by construction (tf.gfile, '
                      'tf.to_*, renamed symbols, contrib to its TF 2.15 '
                      'home, the rest of TF 1 through tf.compat.v1, '
                      'tf.flags and tf.logging included, Dimension.value) '
                      'to this file; no file is edited. Apply it from this '
                      'folder with git apply FILE or patch -p1 < FILE.',
                      flag_values=tool_flags)


def _write(text: str, output: str | None) -> None:
  if output is None:
    print(text)
    return
  try:
    atomic.write_text(output, text + '\n')
  except OSError as e:
    raise KitError(f'cannot write --output={output}: {e.strerror}') from e


def _write_diff(result, paths: list[str], diff: str,
                progress: progress_lib.Progress) -> None:
  """The safe rewrites of every Python file scanned (not the unchecked
  ones, nor those skipped by pragma), as one patch."""
  left_out = {u.path for u in result.unchecked} | set(result.skipped)
  scanned = engine.python_files(paths)[0]
  notebooks = [f for f in scanned if f.endswith(engine.NOTEBOOK)]
  files = [f for f in scanned
           if not f.endswith(engine.NOTEBOOK) and f not in left_out]
  patch, changed = b'', 0
  for path in files:
    progress.now(f'--diff: rewriting {printable(path)}')
    try:
      part = rewrite.file_diff(path)
    except (OSError, SyntaxError, ValueError, UnicodeError):
      continue  # Listed as unchecked in the report already.
    patch += part
    changed += bool(part)
  if not patch and os.path.exists(diff):
    # An earlier run's patch would be applied as this run's: emptied, which
    # git apply refuses ("No valid patches in input").
    _write_patch(diff, b'')
    print(f'--diff: no safe rewrite in {len(files)} file(s); {diff} emptied '
          '(it held an earlier patch; git apply refuses an empty one)',
          file=sys.stderr)
  elif not patch:
    # An empty patch is one git apply refuses: none is written.
    print(f'--diff: no safe rewrite in {len(files)} file(s); {diff} not '
          'written', file=sys.stderr)
  else:
    _write_patch(diff, patch)
    print(f'wrote {diff}: safe rewrites in {changed} of {len(files)} '
          'file(s); apply with git apply or patch -p1', file=sys.stderr)
  if notebooks:
    # A patch of a notebook's JSON would not apply to what Jupyter saves.
    print(f'{len(notebooks)} notebook(s) not rewritten: --diff rewrites .py '
          'files only; their findings are in the report', file=sys.stderr)


def _write_patch(diff: str, patch: bytes) -> None:
  try:
    atomic.write_bytes(diff, patch)
  except OSError as e:
    raise KitError(f'cannot write --diff={diff}: {e.strerror}') from e


def main(tool_flags: flags.FlagValues, paths: list[str]) -> None:
  """Scans paths, writes the report; exits 1 when something must change."""
  exits.output_flags('--output (or --diff)')
  if not paths:
    raise KitError('give one or more files or directories to scan, e.g. '
                   'migration-scan my_model/')
  output, diff = tool_flags.output, tool_flags.diff
  scanned = [('the scanned path', p) for p in paths]
  if output is not None:
    output = kit_paths.check_output(output, '--output', scanned)
  if diff is not None:
    diff = kit_paths.check_output(
        diff, '--diff', scanned,
        [('--output', output)] if output is not None else [])
  # A line on stderr at least every 30 s of a long scan or patch.
  progress = progress_lib.Progress(
      lambda text: print(text, file=sys.stderr, flush=True))
  with progress.heartbeat():
    _scan_and_write(tool_flags, paths, output, diff, progress)


def _scan_and_write(tool_flags: flags.FlagValues, paths: list[str],
                    output: str | None, diff: str | None,
                    progress: progress_lib.Progress) -> None:
  try:
    result = scan(paths, on_file=lambda path: progress.now(
        f'scanning {printable(path)}'))
  except ValueError as e:
    raise KitError(str(e)) from e
  named = [u for u in result.not_scanned if u.path in result.empty]
  if named:
    raise KitError(f'nothing to scan: {named[0].path} is '
                   f'{named[0].reason.removeprefix("not scanned: ")}')
  if result.empty:
    listed = [u.path for u in result.not_scanned
              if any(engine.under(u.path, p) for p in result.empty)]
    raise KitError(
        f'nothing to scan in {", ".join(result.empty)}: no .py file or '
        'notebook' + (f' ({len(listed)} other file(s) mention TensorFlow, '
                      'which the scanner does not read)' if listed else '') +
        '; give the folder of your Python code')
  progress.now('writing the report')
  _write(report.FORMATS[tool_flags.format](result), output)
  if diff is not None:
    _write_diff(result, paths, diff, progress)
  if output:
    print(report.summary_line(result), file=sys.stderr)
  # A file that could not be read or parsed is unchecked, not clean; style
  # notes alone ask for nothing.
  must_change = [f for f in result.findings if f.severity != rules.STYLE]
  sys.exit(1 if must_change or result.unchecked else 0)


def run() -> None:
  """Console-script entry point (``migration-scan``)."""
  cli.run(main, define_flags, __doc__, bad_input_exit=2)
