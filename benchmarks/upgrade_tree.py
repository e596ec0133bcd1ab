r"""tf_upgrade_v2 over a whole tree, as `tf_upgrade_v2 --intree` runs it, but
on past a file it cannot rewrite.

  python benchmarks/upgrade_tree.py TREE OUTPUT_TREE

`--intree` stops the whole tree at the first file its parser (pasta) cannot
annotate, with a traceback and exit 1, and leaves the files after it
unwritten: on tensorflow/tpu, a slice spread over two lines. To time it on a
real tree, this runs its engine in one process, as `--intree` does (the
default mode: `TFAPIChangeSpec`, no import rename, `compat.v1` imports
upgraded), a Python file at a time, counts a file it stops on and goes on,
and copies the other files, as `--intree` does. Needs TensorFlow 2.15 (the
estimator profile), which has the engine.

Prints one line: the Python files, those rewritten, those it reported
errors in, and those it stopped on (the first named).
"""
import contextlib
import os
import shutil
import sys


def upgrade_tree(tree: str, output: str) -> tuple[int, int, list[str]]:
  """(Python files, files with errors reported, files it stopped on)."""
  # Imported here: TensorFlow is loaded as the tool loads it.
  from tensorflow.tools.compatibility import ast_edits  # pylint: disable=g-import-not-at-top
  from tensorflow.tools.compatibility import tf_upgrade_v2  # pylint: disable=g-import-not-at-top
  upgrader = ast_edits.ASTCodeUpgrader(tf_upgrade_v2.TFAPIChangeSpec(
      import_rename=False, upgrade_compat_v1_import=True))
  count, reported, stopped = 0, 0, []
  for folder, _, names in os.walk(tree):
    target = os.path.join(output, os.path.relpath(folder, tree))
    os.makedirs(target, exist_ok=True)
    for name in sorted(names):
      source, written = os.path.join(folder, name), os.path.join(target, name)
      if not name.endswith('.py'):
        shutil.copy(source, written)
        continue
      count += 1
      try:
        # Its findings, printed as it goes: in its report, not here.
        with contextlib.redirect_stdout(None):
          _, _, errors = upgrader.process_file(source, written)
      except Exception as e:  # pylint: disable=broad-except
        stopped.append(f'{os.path.relpath(source, tree)}: '
                       f'{type(e).__name__}')
        continue
      reported += bool(errors)
  return count, reported, stopped


def main(argv: list[str]) -> int:
  if len(argv) != 3 or not os.path.isdir(argv[1]):
    print('usage: upgrade_tree.py TREE OUTPUT_TREE (TREE: a folder)',
          file=sys.stderr)
    return 2
  if os.path.exists(argv[2]):
    print(f'{argv[2]} exists: give a new folder for the rewritten tree',
          file=sys.stderr)
    return 2
  count, reported, stopped = upgrade_tree(argv[1], argv[2])
  print(f'{count} Python files: {count - len(stopped)} rewritten, '
        f'{reported} with errors reported, {len(stopped)} it stopped on'
        + (f' (first: {stopped[0]})' if stopped else ''))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
