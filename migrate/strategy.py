"""Choosing the tf.distribute strategy: the TF2 form of RunConfig + TPUConfig.

``--strategy`` names it: ``tpu`` (TPUStrategy), ``mirrored`` (all local GPUs or
logical CPUs), ``multi_worker`` (MultiWorkerMirroredStrategy from TF_CONFIG),
``one_device``, or ``auto``: a TPU when one is there, else the local devices.
"""
import json
import os

import tensorflow as tf

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


def check_tf_config() -> dict:
  """Parses TF_CONFIG and checks it describes a worker cluster this task is in."""
  raw = os.environ.get('TF_CONFIG')
  if not raw:
    raise KitError('--strategy=multi_worker needs TF_CONFIG, e.g. '
                   '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
                   '"task": {"type": "worker", "index": 0}}')
  try:
    config = json.loads(raw)
    workers = config['cluster']['worker']
    task_type, index = config['task']['type'], config['task']['index']
  except (ValueError, KeyError, TypeError) as e:
    raise KitError(f'malformed TF_CONFIG ({type(e).__name__}: {e}); it needs '
                   'cluster.worker (a list of host:port) and task.type/'
                   'task.index') from e
  if not isinstance(workers, list) or not workers or not all(
      isinstance(w, str) and ':' in w for w in workers):
    raise KitError(f'malformed TF_CONFIG: cluster.worker must be a non-empty '
                   f'list of "host:port", got {workers!r}')
  members = config['cluster'].get(task_type)
  if not isinstance(index, int) or not isinstance(members, list) or not (
      0 <= index < len(members)):
    raise KitError(f'malformed TF_CONFIG: task {task_type}:{index} is not in '
                   f'the cluster {config["cluster"]}')
  return config


def make_strategy(name: str, tpu: str | None = None, zone: str | None = None,
                  project: str | None = None,
                  worker_wait_seconds: float = 300) -> tf.distribute.Strategy:
  """Returns the strategy --strategy names (see the module docstring).

  With multi_worker, first waits up to worker_wait_seconds for the other
  workers (migrate/rendezvous.py says why).
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
    config = check_tf_config()
    if config['task']['type'] == 'worker':
      rendezvous.wait_for_workers(config['cluster']['worker'],
                                  config['task']['index'], worker_wait_seconds)
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
