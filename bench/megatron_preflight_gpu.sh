#!/usr/bin/env bash
# megatron/gpt's --preflight true on a GPU machine: one rank under NCCL (--device auto finds the GPU) with the
# checkpoint round trip, and two ranks on the same machine's CPU (--device cpu, gloo, tensor-parallel 2).
# Each run's summary and log go to $OUT (default /tmp/ts-megatron-preflight), with gpu.csv and status.txt.
# megatron-core is installed with --no-deps from $TS_GPU_WHEELS (default .cache/whl-megatron) when missing.
set -uo pipefail
OUT=${OUT:-/tmp/ts-megatron-preflight}
WHEELS=${TS_GPU_WHEELS:-.cache/whl-megatron}
DEPS=${TS_GPU_DEPS:-/tmp/ts-deps-megatron}
PY=${PY:-python3}
mkdir -p "$OUT"
if ! "$PY" -c "import megatron.core" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$DEPS" megatron-core==0.16.1
fi
# testcases/common: the shared training library, which staging would put beside train.py.
export PYTHONPATH="$PWD/testcases/common:$DEPS" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.csv" 2>&1

# preflight NAME PROCS ARGS...: one torchrun of the entrypoint with --preflight true; its exit status and time.
preflight() {
  local name=$1 procs=$2 start=$SECONDS rc
  shift 2
  timeout 150 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$procs" \
    testcases/megatron/gpt/train.py --preflight true --summary-json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$OUT/status.txt"
}

preflight cuda_nccl_1rank 1 --checkpoint-dir "$OUT/ck-cuda"
preflight cpu_gloo_2ranks_tp2 2 --device cpu --tp 2 --checkpoint-dir "$OUT/ck-cpu"
grep -h "megatron/gpt preflight" "$OUT"/*.log
