"""The scanner's reports: text (a migration plan), JSON and SARIF 2.1.0."""
import collections
import dataclasses
import json
import os
import pathlib
import urllib.parse

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
    lines.append(f'{f.place}: {f.severity}: {f.construct}: `{f.code}` -> '
                 f'{f.becomes} (see {f.section})')
  if result.findings:
    lines += [''] + _plan(result.findings)
  lines += [f'{u.path}: unchecked: {u.reason}' for u in result.unchecked]
  lines += [f'{u.path}: {u.reason}' for u in result.not_scanned]
  lines += [f'{path}: skipped: {engine.SKIP_FILE}' for path in result.skipped]
  lines.append(summary_line(result))
  return '\n'.join(lines)


def _plan(findings: list[engine.Finding]) -> list[str]:
  by_severity = collections.Counter(f.severity for f in findings)
  lines = ['Plan (most severe first; silent and breaks are errors, compat '
           'warnings, style notes):',
           '  ' + ', '.join(f'{by_severity[s]} {s}'
                            for s in rules_lib.SEVERITIES if by_severity[s])]
  sections = collections.defaultdict(collections.Counter)
  for f in findings:
    sections[f.section][f.severity] += 1
  order = sorted(sections, key=lambda s: (
      min(_rank(v) for v in sections[s]), -sum(sections[s].values()), s))
  width = max(len(s) for s in order)
  for section in order:
    counts = ', '.join(f'{sections[section][s]} {s}'
                       for s in rules_lib.SEVERITIES if sections[section][s])
    lines.append(f'  {section:<{width}}  {counts}')
  return lines


def format_json(result: engine.Result) -> str:
  return json.dumps({
      'findings': [dataclasses.asdict(f) for f in result.findings],
      'unchecked': [dataclasses.asdict(u) for u in result.unchecked],
      'not_scanned': [dataclasses.asdict(u) for u in result.not_scanned],
      'skipped': result.skipped, 'files': result.files,
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
      'properties': {'severity': f.severity, 'category': f.category},
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
