"""Jupyter notebooks as the scanner reads them: the code cells, as one module.

A notebook's cells share one namespace (``import tensorflow as tf`` in the
first cell serves every later one), so its code cells are joined into one
module and scanned once; each finding's line is then mapped back to its cell
and the line inside it. A cell is read as IPython reads it (``python``): its
common leading indent removed, and each line of IPython's own syntax
(``%magic``, ``!shell``, ``x = !cmd``, ``x = %time f()``, ``obj?``, with
their backslash continuations) turned into Python that stands in its place,
keeping the line numbers: ``pass``, or ``x = None`` for an assignment, so a
magic alone in an ``if`` block leaves a block. A cell Python still cannot
parse is left out and listed, so that one bad cell does not cost the
notebook.
"""
import ast
import bisect
import dataclasses
import json
import re


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
    # starts is sorted by line: a notebook of 100,000 cells is a bisection.
    index = bisect.bisect_right(self.starts, (line, float('inf'))) - 1
    first, cell = self.starts[index] if index >= 0 else (1, 0)
    return cell, line - first + 1


# Cell magics whose body is still Python; any other (%%bash, %%writefile)
# makes the cell something else, left out.
_PYTHON_CELL_MAGICS = ('%%time', '%%timeit', '%%capture', '%%prun')


# IPython's line forms: an escape first (!shell, !!shell, %magic, ?help),
# an assignment of one (x = !ls, a, b = %sx ls), or help asked at the end
# (tf.nn.dropout?, obj??).
_ESCAPED = re.compile(r'[!%?]')
_ASSIGNED = re.compile(r'(?P<target>[\w.\[\]\'"(), *]+?)\s*=\s*[!%]')
_HELP_AFTER = re.compile(r'[\w.\[\]()\'"]+\?{1,2}')


def _python_for(line: str) -> str | None:
  """What stands for one logical line of IPython syntax (its indent
  kept), or None if it is Python."""
  body = line.lstrip()
  indent = line[:len(line) - len(body)]
  assigned = _ASSIGNED.match(body)
  if assigned and not body.startswith(('!', '%')):
    return f'{indent}{assigned.group("target").strip()} = None'
  if _ESCAPED.match(body) or _HELP_AFTER.fullmatch(body.rstrip()):
    return f'{indent}pass'
  return None


def _dedent(lines: list[str]) -> list[str]:
  """IPython's leading_indent: the first line's indent, removed from
  every line that starts with it."""
  first = next((line for line in lines if line.strip()), '')
  indent = first[:len(first) - len(first.lstrip())]
  if not indent:
    return lines
  return [line[len(indent):] if line.startswith(indent) else line
          for line in lines]


# String literals, roughly (one line), for counting brackets outside them.
_STRING = re.compile(r'''("[^"\\]*(\\.[^"\\]*)*"|'[^'\\]*(\\.[^'\\]*)*')''')


def _depth_change(line: str) -> int:
  """Brackets opened minus closed on line, strings and comments aside."""
  code = _STRING.sub('', line).split('#', 1)[0]
  return sum(code.count(c) for c in '([{') - sum(code.count(c) for c in ')]}')


def python_of(text: str) -> str:
  """A code cell's text as the Python IPython runs: a cell that is Python
  as it stands is kept; else IPython syntax at the start of a statement is
  replaced (_python_for), the line count kept."""
  lines = _dedent(text.splitlines())
  joined = '\n'.join(lines) + ('\n' if text.endswith('\n') else '')
  try:
    ast.parse(joined)
    return joined  # '% b' inside brackets is Python, not a magic.
  except (SyntaxError, ValueError):
    pass
  out, index, depth = [], 0, 0
  while index < len(lines):
    # A logical line: its backslash continuations with it.
    end = index
    while lines[end].endswith('\\') and end + 1 < len(lines):
      end += 1
    replaced = _python_for(lines[index]) if depth <= 0 else None
    if replaced is None:
      out += lines[index:end + 1]
      depth += sum(_depth_change(line) for line in lines[index:end + 1])
    else:
      out += [replaced] + [''] * (end - index)
    index = end + 1
  return '\n'.join(out) + ('\n' if text.endswith('\n') else '')


def _source(cell: dict) -> str:
  """The cell's text as the notebook holds it."""
  text = cell.get('source', '')
  if isinstance(text, list):
    text = ''.join(text)
  if not isinstance(text, str):
    raise ValueError('a cell source that is not text')
  return text


def _cell_text(text: str) -> str | None:
  """A cell's Python (python_of); None for a cell in another
  language."""
  first = text.lstrip()
  if first.startswith('%%') and not first.startswith(_PYTHON_CELL_MAGICS):
    return None
  if first.startswith('%%'):
    # A Python cell magic (%%time): its first line goes, its body stays.
    head, _, body = text.partition('\n')
    return '\n' + python_of(body) if head.strip() else python_of(text)
  return python_of(text)


def read(path: str, max_code: int | None = None) -> Notebook:
  """The notebook at path.

  Args:
    path: the .ipynb file.
    max_code: the most characters its code cells may hold together, or
      None.

  Raises:
    OSError: it cannot be read.
    ValueError: it is not a notebook (JSON with a list of cells), or its
      code is over max_code.
    RecursionError: its JSON is nested too deeply to read.
  """
  with open(path, encoding='utf-8') as f:
    document = json.load(f)
  cells = document.get('cells') if isinstance(document, dict) else None
  if not isinstance(cells, list):
    raise ValueError('not a Jupyter notebook: no list of cells')
  parts, starts, bad, line, size = [], [], [], 1, 0
  for number, cell in enumerate(cells, 1):
    if not isinstance(cell, dict) or cell.get('cell_type') != 'code':
      continue
    source = _source(cell)
    # Counted before any work on the cell: python_of parses it whole.
    size += len(source)
    if max_code is not None and size > max_code:
      raise ValueError(
          f'its code cells hold over {max_code // 2**20} MiB, the scanner\'s '
          'limit (their syntax tree would take about 200 times that in '
          'memory): read them yourself')
    text = _cell_text(source)
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
