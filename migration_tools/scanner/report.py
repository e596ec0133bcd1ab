"""The scanner's reports: text (a migration plan), JSON and SARIF 2.1.0."""
import collections
import dataclasses
import json
import os
import pathlib
import urllib.parse

from kit_core.errors import printable
from migration_tools.scanner import engine
from migration_tools.scanner import rules as rules_lib

TOOL = 'migration-scan'
SARIF_SCHEMA = 'https://json.schemastore.org/sarif-2.1.0.json'
ALL_RULES = rules_lib.RULES + rules_lib.GENERATED


def _rank(severity: str) -> int:
  return rules_lib.SEVERITIES.index(severity)


def summary_line(result: engine.Result) -> str:
  not_scanned = (f', {len(result.not_scanned)} not scanned (not Python)'
                 if result.not_scanned else '')
  return (f'{len(result.findings)} legacy construct(s) in '
          f'{len({f.path for f in result.findings})} of {result.files} '
          f'file(s); {len(result.unchecked)} unchecked, '
          f'{len(result.skipped)} skipped by pragma{not_scanned}.')


def format_text(result: engine.Result) -> str:
  """Findings grouped by file, then the plan: counts by severity and by
  section of the guide, the most severe first."""
  lines, current = [], None
  for f in sorted(result.findings,
                  key=lambda f: (f.path, f.cell, f.line, f.column)):
    if f.path != current:
      if current is not None:
        lines.append('')
      current = f.path
      lines.append(_file_line(f.path, [g for g in result.findings
                                       if g.path == f.path]))
    lines.append(f'{f.place}: {f.severity}: {f.construct}: `{f.code}` -> '
                 f'{f.becomes} (see {f.section})')
  if result.findings or result.unchecked:
    lines += [''] + _plan(result)
  lines += [f'{u.path}: unchecked: {u.reason}' for u in result.unchecked]
  lines += [f'{u.path}: {u.reason}' for u in result.not_scanned]
  lines += [f'{path}: skipped: {engine.SKIP_FILE}' for path in result.skipped]
  lines.append(summary_line(result))
  return '\n'.join(printable(line) for line in lines)


STEPS = {1: 'Step 1, to run on TF 2.15 under tensorflow.compat.v1 '
            '(tf.contrib, Python 2, Dimension.value)',
         2: 'Step 2, to leave tf.compat.v1, by guide section'}


def _counts(counter: collections.Counter) -> str:
  return ', '.join(f'{counter[s]} {s}' for s in rules_lib.SEVERITIES
                   if counter[s])


def _sections(findings: list[engine.Finding]) -> list[str]:
  """One line per guide section, the most severe first."""
  sections = collections.defaultdict(collections.Counter)
  for f in findings:
    sections[f.section][f.severity] += 1
  order = sorted(sections, key=lambda s: (
      min(_rank(v) for v in sections[s]), -sum(sections[s].values()), s))
  width = max((len(s) for s in order), default=0)
  return [f'    {section:<{width}}  {_counts(sections[section])}'
          for section in order]


def plan(result: engine.Result) -> dict:
  """The plan as data: per step, its findings' counts by guide section, and
  the mechanical renames by kind."""
  steps = {}
  for step in STEPS:
    mine = [f for f in result.findings if f.step == step]
    design = [f for f in mine if not f.mechanical]
    steps[step] = {
        'title': STEPS[step], 'findings': len(mine),
        'sections': {s: dict(collections.Counter(
            f.severity for f in design if f.section == s))
                     for s in sorted({f.section for f in design})},
        'mechanical': dict(collections.Counter(
            f.mechanical for f in mine if f.mechanical))}
  python2 = [u.path for u in result.unchecked
             if u.reason.startswith(engine.NOT_PYTHON3)]
  steps[1]['not_python3'] = python2
  return steps


def _file_line(path: str, findings: list[engine.Finding]) -> str:
  """A file's findings by the plan's steps: 'path: 3 for step 1, 12 for
  step 2 (5 mechanical)'."""
  parts = []
  for step in STEPS:
    mine = [f for f in findings if f.step == step]
    mechanical = sum(bool(f.mechanical) for f in mine)
    if mine:
      parts.append(f'{len(mine)} for step {step}' + (
          f' ({mechanical} mechanical)' if mechanical else ''))
  return f'{path}: ' + ', '.join(parts)


