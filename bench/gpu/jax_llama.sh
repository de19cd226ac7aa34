#!/usr/bin/env bash
# jax/llama beside pytorch/fsdp on one GPU, in one call: the 1B shape, 8 x 2048, each case's recommended
# one-GPU settings (their GPU defaults: jax/llama jitted, fp32 master weights with bf16 compute, cuDNN's fused
# attention; pytorch/fsdp compiled, bf16 parameters over fp32 master weights), MFU against the peak of the
# catalog type whose GPU the machine has. The machine's Python must have jax with CUDA; optax comes from
# $TS_GPU_WHEELS (default .cache/whl-jax) when it lacks it (no network there). Results under $OUT/jax.
#   OUT=... bash bench/gpu/jax_llama.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${TS_GPU_PYTHON:-}" ]; then PY=$TS_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3); fi
OUT=${OUT:-/tmp/ts-gpu-out}
DIR="$OUT/jax"
DEPS=${TS_GPU_DEPS:-/tmp/ts-gpu-deps}/jax
WHEELS=${TS_GPU_WHEELS:-.cache/whl-jax}
STEPS=${TS_TESTCASE_STEPS:-30}
INSTANCE_TYPE=${TS_INSTANCE_TYPE:-p5en.48xlarge}
cd "$ROOT"
mkdir -p "$DIR"
PEAK=$("$PY" bench/catalog_peak.py "$INSTANCE_TYPE") || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$DIR/gpu.csv" 2>&1
"$PY" - > "$DIR/versions.txt" 2>&1 <<'PY'
import importlib.metadata as md, platform
for name in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda13-pjrt",
             "optax", "orbax-checkpoint", "torch", "numpy", "ml-dtypes"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
print("python", platform.python_version())
import jax
print("devices", jax.devices())
PY
cat "$DIR/versions.txt"
"$PY" -c "import optax" 2>/dev/null ||
  "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$DEPS" optax==0.2.8
args=(--config llama3_2_1b --batch-size 8 --seq-len 2048 --steps "$STEPS" --lr 3e-4 --peak-tflops "$PEAK")
rc=0
# Each run under its own limit, so that one that hangs leaves the other its time.
# shellcheck disable=SC2086 # TS_JAX_ARGS is a list of arguments
PYTHONPATH="$DEPS" timeout "${TS_JAX_TIMEOUT:-120}" "$PY" testcases/jax/llama/train.py "${args[@]}" \
  ${TS_JAX_ARGS:-} --summary-json "$DIR/jax_direct.json" > "$DIR/jax_direct.log" 2>&1 || rc=1
tail -4 "$DIR/jax_direct.log"
# A fused-attention failure found early (cuDNN's version or its shape rules) leaves time for XLA's attention.
if [ ! -s "$DIR/jax_direct.json" ] && [ "$SECONDS" -lt 60 ]; then
  PYTHONPATH="$DEPS" timeout 60 "$PY" testcases/jax/llama/train.py "${args[@]}" --attention xla \
    --summary-json "$DIR/jax_xla_attention.json" > "$DIR/jax_xla_attention.log" 2>&1
  tail -4 "$DIR/jax_xla_attention.log"
fi
# pytorch/fsdp takes what is left of the call's budget.
timeout "$(( ${TS_BUDGET:-225} - SECONDS ))" "$PY" testcases/pytorch/fsdp/train.py "${args[@]}" \
  --summary-json "$DIR/fsdp_direct.json" > "$DIR/fsdp_direct.log" 2>&1 || rc=1
tail -2 "$DIR/fsdp_direct.log"
exit "$rc"
