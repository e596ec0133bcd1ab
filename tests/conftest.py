"""Test-wide safety, devices and helpers.

No test may reach an address off this machine: the GCE metadata server that a
TPUClusterResolver asks is pointed at a closed port on 127.0.0.1, and the
variables that name a Cloud TPU are removed. Subprocesses inherit all of it.
"""
import contextlib
import fcntl
import functools
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

os.environ['GCE_METADATA_IP'] = '127.0.0.1:9'
os.environ['GCE_METADATA_HOST'] = '127.0.0.1:9'
for _name in ('TPU_NAME', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS', 'TPU_CONFIG'):
  os.environ.pop(_name, None)
# Quieter TensorFlow in this process only: the commands the tests run must
# meet the environment a user's shell gives them, where the kit keeps
# TensorFlow's start-up logs out of the way itself.
_QUIET_HERE = 'TF_CPP_MIN_LOG_LEVEL' not in os.environ
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

# Multi-replica tests run in this process on logical CPU devices, which must
# exist before TensorFlow runs its first op (or JAX makes its devices): split
# the CPU here, at import.
NUM_CPU_DEVICES = 4
# The jax profile has no TensorFlow: Keras 3 runs on JAX there, over as many
# XLA CPU devices. The torch profile has neither TensorFlow nor JAX.
HAS_TENSORFLOW = importlib.util.find_spec('tensorflow') is not None
HAS_JAX = importlib.util.find_spec('jax') is not None
HAS_TORCH = importlib.util.find_spec('torch') is not None
if HAS_TENSORFLOW:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices('CPU')[0],
      [tf.config.LogicalDeviceConfiguration()] * NUM_CPU_DEVICES)
elif HAS_JAX:
  os.environ['KERAS_BACKEND'] = 'jax'
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_force_'
                             f'host_platform_device_count={NUM_CPU_DEVICES}')
# JAX compiles a function once per process, and the commands the tests run
# are processes of their own, each compiling the same ports again: they
# share XLA's persistent compilation cache, every compilation kept however
# short (a cached executable is the one compiled: the same HLO, flags and
# device). One folder per run, made by the first process (pytest-xdist's
# controller; workers and commands inherit it), removed as the run ends.
_JAX_CACHE = 'JAX_COMPILATION_CACHE_DIR'
_OWN_JAX_CACHE = HAS_JAX and _JAX_CACHE not in os.environ
if _OWN_JAX_CACHE:
  os.environ[_JAX_CACHE] = tempfile.mkdtemp(prefix='kit_tests_jax_cache_')
  os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  os.environ['JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES'] = '0'
if _QUIET_HERE:
  del os.environ['TF_CPP_MIN_LOG_LEVEL']

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Further cases of a behaviour one case of the same test already covers in
# the default run: left out of it, run by `pytest -m "not slow"`, as CI runs
# every profile (docs/TESTING.md).
CATALOGUE = pytest.mark.catalogue


def catalogue(*values, **kwargs):
  """A parametrize case of the catalogue (see CATALOGUE)."""
  return pytest.param(*values, marks=CATALOGUE, **kwargs)

# On a TensorFlow without tf.estimator (the newest-TF profile) the test files
# that run the legacy half are not collected, and tests marked 'estimator'
# are deselected; the header says so (pytest_report_header).
HAS_ESTIMATOR = importlib.util.find_spec('tensorflow_estimator') is not None
ESTIMATOR_TEST_FILES = (
    'tools/test_compare.py', 'tools/test_convert_checkpoint.py',
    'example/test_estimator_main.py', 'example/test_estimator_model.py',
    'tools/test_user_pairs.py', 'example/test_versions.py')
collect_ignore = [] if HAS_ESTIMATOR else list(ESTIMATOR_TEST_FILES)
# The test files of JAX and its ports: collected on the jax profile alone
# (a TensorFlow profile has no JAX), as the header says.
JAX_ONLY_TEST_FILES = ('example/test_migrate_jax.py', 'tools/test_jax_ports.py',
                       'tools/test_jax_precision.py',
                       'tools/test_convert_jax.py',
                       'bench/test_throughput_jax.py')
