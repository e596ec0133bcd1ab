"""Writes tf_api.py: what TF 2 did to each symbol of tf.compat.v1.

  python -m migration_tools.scanner.generate_api \
      --tf215_python=.venv/bin/python --newest_python=.venv-newest/bin/python

The scanner's table of hand-written rules (rules.py) says what the legacy
constructs become; this generated table covers the rest of the TF 1 API, as
tf_upgrade_v2's generated renames do. Each interpreter runs in its own
process: TF 2.15.1 knows the whole tf.compat.v1 (and the TF 2 API beside it,
so that one object under two names is a rename); the newest TensorFlow says
which TF 2 names still exist. Every public symbol of tf.compat.v1 (Keras,
tf.estimator and raw_ops left out: rules.py covers the first two, and the
last is identical in both) gets one of:

  removed  not in TF 2's ``tf`` (AttributeError there); with its TF 2 name
           when the same object lives on under another one (tf.log ->
           tf.math.log);
  changed  in both, but TF 2's is another function; both signatures are
           kept, so the scanner can find keywords TF 2 no longer takes and
           positional arguments whose meaning moved (tf.nn.dropout);
  same     the same object in both: never a finding.

It also records whether the newest tf.compat.v1 still has the symbol: what
Keras 3 took out of it (tf.compat.v1.layers.dense) breaks even there.
"""
import inspect
import json
import os
import re
import subprocess
import sys
import types

from absl import app
from absl import flags

from kit_core import atomic

_SKIP = ('keras', 'estimator', 'compat', 'raw_ops', 'contrib')
_PACKAGES = ('tensorflow', 'tensorboard', 'keras', 'tf_keras')
_API_MODULES = ('._api.', 'keras.api', 'tensorboard.summary')
_MISSING = object()
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'tf_api.py')


def _walk(module, prefix, out, seen=None, depth=0):
  """Appends (path, object) for the public API under module; a module met
  again under another name is not walked twice."""
  seen = set() if seen is None else seen
  for name in sorted(dir(module)):
    if name.startswith('_') or (not prefix and name in _SKIP):
      continue
    try:
      obj = getattr(module, name)
    except Exception:  # pylint: disable=broad-except
      continue  # A lazily loaded module that fails to load is no API.
    path = prefix + name
    if isinstance(obj, types.ModuleType):
      # Below the top, only TF's generated API modules: tf.dtensor.python and
      # the like are internals reached by attribute, not API.
      if (not obj.__name__.startswith(_PACKAGES) or depth > 5 or
          (depth and not any(m in obj.__name__ for m in _API_MODULES))):
        continue
      out.append((path, obj))
      if id(obj) not in seen:
        seen.add(id(obj))
        _walk(obj, path + '.', out, seen, depth + 1)
    else:
      out.append((path, obj))


def _lookup(root, path):
  obj = root
  for part in path.split('.'):
    obj = getattr(obj, part)
  return obj


def _kind(obj) -> str:
  if isinstance(obj, types.ModuleType):
    return 'module'
  if inspect.isclass(obj):
    return 'class'
  # A callable instance (tf.flags.FLAGS) is an object, not a function.
  return 'function' if inspect.isroutine(obj) else 'object'


