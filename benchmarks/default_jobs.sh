#!/usr/bin/env bash
# Runs the README's three main jobs with default flags, one after the other,
# and prints a Markdown table row per job: eval accuracy and wall time.
#   bash benchmarks/default_jobs.sh [PYTHON [FLAG...]]   (default: .venv/bin/python)
# With a PYTHON of the newest profile (no tf.estimator), the two migrate jobs;
# with the jax profile's (no TensorFlow), the JAX job on 4 CPU devices.
# FLAGs go to the two migrate jobs only, after their own (a later flag wins),
# and leave the estimator job out, so that a run with and one without a flag
# compare the migrate jobs alone. For XLA: --jit_compile --num_cpu_devices=1
# (on CPUs XLA compiles one replica; benchmarks/README.md, "Default jobs").
# Each job writes into a fresh temporary --model_dir; data comes from the
# kit's default data directory (the offline default unless you put MNIST there).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
shift || true
flags=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
extra=${flags[*]:+ ${flags[*]}}
jobs=("migrate --loop=fit$extra" "migrate --loop=custom --num_cpu_devices=2$extra")
if [ ${#flags[@]} -eq 0 ] && "$python" -c 'import tensorflow_estimator' 2> /dev/null; then
  jobs=("estimator_mnist" "${jobs[@]}")
fi
if ! "$python" -c 'import tensorflow' 2> /dev/null; then
  jobs=("migrate_jax --num_cpu_devices=4$extra")
  echo "JAX $("$python" -c 'import jax; print(jax.__version__)')"
else
  echo "TensorFlow $("$python" -c 'import tensorflow as tf; print(tf.__version__)' 2> /dev/null)"
fi
echo "| command | eval accuracy | wall time |"
echo "| --- | --- | --- |"
for job in "${jobs[@]}"; do
  dir="$work/$(echo "$job" | tr -c 'a-z0-9' '_')"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  PYTHONPATH=$PWD "$python" -m $job --model_dir="$dir" > "$dir.log" 2>&1 ||
    { echo "$job failed:"; tail -5 "$dir.log"; exit 1; }
  end=$(date +%s.%N)
  accuracy=$(grep -o 'Eval accuracy: [0-9.]* on [0-9]* test images' "$dir.log" |
             sed 's/Eval accuracy: //') || accuracy='not evaluated'  # --eval_steps=0
  printf '| `python -m %s` | %s | %.0f s |\n' "$job" "$accuracy" \
    "$(awk "BEGIN { print $end - $start }")"
done