if not HAS_JAX:
  collect_ignore += list(JAX_ONLY_TEST_FILES)
TORCH_ONLY_TEST_FILES = ('tools/test_torch_ports.py',)
if not HAS_TORCH:
  collect_ignore += list(TORCH_ONLY_TEST_FILES)
# On the jax profile, the files that need no TensorFlow; every other file is
# not collected, and the header says so. The scanner's tests need none
# either, but its behaviour depends on no framework, and the other two
# profiles run them.
JAX_TEST_FILES = ('example/test_migrate_jax.py', 'example/test_records.py',
                  'tools/test_jax_ports.py', 'tools/test_jax_precision.py',
                  'tools/test_array_port.py',
                  'tools/test_convert_jax.py',
                  'bench/test_throughput_jax.py',
                  'tools/test_checks.py', 'tools/test_updates.py',
                  'tools/test_stored.py', 'tools/test_outputs.py',
                  'tools/test_runs_on.py', 'tools/test_frameworks.py',
                  'test_boundaries.py', 'test_guide.py',
                  'test_documented_surface.py')
# On the torch profile (no TensorFlow, no JAX): PyTorch's ports, and the
# adapters' own tests; the rest is the other profiles'.
TORCH_TEST_FILES = ('tools/test_torch_ports.py', 'tools/test_frameworks.py')
# The files the profile without TensorFlow collects.
NO_TF_TEST_FILES = JAX_TEST_FILES if HAS_JAX else TORCH_TEST_FILES


def pytest_ignore_collect(collection_path, config):
  """Without TensorFlow, every test file outside NO_TF_TEST_FILES."""
  if HAS_TENSORFLOW or collection_path.suffix != '.py':
    return None
  relative = os.path.relpath(collection_path, os.path.dirname(__file__))
  if relative.startswith('test') or '/test_' in relative:
    return relative not in NO_TF_TEST_FILES or None
  return None


# What TF 2.15 made (tests/tf215_artifacts.py) for the tests marked
# 'from_tf215' to take over: .ci/run sets it; unset, they are left out.
TF215_DIR = os.environ.get('KIT_TF215_DIR')
# The estimator profile's Python, for the tests marked 'tf215_python' that
# run it beside this one: .ci/run sets it; unset, they are left out.
TF215_PYTHON = os.environ.get('KIT_TF215_PYTHON')


def pytest_report_header(config):
  if not HAS_TENSORFLOW and HAS_JAX:
    import jax  # pylint: disable=g-import-not-at-top
    import keras  # pylint: disable=g-import-not-at-top
    return [f'JAX {jax.__version__}, Keras {keras.__version__} on '
            f'{keras.backend.backend()}, no TensorFlow',
            'collected, as they need no TensorFlow: '
            f'{", ".join(JAX_TEST_FILES)}; every other file is left out']
  if not HAS_TENSORFLOW:
    import torch  # pylint: disable=g-import-not-at-top
    return [f'PyTorch {torch.__version__}, no TensorFlow, no JAX',
            f'collected: {", ".join(TORCH_TEST_FILES)}; every other file is '
            'left out']
  from kit_core import keras_compat  # pylint: disable=g-import-not-at-top
  lines = [f'TensorFlow {tf.__version__}, Keras {keras_compat.keras_major()}, '
           f'tf.estimator {"installed" if HAS_ESTIMATOR else "missing"}']
  if not HAS_JAX:
    lines.append('left out, as they need JAX (the jax profile runs them): '
                 f'{", ".join(JAX_ONLY_TEST_FILES)}')
  if not HAS_TORCH:
    lines.append('left out, as they need PyTorch (the torch profile runs '
                 f'them): {", ".join(TORCH_ONLY_TEST_FILES)}')
  if not HAS_ESTIMATOR:
    lines.append('left out, as they need tf.estimator (TF 2.15): '
                 f'{", ".join(ESTIMATOR_TEST_FILES)} and the tests marked '
                 '"estimator"')
  if 'slow' not in (config.option.markexpr or '').replace('not slow', ''):
    lines.append('left out: the test marked "slow", the full default '
                 'estimator_mnist job (run it with -m slow)')
  if 'not catalogue' in (config.option.markexpr or ''):
    lines.append('left out: the tests marked "catalogue", further cases of '
                 'behaviours the default run covers (run them with -m '
                 'catalogue)')
  lines.append(f'TF 2.15 artifacts: {TF215_DIR}' if TF215_DIR else
               'left out: the tests marked "from_tf215" (set KIT_TF215_DIR '
               'to the output of tests/tf215_artifacts.py)')
  lines.append(f'TF 2.15 Python: {TF215_PYTHON}' if TF215_PYTHON else
               'left out: the tests marked "tf215_python" (set '
               'KIT_TF215_PYTHON to the estimator profile\'s Python)')
  return lines


