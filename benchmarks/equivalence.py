"""The harness's figures: migration-compare on the kit's pair and on the four
test pairs of tests/user_code/, one table row per pair and check; and which
check each deliberate bug of the BERT-shaped port fails first, with its hint.

  python benchmarks/equivalence.py [--steps=100] [--batch_sizes=32,64,128]
  python benchmarks/equivalence.py --pairs=bert --batch_sizes= --bert_bugs
  python benchmarks/equivalence.py --steps=2 --batch_sizes=64 --speed

Each pair's data is written by its legacy module (its team's data script)
into a temporary folder. Prints, per run, every check's status and headline
figure (its max difference; with --speed, each speed check's ratio of the
port's examples/s to the legacy step's); docs/EQUIVALENCE.md quotes them.
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
flags.DEFINE_list('pairs', ['cnn', 'resnet', 'tabular', 'bert'],
                  'The test pairs to run.')
flags.DEFINE_bool('speed', False, 'Also time each port against its model_fn '
                  '(migration-compare --speed) on 1, 2 and 4 replicas.')
flags.DEFINE_bool('bert_bugs', False, 'Also run each deliberate bug of the '
                  'BERT-shaped port (3 steps, 1 replica): the check it fails '
                  'first and its message.')
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
    'bert': ('bert_legacy', 'bert_port', True,
             {'learning_rate': 1e-3, 'num_train_steps': 100,
              'num_warmup_steps': 2,
              'init_checkpoint': '{d}/pretrained/model.ckpt'}, []),
}
BERT_BUGS = ('no_weight_decay', 'decay_on_layer_norm_and_bias', 'no_clipping',
             'layer_norm_epsilon_1e_6', 'no_warmup', 'bias_corrected_adam')


def _env() -> dict:
  return {**os.environ, 'PYTHONPATH': os.pathsep.join([REPO, USER_CODE])}


def _run(label: str, args: list[str], report: str) -> None:
  speed = ['--speed'] if FLAGS.speed else []
  result = subprocess.run([sys.executable, '-m', 'migration_tools.compare',
                           f'--report={report}', *args, *speed],
                          capture_output=True, text=True, env=_env(),
                          check=False)
  if not os.path.exists(report):
    print(f'{label}: no report ({result.stderr.strip().splitlines()[-1]})')
    return
  checks = json.load(open(report, encoding='utf-8'))['checks']
  print(f'\n{label}: exit {result.returncode}')
  for check in checks:
    figure = check['max_abs_diff']
    shown = '' if figure is None else f'{figure:.3g}'
    if 'ratio' in check:
      shown = (f'{check["ratio"]:.2f}x: {check["port"]["examples_per_s"]:.0f} '
               f'against {check["legacy"]["examples_per_s"]:.0f} examples/s')
    print(f'  {check["status"]:7s} {check["name"]:28s} {shown}')


def _first_failure(label: str, args: list[str], report: str) -> None:
  subprocess.run([sys.executable, '-m', 'migration_tools.compare',
                  f'--report={report}', *args], capture_output=True,
                 text=True, env=_env(), check=False)
  checks = json.load(open(report, encoding='utf-8'))['checks']
  failed = [c for c in checks if c['status'] in ('failed', 'error')]
  shown = (f'{failed[0]["name"]}: {failed[0]["message"]}' if failed else
           'nothing failed')
  print(f'  {label}: {shown}')


def _pair_args(name: str, directory: str) -> list[str]:
  legacy, port, serving, params, extra = PAIRS[name]
  if params:
    params = {'data_dir': directory, **{
        k: v.format(d=directory) if isinstance(v, str) else v
        for k, v in params.items()}}
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
  for name in FLAGS.pairs:
    legacy, port, *_ = PAIRS[name]
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
  if FLAGS.bert_bugs:
    print('\nBERT-shaped port, each deliberate bug (3 steps, 1 replica):')
    for bug in BERT_BUGS:
      args = _pair_args('bert', os.path.join(work, 'bert'))
      args = [a.replace('bert_port:make_port', f'bert_port:{bug}')
              for a in args]
      _first_failure(bug, [*args, '--steps=3', '--replicas=1',
                           f'--batch_size={FLAGS.pair_batch}'],
                     os.path.join(work, f'bert_{bug}.json'))
  print(f'\nReports: {work}')


if __name__ == '__main__':
  app.run(main)
