"""Jupyter notebooks as the scanner reads them: the code cells, as one module.

A notebook's cells share one namespace (``import tensorflow as tf`` in the
first cell serves every later one), so its code cells are joined into one
module and scanned once; each finding's line is then mapped back to its cell
and the line inside it. IPython's own syntax (``%magic``, ``!shell``) is
blanked, keeping the line numbers; a cell Python cannot parse is left out and
listed, so that one bad cell does not cost the notebook.
"""
import ast
import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class Notebook:
  """The code cells of a notebook, joined.

  Attributes:
    source: the code cells that parse, one after another.
    starts: (first line in source, cell number) per cell joined, in order;
      cells are numbered from 1, counting every cell (markdown too), as
      they stand in the notebook.
    bad_cells: (cell number, why it does not parse).
  """
  source: str
  starts: tuple[tuple[int, int], ...]
  bad_cells: tuple[tuple[int, str], ...]

  def locate(self, line: int) -> tuple[int, int]:
    """A line of source -> (cell number, line inside that cell)."""
    first, cell = max((s for s in self.starts if s[0] <= line),
                      default=(1, 0))
    return cell, line - first + 1


# Cell magics whose body is still Python; any other (%%bash, %%writefile)
# makes the cell something else, left out.
_PYTHON_CELL_MAGICS = ('%%time', '%%timeit', '%%capture', '%%prun')


def _cell_text(cell: dict) -> str | None:
  """The cell's Python, IPython syntax blanked; None for a cell in another
  language."""
  text = cell.get('source', '')
  if isinstance(text, list):
    text = ''.join(text)
  if not isinstance(text, str):
    raise ValueError('a cell source that is not text')
  first = text.lstrip()
  if first.startswith('%%') and not first.startswith(_PYTHON_CELL_MAGICS):
    return None
  # IPython syntax is not Python: blank it, keeping the line count.
  return '\n'.join('' if line.lstrip().startswith(('%', '!')) else line
                   for line in text.splitlines())


def read(path: str) -> Notebook:
  """The notebook at path.

  Raises:
    OSError: it cannot be read.
    ValueError: it is not a notebook (JSON with a list of cells).
  """
  with open(path, encoding='utf-8') as f:
    document = json.load(f)
  cells = document.get('cells') if isinstance(document, dict) else None
  if not isinstance(cells, list):
    raise ValueError('not a Jupyter notebook: no list of cells')
  parts, starts, bad, line = [], [], [], 1
  for number, cell in enumerate(cells, 1):
    if not isinstance(cell, dict) or cell.get('cell_type') != 'code':
      continue
    text = _cell_text(cell)
    if text is None:
      continue
    try:
      ast.parse(text)
    except (SyntaxError, ValueError) as e:
      bad.append((number, f'line {getattr(e, "lineno", "?")}: '
                          f'{getattr(e, "msg", e)}'))
      continue
    # Joined by newlines, a cell holding n newlines takes n + 1 lines.
    starts.append((line, number))
    parts.append(text)
    line += text.count('\n') + 1
  return Notebook('\n'.join(parts) + '\n', tuple(starts), tuple(bad))