def pytest_collection_modifyitems(config, items):
  left_out = [item for item in items if (
      (not HAS_ESTIMATOR and item.get_closest_marker('estimator')) or
      (not TF215_DIR and item.get_closest_marker('from_tf215')) or
      (not TF215_PYTHON and item.get_closest_marker('tf215_python')))]
  if left_out:
    config.hook.pytest_deselected(items=left_out)
    items[:] = [item for item in items if item not in left_out]
  if getattr(config.option, 'numprocesses', None):
    # On several workers: the long tests (commands, training jobs) first,
    # each in its file's order, so that no worker starts one while the
    # other has nothing left but to wait for it.
    items.sort(key=lambda item: item.get_closest_marker('e2e') is None)


# The kit, the tests' broken ports and the user code, for subprocesses that
# load ports by name.
TESTS = os.path.join(REPO, 'tests')
TOOLS_PYTHONPATH = os.pathsep.join([REPO, TESTS,
                                    os.path.join(TESTS, 'user_code')])


# What a planted bug's comparison adds to run up to its first failure alone
# (the tests that assert only that failure; docs/EQUIVALENCE.md).
FAIL_FAST = '--fail_fast'


def failed_first(result, checks: dict, failing: str, cause: str) -> None:
  """A comparison failed (exit 1), the first check to fail or raise being
  failing, its message naming cause, and the summary's first to fix. Run
  with FAIL_FAST, every check after failing is NOT RUN, in one line naming
  it (FAIL_FAST's, or a gate's such as inventory's)."""
  assert result.returncode == 1, result.stderr[-2000:]
  failed = [n for n, c in checks.items() if c['status'] in ('failed',
                                                            'error')]
  assert failed and failed[0] == failing, result.stdout
  assert cause in checks[failing]['message'], checks[failing]['message']
  assert f'First to fix: {failing}' in result.stdout
  if FAIL_FAST in result.args:
    names = list(checks)
    after = names[names.index(failing) + 1:]
    reasons = {checks[n]['message'] for n in after}
    assert all(checks[n]['status'] == 'not run' for n in after), result.stdout
    assert len(reasons) <= 1, reasons
    assert all(r.startswith((f'{FAIL_FAST} stopped the comparison at '
                             f'{failing},', f'{failing} failed'))
               for r in reasons), reasons


def passed_but_dropout(checks: dict, unaligned: str) -> None:
  """Every check of a report passed but dropout, SKIP with a reason that
  says unaligned (a port whose masks cannot be drawn as TF 1 drew them)."""
  for name, check in checks.items():
    if name.startswith('dropout'):
      assert check['status'] == 'skipped', check
      assert unaligned in check['message']
    else:
      assert check['passed'], (name, check['message'])


