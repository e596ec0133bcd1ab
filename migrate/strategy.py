"""Choosing the tf.distribute strategy: the TF2 form of RunConfig + TPUConfig.

``--strategy`` names it: ``tpu`` (TPUStrategy), ``mirrored`` (all local GPUs or
logical CPUs), ``multi_worker`` (MultiWorkerMirroredStrategy from TF_CONFIG),
``one_device``, or ``auto``: a TPU when one is there, else the local devices.
"""
import json
import os

import tensorflow as tf

from kit_core import exits
from kit_core.errors import KitError
from migrate import rendezvous
from mnist_common import tpu as tpu_lib

STRATEGIES = ('auto', 'tpu', 'mirrored', 'multi_worker', 'one_device')


def _tpu_is_plausible(tpu: str | None) -> bool:
  # 'auto' must not send a plain CPU machine off to a metadata server.
  return bool(tpu or os.environ.get('TPU_NAME') or tpu_lib.has_local_tpu())


def _local_devices() -> list[str]:
  devices = (tf.config.list_logical_devices('GPU') or
             tf.config.list_logical_devices('CPU'))
  return [d.name for d in devices]


def _tpu_strategy(tpu: str | None, zone: str | None, project: str | None):
  resolver = tpu_lib.find_tpu(tpu, zone, project)
  tf.config.experimental_connect_to_cluster(resolver)
  tf.tpu.experimental.initialize_tpu_system(resolver)
  return tf.distribute.TPUStrategy(resolver)


# The jobs MultiWorkerMirroredStrategy trains with, in the order of their
# ranks: a chief (optional) and its workers.
TRAINING_JOBS = ('chief', 'worker')


def check_tf_config() -> dict:
  """Parses TF_CONFIG and checks it describes a worker cluster this task
  trains in (chief and worker jobs; TPUEstimator-era 'ps' and 'evaluator'
  jobs are named and refused, as this trainer has no place for them).

  Raises:
    KitError: TF_CONFIG missing or malformed, in one line that says which
      part and what is expected.
  """
  raw = os.environ.get('TF_CONFIG')
  if not raw:
    raise KitError('--strategy=multi_worker needs TF_CONFIG, e.g. '
                   '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
                   '"task": {"type": "worker", "index": 0}}')
  try:
    config = json.loads(raw)
    config['cluster']['worker']  # Required, even beside a chief.
    task_type, index = config['task']['type'], config['task']['index']
  except (ValueError, KeyError, TypeError) as e:
    raise KitError(f'malformed TF_CONFIG ({type(e).__name__}: {e}); it needs '
                   'cluster.worker (a list of host:port) and task.type/'
                   'task.index') from e
  for job, members in config['cluster'].items():
    if not isinstance(members, list) or not members or not all(
        isinstance(m, str) and ':' in m for m in members):
      raise KitError(f'malformed TF_CONFIG: cluster.{job} must be a non-empty '
                     f'list of "host:port", got {members!r}')
  others = sorted(set(config['cluster']) - set(TRAINING_JOBS))
  if others or task_type not in TRAINING_JOBS:
    raise KitError(f'TF_CONFIG names the job {(others or [task_type])[0]!r}: '
                   'MultiWorkerMirroredStrategy trains on a chief and '
                   'workers only (a "ps" job is ParameterServerStrategy\'s, an '
                   '"evaluator" a side-car this trainer does not run: it '
                   'evaluates on the chief after training); list the machines '
                   'as chief and worker')
  if not isinstance(index, int) or isinstance(index, bool):
    raise KitError(f'malformed TF_CONFIG: task.index must be a whole number, '
                   f'got {index!r} ({type(index).__name__}); write "index": '
                   f'{index if str(index).isdigit() else 0}')
  members = config['cluster'].get(task_type)
  if not isinstance(members, list) or not 0 <= index < len(members):
    raise KitError(f'malformed TF_CONFIG: task {task_type}:{index} is not in '
                   f'the cluster {config["cluster"]}')
  return config


def cluster_members(config: dict) -> tuple[list[tuple[str, str]], int]:
  """Every training task of TF_CONFIG as (name, 'host:port'), chief first,
  and this task's place among them."""
  cluster, task = config['cluster'], config['task']
  members, rank = [], None
  for job in TRAINING_JOBS:
    for i, address in enumerate(cluster.get(job, [])):
      if (job, i) == (task['type'], task['index']):
        rank = len(members)
      members.append((f'{job} {i}', address))
  return members, rank


def make_strategy(name: str, tpu: str | None = None, zone: str | None = None,
                  project: str | None = None,
                  worker_wait_seconds: float = 300) -> tf.distribute.Strategy:
  """Returns the strategy --strategy names (see the module docstring).

  With multi_worker, first waits up to worker_wait_seconds for the other
  tasks, chief and workers (migrate/rendezvous.py says why).
  """
  if name not in STRATEGIES:
    raise KitError(f'unknown --strategy={name}; use one of {STRATEGIES}')
  if name == 'auto':
    if _tpu_is_plausible(tpu):
      name = 'tpu'
    else:
      name = 'mirrored' if len(_local_devices()) > 1 else 'one_device'
  if name == 'tpu':
    return _tpu_strategy(tpu, zone, project)
  if name == 'multi_worker':
    members, rank = cluster_members(check_tf_config())
    with exits.interruptible('the wait for the other tasks of TF_CONFIG was '
                             'stopped; nothing was trained'):
      rendezvous.wait_for_workers(members, rank, worker_wait_seconds)
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == 'mirrored':
    return tf.distribute.MirroredStrategy(_local_devices())
  return tf.distribute.OneDeviceStrategy(_local_devices()[0])


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """Whether this task writes the shared outputs (checkpoints, export, logs)."""
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not resolver.task_type:
    return True
  return (resolver.task_type == 'chief' or
          (resolver.task_type == 'worker' and resolver.task_id == 0 and
           'chief' not in resolver.cluster_spec().as_dict()))


def describe(strategy: tf.distribute.Strategy, global_batch: int,
             per_replica: int) -> str:
  """'MirroredStrategy with 2 replicas; global batch 1024 = 2 x 512 ...'."""
  replicas = strategy.num_replicas_in_sync
  name = type(strategy).__name__
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    name = 'MultiWorkerMirroredStrategy'  # Its class is named for its ops.
  return (f'{name} with {replicas} replica'
          f'{"s" if replicas > 1 else ""}; global batch {global_batch} = '
          f'{replicas} x {per_replica} per replica')