def _plan(result: engine.Result) -> list[str]:
  """The plan in the order a team works: what stops the code on TF 2.15
  first, then the rest by guide section; mechanical renames one line per
  kind, so that the design work stands out."""
  lines = ['Plan (silent and breaks are errors; review and compat warnings; '
           'style notes):',
           '  ' + _counts(collections.Counter(f.severity
                                              for f in result.findings))]
  data = plan(result)
  for step, title in STEPS.items():
    mine = [f for f in result.findings if f.step == step]
    python2 = data[step].get('not_python3', [])
    if not mine and not python2:
      continue
    lines.append(f'  {title}: {len(mine)} finding(s)' + (
        f', {len(python2)} file(s) in Python 2 (port them to Python 3 '
        'first, e.g. with 2to3)' if python2 else ''))
    lines += _sections([f for f in mine if not f.mechanical])
    mechanical = data[step]['mechanical']
    if mechanical:
      lines.append('    mechanical renames (one line per kind; any rename '
                   'tool does them):')
      width = max(len(k) for k in mechanical)
      lines += [f'      {kind:<{width}}  {count}'
                for kind, count in sorted(mechanical.items(),
                                          key=lambda kv: (-kv[1], kv[0]))]
  return lines


def format_json(result: engine.Result) -> str:
  return json.dumps({
      'findings': [dataclasses.asdict(f) for f in result.findings],
      'unchecked': [dataclasses.asdict(u) for u in result.unchecked],
      'not_scanned': [dataclasses.asdict(u) for u in result.not_scanned],
      'skipped': result.skipped, 'files': result.files,
      'plan': plan(result),
      'by_severity': dict(collections.Counter(
          f.severity for f in result.findings))}, indent=1)


def _uri(path: str) -> tuple[str, bool]:
  """A path as a SARIF artifact URI: relative to the working directory
  (%SRCROOT%) when under it, else an absolute file URI."""
  # abspath, not resolve: a symlinked tree (Bazel's runfiles) stays as seen.
  absolute = pathlib.Path(os.path.abspath(path))
  try:
    relative = absolute.relative_to(os.getcwd())
    return urllib.parse.quote(relative.as_posix()), True
  except ValueError:
    return absolute.as_uri(), False


def _location(path: str, line: int = 0, column: int = 0,
              cell: int = 0) -> dict:
  """A SARIF location. In a notebook a line counts inside its cell, not
  in the .ipynb file: the cell is a logical location, the line and column
  are properties, and the file has no region."""
  uri, relative = _uri(path)
  artifact = {'uri': uri}
  if relative:
    artifact['uriBaseId'] = '%SRCROOT%'
  location = {'physicalLocation': {'artifactLocation': artifact}}
  if cell:
    location['logicalLocations'] = [{'name': f'cell {cell}',
                                     'kind': 'module'}]
    location['properties'] = {'cell': cell, 'line': line, 'column': column}
  elif line:
    location['physicalLocation']['region'] = {'startLine': line,
                                              'startColumn': column}
  return location


def _sarif_rule(rule: rules_lib.Rule) -> dict:
  return {
      'id': rule.id,
      'shortDescription': {'text': rule.description},
      'fullDescription': {'text': f'{rule.description}: '
                                  f'{rule.becomes}'},
      'help': {'text': f'See {engine.GUIDE}#{rule.section}'},
      'defaultConfiguration': {'level': rules_lib.SARIF_LEVEL[rule.severity]},
      'properties': {'category': rule.category, 'severity': rule.severity,
                     'step': rule.step, 'mechanical': rule.mechanical,
                     'tags': sorted({rule.category, rule.severity})},
  }


def format_sarif(result: engine.Result) -> str:
  """One SARIF 2.1.0 run: every rule, every finding as a result, unchecked
  files as error notifications (the run is then not successful)."""
  index = {rule.id: i for i, rule in enumerate(ALL_RULES)}
  results = [{
      'ruleId': f.rule, 'ruleIndex': index[f.rule],
      'level': rules_lib.SARIF_LEVEL[f.severity],
      'message': {'text': (f'cell {f.cell}, line {f.line}: ' if f.cell
                           else '') + f'{f.construct}: `{f.code}` -> '
                          f'{f.becomes} (see {f.section})'},
      'locations': [_location(f.path, f.line, f.column, f.cell)],
      'properties': {'severity': f.severity, 'category': f.category,
                     'step': f.step, 'mechanical': f.mechanical},
  } for f in result.findings]
  notifications = [{
      'level': 'error', 'message': {'text': f'unchecked: {u.reason}'},
      'locations': [_location(u.path)]} for u in result.unchecked] + [{
          'level': 'note', 'message': {'text': u.reason},
          'locations': [_location(u.path)]} for u in result.not_scanned]
  run = {
      'tool': {'driver': {'name': TOOL,
                          'rules': [_sarif_rule(r) for r in ALL_RULES]}},
      'originalUriBaseIds': {'%SRCROOT%': {
          'uri': pathlib.Path(os.getcwd()).as_uri() + '/'}},
      'invocations': [{'executionSuccessful': not result.unchecked,
                       'toolExecutionNotifications': notifications}],
      'results': results,
  }
  return json.dumps({'$schema': SARIF_SCHEMA, 'version': '2.1.0',
                     'runs': [run]}, indent=1)


FORMATS = {'text': format_text, 'json': format_json, 'sarif': format_sarif}