def run_compare(report, *args: str):
  """migration-compare with --report=report; (the result, {name: check} of
  the report, empty if it wrote none)."""
  result = run_module('migration_tools.compare', f'--report={report}', *args,
                      env={'PYTHONPATH': TOOLS_PYTHONPATH})
  checks = {}
  if os.path.exists(report):
    with open(report, encoding='utf-8') as f:
      checks = {c['name']: c for c in json.load(f)['checks']}
  return result, checks


def run_module(module: str, *args: str, timeout: float = 600,
               env: dict | None = None,
               cwd: str = REPO) -> subprocess.CompletedProcess:
  """Runs ``python -m module args`` from cwd (the repo root by default);
  returns the result."""
  full_env = {**os.environ, 'PYTHONPATH': REPO, **(env or {})}
  return subprocess.run([sys.executable, '-m', module, *args], cwd=cwd,
                        env=full_env, capture_output=True, text=True,
                        timeout=timeout, check=False)


@functools.lru_cache(maxsize=None)
def cpu_strategy(replicas: int) -> 'tf.distribute.Strategy':
  """MirroredStrategy over the first `replicas` logical CPUs (or one device).

  One per replica count for the whole session: two MirroredStrategy objects
  over the same devices number their collective ops alike, and a process
  that runs both sees "Shape mismatch in the collective instance".
  """
  devices = [f'/cpu:{i}' for i in range(replicas)]
  if replicas == 1:
    return tf.distribute.OneDeviceStrategy(devices[0])
  return tf.distribute.MirroredStrategy(devices)


def pytest_sessionfinish(session, exitstatus):
  session.config.kit_exit_status = int(exitstatus)
  if _OWN_JAX_CACHE:  # Only the process that made it: the others are done.
    shutil.rmtree(os.environ[_JAX_CACHE], ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """Ends pytest once it has reported, skipping Python's finalisation, which
  on TF 2.15 waits up to a minute per live tf.data iterator
  (kit_core/process.py)."""
  from kit_core import process  # pylint: disable=g-import-not-at-top
  process.flush_and_exit(getattr(config, 'kit_exit_status', 0))


@contextlib.contextmanager
def tmpfs(path, size: str):
  """A tmpfs of `size` ('1m') mounted at path (made here), unmounted after:
  a disk that fills up, or, remounted read-only, one that refuses writes
  whoever writes. Skips the test where mounting is not allowed (not root)."""
  if os.geteuid() != 0:
    pytest.skip('a full or read-only disk is a tmpfs mount: needs root')
  path.mkdir(exist_ok=True)  # Mounted over, what it holds is out of sight.
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}',
                            'tmpfs', str(path)], capture_output=True,
                           text=True, check=False)
  if mounted.returncode:
    pytest.skip(f'cannot mount a tmpfs here: {mounted.stderr.strip()}')
  try:
    yield path
  finally:
    subprocess.run(['umount', '-l', str(path)], check=False)


@contextlib.contextmanager
def read_only(path):
  """path, a new folder that refuses writes for the block: a read-only
  tmpfs for root (whom permissions do not stop), mode 0555 for others."""
  if os.geteuid() != 0:
    path.mkdir(exist_ok=True)
    path.chmod(0o555)
    try:
      yield path
    finally:
      path.chmod(0o755)
    return
  with tmpfs(path, '1m'):
    subprocess.run(['mount', '-o', 'remount,ro', str(path)], check=True)
    yield path


def estimator_checkpoint(folder) -> str:
  """The kit's model, as an Estimator saves it, in folder (TF 2.15)."""
  from estimator_mnist import model as estimator_model  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default():
    tf.compat.v1.train.get_or_create_global_step()
    estimator_model.build_network(
        tf.compat.v1.placeholder(tf.float32, [1, 28, 28, 1]), training=True)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver().save(session, str(folder / 'model.ckpt'),
                                      global_step=1)
  return str(folder)


