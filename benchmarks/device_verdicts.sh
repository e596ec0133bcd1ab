#!/bin/bash
# The two verdicts on whatever device JAX has (docs/EQUIVALENCE.md, "Two
# verdicts on any device"): the kit's ports on JAX and three deliberate
# bugs, from the bundles TF 2.15 recorded, with --quiet lines and reports.
#
#   bash benchmarks/device_verdicts.sh BUNDLES [PYTHON] [FLAG...]
#
# BUNDLES: a folder with bert.npz (tests/tf215_artifacts.py writes it, and
# bert_data/ beside it, which the BERT port's pipeline reads: keep the folder
# where it was recorded) and, if you recorded one, kit_pair.npz (the kit's
# pair at 20 steps, as docs/EQUIVALENCE.md records it); without it, the kit's
# own bundle (kit_pair/golden_bundle.npz, 2 steps). PYTHON: one with JAX and
# the kit's jax extra (default .venv-jax/bin/python). FLAGs go to every run,
# e.g. --emulate_precision=bf16 on a CPU. On a GPU it runs at JAX's default
# precision (TF32): no flag. Reports land in $OUT (default
# /tmp/device_verdicts). About 3 minutes on an H200, 2 on a 2-core CPU.
set -u
bundles=${1:?give the folder of bert.npz (and kit_pair.npz, if recorded)}
python=${2:-.venv-jax/bin/python}
shift $(( $# < 2 ? $# : 2 ))
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/device_verdicts}
mkdir -p "$out"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$repo:$repo/tests:$repo/tests/user_code"
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
# No run here asks a metadata server for a TPU.
export GCE_METADATA_IP=127.0.0.1:9 GCE_METADATA_HOST=127.0.0.1:9
"$python" -c "import jax; print('JAX', jax.__version__, jax.devices())"
compare() {
  local name=$1 start=$SECONDS
  shift
  timeout 300 "$python" -m migration_tools.compare \
    --report="$out/$name.json" --quiet "$@" > "$out/$name.log" 2>&1
  echo "== $name: exit $?, $((SECONDS - start)) s"
  grep -E '^(Ran on|PASS|FAIL|ERROR|NOT RUN|First)' "$out/$name.log" |
    cut -c1-200
}
kit="$bundles/kit_pair.npz"
[ -e "$kit" ] || kit="$repo/kit_pair/golden_bundle.npz"
compare kit --bundle="$kit" "$@"
compare summed_loss --bundle="$kit" \
  --port=mnist_optax_port:summed_loss --replicas=1 --notpu_ready "$@"
compare offset_input --bundle="$kit" \
  --port=mnist_optax_port:offset_input --replicas=1 --notpu_ready "$@"
compare bert --bundle="$bundles/bert.npz" --port=bert_jax_port:make_port \
  --notpu_ready "$@"
compare bert_erf_gelu --bundle="$bundles/bert.npz" \
  --port=bert_jax_port:erf_gelu --replicas=1 --notpu_ready "$@"
# Each report's device_drift and measured noise, as docs/EQUIVALENCE.md
# quotes them.
"$python" - "$out" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.json'))):
  checks = {c['name']: c for c in json.load(open(path))['checks']}
  drift = checks.get('device_drift')
  said = [f'device_drift {drift["ratio_to_bar"]:.2g}x its bar' if drift
          else 'device_drift left out (float32)']
  for name in ('one_step (1 replica)', 'updates (1 replica)',
               'stepwise (1 replica)'):
    if name in checks:
      noise = checks[name].get('noise', {}).get('largest') or {}
      said.append(f'{name} {checks[name]["max_abs_diff"]:.3g} '
                  f'({checks[name]["ratio_to_bar"]:.2g}x), noise on its '
                  f'gradients {noise.get("gradients", float("nan")):.2g}')
  print(f'{os.path.basename(path)}: ' + '; '.join(said))
PY
