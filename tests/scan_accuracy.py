"""Recall and precision of migration-scan on the legacy corpus, by category.

  python tests/scan_accuracy.py [CORPUS_DIR]

The corpus (tests/legacy_sources/) holds legacy code of several eras and
styles. A comment ``# expect: rule-id, ...`` on a line lists what the scanner
must report there; a line without one must have no finding; ``#
expect-unchecked`` marks a file Python 3 cannot parse. Prints a table of
true positives, misses and false alarms per category, then each miss and
false alarm, so a rule's gaps show up by name.
"""
import collections
import dataclasses
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from migration_tools.scanner import engine  # pylint: disable=g-import-not-at-top
from migration_tools.scanner import rules  # pylint: disable=g-import-not-at-top

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'legacy_sources')
_EXPECT = re.compile(r'#\s*expect:\s*([\w\-, ]+)$')
CATEGORY = {rule.id: rule.category for rule in rules.RULES + rules.GENERATED}


@dataclasses.dataclass
class Counts:
  found: int = 0  # Expected and reported.
  missed: int = 0  # Expected, not reported.
  false: int = 0  # Reported, not expected.

  @property
  def recall(self) -> float:
    return self.found / (self.found + self.missed) if self.found + self.missed else 1.0

  @property
  def precision(self) -> float:
    return self.found / (self.found + self.false) if self.found + self.false else 1.0


@dataclasses.dataclass
class Accuracy:
  by_category: dict[str, Counts]
  total: Counts
  misses: list[tuple[str, int, str]]  # (file, line, rule id)
  false_alarms: list[tuple[str, int, str]]
  unchecked_as_expected: bool
  files: int


def expected(source: str) -> set[tuple[int, str]]:
  """(line, rule id) pairs the corpus file's comments ask for."""
  pairs = set()
  for number, line in enumerate(source.splitlines(), 1):
    match = _EXPECT.search(line)
    if match:
      for rule_id in match.group(1).split(','):
        if rule_id.strip() not in CATEGORY:
          raise ValueError(f'line {number}: no rule {rule_id.strip()!r}')
        pairs.add((number, rule_id.strip()))
  return pairs


def measure(corpus: str = CORPUS) -> Accuracy:
  result = engine.scan([corpus])
  reported = collections.defaultdict(set)
  for f in result.findings:
    reported[f.path].add((f.line, f.rule))
  unchecked = {u.path for u in result.unchecked}
  by_category = collections.defaultdict(Counts)
  total, misses, false_alarms = Counts(), [], []
  should_be_unchecked = set()
  for path in engine.python_files([corpus])[0]:
    source = engine.read_source(path)
    if '# expect-unchecked' in source:
      should_be_unchecked.add(path)
      continue
    want, got = expected(source), reported[path]
    name = os.path.basename(path)
    for line, rule_id in sorted(want | got):
      counts = by_category[CATEGORY[rule_id]]
      if (line, rule_id) in want and (line, rule_id) in got:
        counts.found += 1
        total.found += 1
      elif (line, rule_id) in want:
        counts.missed += 1
        total.missed += 1
        misses.append((name, line, rule_id))
      else:
        counts.false += 1
        total.false += 1
        false_alarms.append((name, line, rule_id))
  return Accuracy(dict(by_category), total, misses, false_alarms,
                  unchecked == should_be_unchecked, result.files)


def format_table(accuracy: Accuracy) -> str:
  lines = [f'{"category":<18} {"expected":>8} {"found":>6} {"missed":>6} '
           f'{"false":>6} {"recall":>7} {"precision":>9}']
  rows = sorted(accuracy.by_category.items()) + [('all', accuracy.total)]
  for name, c in rows:
    lines.append(f'{name:<18} {c.found + c.missed:>8} {c.found:>6} '
                 f'{c.missed:>6} {c.false:>6} {c.recall:>7.1%} '
                 f'{c.precision:>9.1%}')
  lines += [f'missed: {f}:{line} {rule_id}'
            for f, line, rule_id in accuracy.misses]
  lines += [f'false alarm: {f}:{line} {rule_id}'
            for f, line, rule_id in accuracy.false_alarms]
  lines.append(f'{accuracy.files} files; unparsable files reported as '
               f'unchecked: {"yes" if accuracy.unchecked_as_expected else "NO"}')
  return '\n'.join(lines)


def main(argv: list[str]) -> int:
  corpus = argv[1] if len(argv) > 1 else CORPUS
  if not os.path.isdir(corpus):
    print(f'error: no such directory: {corpus}', file=sys.stderr)
    return 2
  print(format_table(measure(corpus)))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