def append_zeros(npz, name: str, count: int) -> None:
  """Appends to the .npz an entry name.npy of count float32 zeros, written
  (and deflated) a piece at a time: a file of a few kB that declares, and
  inflates to, count * 4 bytes."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  with zipfile.ZipFile(npz, 'a', zipfile.ZIP_DEFLATED) as archive:
    with archive.open(f'{name}.npy', 'w', force_zip64=True) as entry:
      np.lib.format.write_array_header_2_0(entry, {
          'descr': '<f4', 'fortran_order': False, 'shape': (count,)})
      left = count * 4
      while left:
        piece = min(left, 2**24)
        entry.write(bytes(piece))
        left -= piece


def last_line(text: str) -> str:
  lines = [line for line in text.strip().splitlines() if line.strip()]
  return lines[-1] if lines else ''


def made_once(tmp_path_factory, name: str, make) -> pathlib.Path:
  """The folder `name`, made by make(folder) once for the whole run: under
  pytest-xdist, by the first worker to ask, while the others wait for it
  (a lock on a file beside it); a make that raised leaves nothing, and the
  next to ask makes it again."""
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent  # Shared by the workers of this run.
  folder, done = root / name, root / f'{name}.done'
  with open(root / f'{name}.lock', 'w', encoding='utf-8') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
          make(folder)
        except BaseException:
          shutil.rmtree(folder, ignore_errors=True)
          raise
        done.write_text('', encoding='utf-8')
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)
  return folder


def recorded_once(tmp_path_factory, name: str, *args: str,
                  env: dict | None = None) -> tuple[pathlib.Path, dict]:
  """(bundle, {name: check} of its report): a live comparison with args,
  its legacy side recorded (--record_bundle), once a run (made_once). The
  tests of a pair's broken ports replay it, each against its port: the
  legacy side is the same whatever the port, and run once; the run itself
  is a live comparison of the port args name, which must pass."""
  def record(folder):
    result = run_module('migration_tools.compare', *args,
                        f'--record_bundle={folder / "bundle.npz"}',
                        f'--report={folder / "live.json"}', '--quiet',
                        env={'PYTHONPATH': TOOLS_PYTHONPATH, **(env or {})})
    (folder / 'output.txt').write_text(result.stdout + result.stderr,
                                       encoding='utf-8')
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]

  folder = made_once(tmp_path_factory, name, record)
  with open(folder / 'live.json', encoding='utf-8') as f:
    return (folder / 'bundle.npz',
            {c['name']: c for c in json.load(f)['checks']})


@pytest.fixture(scope='session')
def kit_recording(tmp_path_factory):
  """(bundle, {name: check}): the kit's pair recorded live on TF 2.15 as
  tests/kit_bundle.py records the committed bundle, once a run, and that
  run's report; shared by the tests that read a fresh recording."""
  import kit_bundle  # pylint: disable=g-import-not-at-top

  def record(folder):
    result = kit_bundle.record(str(folder / 'kit.npz'),
                               str(folder / 'live.json'))
    (folder / 'output.txt').write_text(result.stdout + result.stderr,
                                       encoding='utf-8')
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]

  folder = made_once(tmp_path_factory, 'kit_recording', record)
  with open(folder / 'live.json', encoding='utf-8') as f:
    return folder / 'kit.npz', {c['name']: c for c in json.load(f)['checks']}


@pytest.fixture(scope='session')
def fake_data_dir(tmp_path_factory):
  """Prepared synthetic data, shared by the tests that only need some data."""
  from mnist_common import prepare  # pylint: disable=g-import-not-at-top
  return prepare.prepare(str(tmp_path_factory.mktemp('fake')), 'fake')


@pytest.fixture(scope='session')
def digits_data_dir(tmp_path_factory):
  from mnist_common import prepare  # pylint: disable=g-import-not-at-top
  return prepare.prepare(str(tmp_path_factory.mktemp('digits')), 'digits')