def _params(obj) -> dict | None:
  """obj's signature as data: its parameter names (positional ones first),
  how many may be passed positionally and how many must be, *args and
  **kwargs."""
  try:
    signature = inspect.signature(obj)
  except (TypeError, ValueError):
    return None
  parameters = list(signature.parameters.values())
  positional = [p for p in parameters
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  names = [p.name for p in positional]
  names += [p.name for p in parameters if p.kind == p.KEYWORD_ONLY]
  return {
      'names': names, 'positional': len(positional),
      'required': sum(p.default is p.empty for p in positional),
      'varargs': any(p.kind == p.VAR_POSITIONAL for p in parameters),
      'varkw': any(p.kind == p.VAR_KEYWORD for p in parameters)}


# TF 1 renamed a parameter by keeping both and calling
# deprecated_argument_lookup('new', new, 'old', old): the two are one
# argument. dropout's ('rate', rate, 'keep_prob', keep) passes 1 - keep_prob
# instead, so a pair counts only when each name passes its own variable.
_ALIAS = re.compile(r'deprecated_argument_lookup\(\s*[\'"](\w+)[\'"]\s*,\s*'
                    r'(\w+)\s*,\s*[\'"](\w+)[\'"]\s*,\s*(\w+)\s*\)')


def _aliases(obj) -> list[list[str]]:
  """The parameter pairs obj's source treats as one argument."""
  try:
    source = inspect.getsource(inspect.unwrap(obj))
  except (TypeError, OSError, ValueError):
    return []
  return [[new, old] for new, new_var, old, old_var in _ALIAS.findall(source)
          if new == new_var and old == old_var]


def dump_tf215() -> dict:
  """In TF 2.15: every tf.compat.v1 symbol, what TF 2's tf has under that
  name and, for a v1-only symbol, a TF 2 name of the same object."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  v1 = []
  _walk(tf.compat.v1, '', v1)
  v2 = []
  _walk(tf, '', v2)
  v2_name = {}
  for path, obj in v2:
    if _kind(obj) in ('class', 'function'):
      # The shortest name wins: tf.math.log over tf.compat.v2.math.log.
      if id(obj) not in v2_name or len(path) < len(v2_name[id(obj)]):
        v2_name[id(obj)] = path
  symbols = {}
  for path, obj in v1:
    entry = {'kind': _kind(obj)}
    try:
      in_v2 = _lookup(tf, path)
    except AttributeError:
      in_v2 = _MISSING  # Not None: tf.newaxis is None.
    if in_v2 is _MISSING:
      entry['status'] = 'removed'
      entry['v2'] = v2_name.get(id(obj), '')
    elif in_v2 is obj or entry['kind'] == 'module':
      entry['status'] = 'same'
    else:
      entry['status'] = 'changed'
      v1_params, v2_params = _params(obj), _params(in_v2)
      if v1_params and v2_params:
        entry['params'] = [v1_params, v2_params]
        entry['aliases'] = _aliases(obj)
    symbols[path] = entry
  return {'version': tf.__version__, 'symbols': symbols}


def dump_newest(request: dict) -> dict:
  """In the newest TF: which of request['paths'] its tf, and its
  tf.compat.v1, still have, and the signatures of request['signatures'] in
  its tf."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  present = {'tf': [], 'compat_v1': []}
  for root, key in ((tf, 'tf'), (tf.compat.v1, 'compat_v1')):
    for path in request['paths']:
      try:
        _lookup(root, path)
        present[key].append(path)
      except AttributeError:
        pass
  signatures = {}
  for path in request['signatures']:
    try:
      params = _params(_lookup(tf, path))
    except AttributeError:
      continue
    if params:
      signatures[path] = params
  return {'version': tf.__version__, 'present': present,
          'signatures': signatures}


def _run(python: str, mode: str, stdin: str = '') -> dict:
  result = subprocess.run(
      [python, '-m', 'migration_tools.scanner.generate_api', f'--mode={mode}'],
      input=stdin, capture_output=True, text=True, check=False,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'),
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(OUTPUT))))
  if result.returncode:
    sys.exit(f'error: {python} --mode={mode} failed: '
             f'{result.stderr.strip().splitlines()[-1:]}')
  return json.loads(result.stdout.strip().splitlines()[-1])


def _kept_in_compat_v1(symbols: dict, present: set) -> set:
  """The paths the newest tf.compat.v1 still has. A module counts as kept
  when most of its members are: Keras 3 left tf.compat.v1.layers standing
  but empty."""
  members = {}
  for path in symbols:
    parent = path.rpartition('.')[0]
    if parent:
      members.setdefault(parent, []).append(path in present)
  kept = set()
  for path, entry in symbols.items():
    if path not in present:
      continue
    inside = members.get(path)
    if entry['kind'] != 'module' or not inside or (
        sum(inside) >= len(inside) / 2):
      kept.add(path)
  return kept


def _signature(params: dict) -> tuple:
  return (tuple(params['names']), params['positional'], params['required'],
          params['varargs'], params['varkw'])


def moved_positions(v1: dict, v2: dict, aliases: list) -> list[tuple]:
  """(position, v1 name, v2 name) of each positional argument whose meaning
  differs: a name that moved (dropout's keep_prob -> rate), not one renamed
  in place (tf.device's device_name_or_function) nor one TF 1 already took
  under both names (conv1d's value and input)."""
  same = {frozenset(pair) for pair in aliases}
  v1_names, v2_names = v1['names'], v2['names']
  moved = []
  for i in range(min(v1['positional'], v2['positional'])):
    a, b = v1_names[i], v2_names[i]
    if a == b or frozenset((a, b)) in same:
      continue
    if a in v2_names or b in v1_names:
      moved.append((i, a, b))
  return moved


