"""The harness's figures: migration-compare on the kit's pair and on the three
test pairs of tests/user_code/, one table row per pair and check.

  python benchmarks/equivalence.py [--steps=100] [--batch_sizes=32,64,128]

Each pair's data is written by its legacy module (its team's data script)
into a temporary folder. Prints, per run, every check's status and headline
figure (its max difference); docs/EQUIVALENCE.md quotes them.
"""
import json
import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_CODE = os.path.join(REPO, 'tests', 'user_code')

flags.DEFINE_integer('steps', 100, 'Training steps compared.')
flags.DEFINE_list('batch_sizes', ['32', '64', '128'],
                  'Global batches for the kit pair.')
flags.DEFINE_integer('pair_batch', 32, 'Global batch for the test pairs.')
FLAGS = flags.FLAGS

# name: (legacy module, port module, serving, params, extra flags)
PAIRS = {
    'cnn': ('cnn_legacy', 'cnn_port', False, {}, ['--legacy_flags='
                                                  '--nouse_tpu --data_dir={d}']),
    'resnet': ('resnet_legacy', 'resnet_port', True,
               {'learning_rate': 0.1, 'momentum': 0.9}, []),
    'tabular': ('tabular_legacy', 'tabular_port', True,
                {'learning_rate': 0.01, 'decay_steps': 100},
                ['--variable_map={d}/map.json']),
}


def _env() -> dict:
  return {**os.environ, 'PYTHONPATH': os.pathsep.join([REPO, USER_CODE])}


def _run(label: str, args: list[str], report: str) -> None:
  result = subprocess.run([sys.executable, '-m', 'migration_tools.compare',
                           f'--report={report}', *args], capture_output=True,
                          text=True, env=_env(), check=False)
  if not os.path.exists(report):
    print(f'{label}: no report ({result.stderr.strip().splitlines()[-1]})')
    return
  checks = json.load(open(report, encoding='utf-8'))['checks']
  print(f'\n{label}: exit {result.returncode}')
  for check in checks:
    figure = check['max_abs_diff']
    shown = '' if figure is None else f'{figure:.3g}'
    print(f'  {check["status"]:7s} {check["name"]:28s} {shown}')


def _pair_args(name: str, directory: str) -> list[str]:
  legacy, port, serving, params, extra = PAIRS[name]
  if params:
    params = {**params, 'data_dir': directory}
  return [f'--legacy_model_fn={legacy}:model_fn',
          f'--legacy_input_fn={legacy}:input_fn',
          f'--legacy_serving_input_fn='
          f'{legacy + ":serving_input_receiver_fn" if serving else ""}',
          f'--port={port}:make_port', f'--params={json.dumps(params)}',
          *[e.format(d=directory) for e in extra]]


def main(argv: list[str]) -> None:
  del argv
  work = tempfile.mkdtemp(prefix='equivalence_')
  for batch in FLAGS.batch_sizes:
    _run(f'kit pair, batch {batch}', [f'--steps={FLAGS.steps}',
                                      f'--batch_size={batch}'],
         os.path.join(work, f'kit_{batch}.json'))
  for name, (legacy, port, *_) in PAIRS.items():
    directory = os.path.join(work, name)
    subprocess.run([sys.executable, '-c',
                    f'import json, {legacy}, {port}; '
                    f'{legacy}.write_data({directory!r}); '
                    f'json.dump(getattr({port}, "VARIABLE_MAP", {{}}), '
                    f'open({os.path.join(directory, "map.json")!r}, "w"))'],
                   check=True, env=_env(), capture_output=True)
    _run(f'{name} pair, batch {FLAGS.pair_batch}',
         [*_pair_args(name, directory), f'--steps={FLAGS.steps}',
          f'--batch_size={FLAGS.pair_batch}'],
         os.path.join(work, f'{name}.json'))
  print(f'\nReports: {work}')


if __name__ == '__main__':
  app.run(main)
