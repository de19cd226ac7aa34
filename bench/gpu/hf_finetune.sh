#!/usr/bin/env bash
# hf/finetune beside pytorch/fsdp on one GPU, each at its recommended single-GPU settings, results under $OUT/hf:
# the 1B shape (llama3_2_1b: random weights made in place, nothing to download), batch 8 x 2048, bf16.
#   hf/finetune   LoRA rank 16, alpha 32, dropout 0.05 on every projection of the blocks (PEFT's all-linear),
#                 lr 2e-4; one process trains the plain model (no FSDP), bf16 base weights, fp32 adapters under
#                 bf16 autocast, no gradient checkpointing (the activations of 8 x 2048 fit)
#   pytorch/fsdp  full training with its GPU defaults (compiled blocks, Triton loss, fp32 master weights)
# The machine needs CUDA torch and transformers (bench/gpu/README.md); accelerate, PEFT and psutil, where it lacks
# them, go from the wheels in $TS_GPU_WHEELS (default .whl) with --no-deps into $TS_GPU_DEPS/hf.
#   OUT=$PWD/gpu-results TS_GPU_WHEELS=<dir> bash bench/gpu/hf_finetune.sh
# TS_HF_CONFIG, TS_HF_BATCH, TS_HF_SEQ and TS_TESTCASE_STEPS change the shape (a CPU dry run: tiny, 2, 128, 4).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${TS_GPU_PYTHON:-}" ]; then PY=$TS_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3); fi
OUT=${OUT:-/tmp/ts-gpu-out}
DEPS=${TS_GPU_DEPS:-/tmp/ts-gpu-deps}
WHEELS=${TS_GPU_WHEELS:-.whl}
INSTANCE_TYPE=${TS_INSTANCE_TYPE:-p5en.48xlarge}
CONFIG=${TS_HF_CONFIG:-llama3_2_1b}
STEPS=${TS_TESTCASE_STEPS:-30}
SHAPE=(--batch-size "${TS_HF_BATCH:-8}" --seq-len "${TS_HF_SEQ:-2048}" --steps "$STEPS")
cd "$ROOT" || exit 2
dir="$OUT/hf"
mkdir -p "$dir"
PEAK=$("$PY" bench/catalog_peak.py "$INSTANCE_TYPE") || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$dir/gpu.csv" 2>&1

missing=()
for pair in accelerate:accelerate==1.15.0 peft:peft==0.21.2 psutil:psutil; do
  PYTHONPATH="$DEPS/hf" "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${pair%%:*}') is None)" \
    2>/dev/null || missing+=("${pair#*:}")
done
echo "hf/finetune: installing ${missing[*]:-nothing}" | tee "$dir/deps.txt"
[ "${#missing[@]}" -eq 0 ] ||
  "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$DEPS/hf" "${missing[@]}" 2>&1 |
  tee -a "$dir/deps.txt"
PYTHONPATH="$DEPS/hf" "$PY" -c 'import torch, transformers, accelerate, peft, sys
print(f"python {sys.version.split()[0]} torch {torch.__version__} transformers {transformers.__version__} "
      f"accelerate {accelerate.__version__} peft {peft.__version__}")' 2>&1 | tee -a "$dir/deps.txt"

rc=0
# Each run is bounded so that one that hangs leaves time for the other (seconds, measured with headroom).
PYTHONPATH="$DEPS/hf" timeout "${TS_HF_TIMEOUT_S:-120}" "$PY" testcases/hf/finetune/train.py \
  --init-config "$CONFIG" "${SHAPE[@]}" --lr 2e-4 --lora-rank 16 --lora-alpha 32 --lora-dropout 0.05 \
  --lora-targets all-linear --peak-tflops "$PEAK" --summary-json "$dir/hf_direct.json" > "$dir/hf_direct.log" 2>&1 ||
  rc=1
timeout "${TS_FSDP_TIMEOUT_S:-110}" "$PY" testcases/pytorch/fsdp/train.py --config "$CONFIG" "${SHAPE[@]}" \
  --lr 3e-4 --peak-tflops "$PEAK" --summary-json "$dir/fsdp_direct.json" > "$dir/fsdp_direct.log" 2>&1 || rc=1
"$PY" - "$dir" <<'EOF' || rc=1
"""The two summaries side by side in one JSON (a run that left no summary is recorded as missing)."""
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

directory = Path(sys.argv[1])
keys = (
    "testcase", "steps", "first_loss", "final_loss", "eval_loss_before", "eval_loss", "tokens_per_s",
    "tflops_per_gpu", "mfu", "peak_mem_gb", "elapsed_s", "params", "trainable_params", "flops_per_token",
    "flops_formula", "peak_tflops", "precision", "fsdp", "compile", "lora_rank", "lora_alpha", "lora_targets",
    "tokenizer", "gpu_model", "torch", "transformers", "accelerate", "peft",
)
runs = []
for name, testcase in (("hf_direct", "hf/finetune"), ("fsdp_direct", "pytorch/fsdp")):
    path = directory / f"{name}.json"
    row = {"name": name, "testcase": testcase, "ok": path.is_file()}
    if path.is_file():
        summary = json.loads(path.read_text(encoding="utf-8"))
        row.update({key: summary.get(key) for key in keys if key in summary})
    runs.append(row)
rates = {row["name"]: row.get("tokens_per_s") for row in runs}
document = {
    "benchmark": "hf_finetune_side_by_side",
    "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "runs": runs,
    "hf_vs_fsdp_tokens_per_s": rates["hf_direct"] / rates["fsdp_direct"]
    if rates["hf_direct"] and rates["fsdp_direct"]
    else None,
}
(directory / "testcases_hf_finetune.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
for row in runs:
    print(row["name"], {k: row.get(k) for k in ("ok", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_mem_gb")})
EOF
exit "$rc"