def _call_data(entry: dict, newest_params: dict | None) -> tuple:
  """(v1 signature, TF 2 signatures, moved positions) of a changed symbol,
  or () when its signatures agree. A signature is (names, how many
  positional, how many required, *args, **kwargs); TF 2's are 2.15's and,
  when it differs, the newest's."""
  v1, v2 = entry['params']
  v2s = [v2] + ([newest_params] if newest_params and newest_params != v2
                else [])
  if all(p['names'] == v1['names'] for p in v2s):
    return ()
  moved = sorted({m for p in v2s
                  for m in moved_positions(v1, p, entry['aliases'])})
  return (_signature(v1), tuple(_signature(p) for p in v2s), tuple(moved))


def combine(old: dict, newest: dict) -> str:
  """The text of tf_api.py."""
  present = set(newest['present']['tf'])
  in_compat_v1 = _kept_in_compat_v1(old['symbols'],
                                    set(newest['present']['compat_v1']))
  table = {}
  for path, entry in sorted(old['symbols'].items()):
    status = entry['status']
    if status != 'removed' and path not in present:
      status = 'removed'  # Dropped from tf after 2.15.
    target = entry.get('v2', '')
    if target and target not in present:
      target = ''
    parent = path.rpartition('.')[0]
    parent_removed = parent and table.get(parent, ('', ''))[1] == 'removed'
    if status == 'removed' and parent_removed and not target:
      continue  # The module's entry covers it.
    row = (entry['kind'], status, target, path in in_compat_v1)
    if status == 'changed' and 'params' in entry:
      # Another object under the same name (tf.losses.Reduction): its
      # signatures, for the checks of a call's arguments.
      row += _call_data(entry, newest['signatures'].get(path))
    table[path] = row
  lines = [
      '"""What TF 2 did to each symbol of tf.compat.v1 (generated: do not '
      'edit).',
      '',
      'Written by `python -m migration_tools.scanner.generate_api` from '
      f'TensorFlow {old["version"]}',
      f'(tf.compat.v1 and tf) and {newest["version"]} (tf). Each path maps '
      'to (kind, status,',
      'TF 2 name, kept in the newest tf.compat.v1[, v1 signature, TF 2 '
      'signatures,',
      'moved positions]); a signature is (names, positional, required, '
      '*args, **kwargs);',
      'see generate_api.py.',
      '"""',
      '',
      f'OLD_VERSION = {old["version"]!r}',
      f'NEWEST_VERSION = {newest["version"]!r}',
      'API = {']
  for path, row in table.items():
    lines.append(f'    {path!r}: {row!r},')
  lines.append('}')
  return '\n'.join(lines) + '\n'


def _define_flags() -> None:
  flags.DEFINE_enum('mode', 'generate', ['generate', 'tf215', 'newest'],
                    'generate: run both interpreters and write tf_api.py; '
                    'the others are its two halves.')
  flags.DEFINE_string('tf215_python', '.venv/bin/python',
                      'A Python with TensorFlow 2.15.1.')
  flags.DEFINE_string('newest_python', '.venv-newest/bin/python',
                      'A Python with the newest TensorFlow.')


def main(argv: list[str]) -> None:
  del argv
  mode = flags.FLAGS.mode
  if mode == 'tf215':
    print(json.dumps(dump_tf215()))
  elif mode == 'newest':
    print(json.dumps(dump_newest(json.load(sys.stdin))))
  else:
    old = _run(flags.FLAGS.tf215_python, 'tf215')
    print(f'TF {old["version"]}: {len(old["symbols"])} tf.compat.v1 symbols',
          file=sys.stderr)
    names = set(old['symbols']) | {e['v2'] for e in old['symbols'].values()
                                   if e.get('v2')}
    changed = [path for path, e in old['symbols'].items() if 'params' in e]
    newest = _run(flags.FLAGS.newest_python, 'newest', json.dumps(
        {'paths': sorted(names), 'signatures': sorted(changed)}))
    text = combine(old, newest)
    atomic.write_text(OUTPUT, text)
    print(f'wrote {OUTPUT} ({text.count(chr(10))} lines, TF '
          f'{old["version"]} and {newest["version"]})', file=sys.stderr)


if __name__ == '__main__':
  _define_flags()
  app.run(main)
