#!/usr/bin/env bash
# deepspeed/zero3 beside pytorch/fsdp on one GPU machine, under $OUT/deepspeed (as bench/gpu/measure.sh's parts):
# the 1B shape, 8 x 2048, bf16, 30 steps, pytorch/fsdp with its GPU defaults, then deepspeed/zero3 at ZeRO
# stage 2 (DeepSpeed's recommendation for a model whose states fit on the GPU: on one GPU nothing is
# partitioned, the engine keeps its fp32 master weights and contiguous gradient buffer) and at stage 3 (the
# case's default, its per-module gathering costs measured); then, while time is left, the tiny shape's resume
# from DeepSpeed's checkpoint (6 steps against 3 + 3). DeepSpeed's wheel (built from PyPI's source
# distribution with DS_BUILD_OPS=0) and the pure-Python packages it needs come from $TS_GPU_WHEELS (default
# .cache/whl-ds) with --no-deps into their own --target directory, each only where the machine lacks it.
#   OUT=... bash bench/gpu/deepspeed.sh        TS_DEEPSPEED_BUDGET_S: seconds the resume check may start within
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${TS_GPU_PYTHON:-}" ]; then PY=$TS_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3); fi
OUT=${OUT:-/tmp/ts-gpu-out}
DEPS=${TS_GPU_DEPS:-/tmp/ts-gpu-deps}
WHEELS=${TS_GPU_WHEELS:-.cache/whl-ds}
INSTANCE_TYPE=${TS_INSTANCE_TYPE:-p5en.48xlarge}
STEPS=${TS_TESTCASE_STEPS:-30}
BUDGET=${TS_DEEPSPEED_BUDGET_S:-0}
cd "$ROOT"
DIR="$OUT/deepspeed"
mkdir -p "$DIR"

install_missing() {
  local missing=() module package
  for pair in deepspeed:deepspeed==0.19.8 hjson:hjson ninja:ninja msgpack:msgpack cpuinfo:py-cpuinfo \
      einops:einops psutil:psutil pydantic:pydantic pydantic_core:pydantic-core \
      annotated_types:annotated-types typing_inspection:typing-inspection; do
    module=${pair%%:*} package=${pair#*:}
    "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null ||
      missing+=("$package")
  done
  echo "deepspeed/zero3: installing ${missing[*]:-nothing}" | tee "$DIR/deps.txt"
  [ "${#missing[@]}" -eq 0 ] ||
    "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$DEPS/deepspeed" "${missing[@]}"
}

PEAK=$("$PY" bench/catalog_peak.py "$INSTANCE_TYPE") || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$DIR/gpu.csv" 2>&1
install_missing
rc=0
args=(--config llama3_2_1b --batch-size 8 --seq-len 2048 --steps "$STEPS" --lr 3e-4 --peak-tflops "$PEAK")
ds=(env PYTHONPATH="$DEPS/deepspeed" "$PY" testcases/deepspeed/zero3/train.py)
"$PY" testcases/pytorch/fsdp/train.py "${args[@]}" --summary-json "$DIR/fsdp_direct.json" \
  > "$DIR/fsdp_direct.log" 2>&1 || rc=1
for stage in 2 3; do
  "${ds[@]}" "${args[@]}" --zero-stage "$stage" --summary-json "$DIR/ds_zero${stage}_direct.json" \
    > "$DIR/ds_zero${stage}_direct.log" 2>&1 || rc=1
done
# The resume: the whole run and the one stopped after its checkpoint at step 3 side by side, then the rest.
if [ "$BUDGET" -eq 0 ] || [ "$SECONDS" -lt "$BUDGET" ]; then
  tiny=(--config tiny --steps 6 --zero-stage 3)
  "${ds[@]}" "${tiny[@]}" --summary-json "$DIR/resume_whole.json" > "$DIR/resume_whole.log" 2>&1 & whole=$!
  "${ds[@]}" "${tiny[@]}" --checkpoint-dir "$DIR/ckpt" --checkpoint-every 3 --max-steps-this-run 3 \
    --summary-json "$DIR/resume_head.json" > "$DIR/resume_head.log" 2>&1 || rc=1
  "${ds[@]}" "${tiny[@]}" --checkpoint-dir "$DIR/ckpt" --checkpoint-every 3 \
    --summary-json "$DIR/resume_tail.json" > "$DIR/resume_tail.log" 2>&1 || rc=1
  wait "$whole" || rc=1
  rm -rf "$DIR/ckpt"
else
  echo "resume check skipped: ${SECONDS}s of ${BUDGET}s used" | tee "$DIR/resume_skipped.txt"
fi
# bench/train_report.py's collector and table, told about these runs.
"$PY" - "$DIR" <<'PY' || rc=1
import json, sys
from pathlib import Path
sys.path.insert(0, "bench")
import train_report as report
report.TESTCASE_RUNS = {
    "fsdp_direct": ("pytorch/fsdp", "entrypoint started directly (beside deepspeed/zero3)"),
    "ds_zero2_direct": ("deepspeed/zero3", "entrypoint started directly, --zero-stage 2"),
    "ds_zero3_direct": ("deepspeed/zero3", "entrypoint started directly, --zero-stage 3"),
}
report.SUMMARY_KEYS = (*report.SUMMARY_KEYS, "deepspeed", "zero_stage", "optimizer_class", "jit_ops", "bf16")
directory = Path(sys.argv[1])
document = report.collect_testcases(directory)
fsdp = next(r.get("tokens_per_s") for r in document["runs"] if r["name"] == "fsdp_direct")
for row in document["runs"]:
    if row["name"].startswith("ds_") and row.get("tokens_per_s") and fsdp:
        document[f"{row['name']}_vs_fsdp"] = row["tokens_per_s"] / fsdp
resume = {}
for name in ("whole", "head", "tail"):
    path = directory / f"resume_{name}.json"
    if path.is_file():
        resume[name] = json.loads(path.read_text())["losses"]
if {"whole", "head", "tail"} <= set(resume):
    resume["tail_continues_whole"] = resume["tail"] == resume["whole"][len(resume["head"]) :]
document["deepspeed_resume"] = resume or None
(directory / "testcases_deepspeed.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
print(report.testcases_table(document))
print(json.dumps({k: v for k, v in document.items() if k.endswith("_vs_fsdp") or k == "deepspeed_resume"}, indent=1))
PY
exit "$rc"
