#!/usr/bin/env bash
# The GPU measurements this repository keeps (docs/performance.md), run on one GPU machine; each part writes
# its results under $OUT. The machine needs CUDA torch; Ansible and pytest are installed beside it (see
# bench/gpu/README.md), from wheels in .whl/ when that directory exists (a machine without network), else
# from the package index.
#   bash bench/gpu/measure.sh bench|tests|launch|verify|testcases|megatron... (or all: the first four)   under $OUT
# Parts are never implied: each takes minutes of GPU time (compilation included), so a bare call runs nothing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# The Python that has CUDA torch: TS_GPU_PYTHON, else a venv at /opt/torch/.venv, else python3 on PATH.
if [ -n "${TS_GPU_PYTHON:-}" ]; then PY=$TS_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3); fi
OUT=${OUT:-/tmp/ts-gpu-out}
DEPS=${TS_GPU_DEPS:-/tmp/ts-gpu-deps}
LAUNCH_ARGS=${TS_LAUNCH_ARGS:-'{"training_job_args": {"config": "llama3_2_1b", "batch-size": 8, "seq-len": 2048, "steps": 30}}'}
# The catalog instance type whose GPU this machine has (stacks/instance_types.yml): MFU is measured against its
# bf16_dense_flops, by the benchmark and by the launched test case alike.
INSTANCE_TYPE=${TS_INSTANCE_TYPE:-p5en.48xlarge}
cd "$ROOT"
mkdir -p "$OUT"

deps() {
  # pip --target, not a venv: a venv made from this interpreter would not see the machine's torch.
  local wheels=()
  [ -d "${TS_GPU_WHEELS:-.whl}" ] && wheels=(--no-index --find-links "${TS_GPU_WHEELS:-.whl}")
  # pytest only for the tests part (a wheel directory made for the other parts may not hold it).
  local tools=(ansible-core==2.19.14)
  [[ " $* " == *" tests "* || " $* " == *" all "* ]] && tools+=(pytest)
  [ -x "$DEPS/bin/ansible-playbook" ] ||
    "$PY" -m pip install -q "${wheels[@]}" --target "$DEPS" "${tools[@]}"
  mkdir -p .cache/collections/ansible_collections/trainstack
  ln -sfn "$ROOT" .cache/collections/ansible_collections/trainstack/cluster
}

run_bench() {
  # Clocks, power and throttle reasons every 250 ms alongside: step-to-step variation is either the GPU's
  # clocks or the host falling behind (the bench reports the host's queueing time per step).
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 250 > "$OUT/gpu_clocks.csv" 2>&1 &
  local sampler=$! rc
  # shellcheck disable=SC2086 # TS_BENCH_ARGS is a list of arguments
  "$PY" bench/train_throughput.py --steps 24 --warmup 4 --profile --instance-type "$INSTANCE_TYPE" \
    --output "$OUT/train_throughput_llama3_2_1b.json" --log-dir "$OUT/logs_bench" \
    ${TS_BENCH_ARGS:---ours-variant fsdp:fsdp=true}
  rc=$?
  kill "$sampler" 2>/dev/null
  return "$rc"
}

run_tests() {
  PYTHONPATH="$DEPS" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_tests.txt"
}

run_launch() {
  # The launch playbook's local launcher on this machine, with the machine's own torch (no venv to build).
  # No training_job_instance_type (the type's EFA settings are not this machine's): the peak goes in as the
  # variable the launcher would set, ahead of LAUNCH_ARGS so that a training_job_env given there wins.
  PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local playbooks/launch_training.yml \
    -e launch_host=localhost -e ansible_python_interpreter="$PY" \
    -e training_job_testcase=pytorch/fsdp -e training_job_launcher=local \
    -e training_job_venv=false -e training_job_python="$PY" -e training_job_shared_dir=/tmp/ts-shared \
    -e training_job_results_dir="$OUT/launch" -e training_job_name=fsdp-1b-h200 -e training_job_timeout=540 \
    -e "{\"training_job_env\": {\"TRAINSTACK_GPU_PEAK_TFLOPS\": \"$PEAK\"}}" -e "$LAUNCH_ARGS" \
    2>&1 | tail -40 | tee "$OUT/launch.txt"
}

# torchtitan/llama's imports that the machine's Python lacks, from the wheels in $TS_GPU_WHEELS (default .whl), put
# with --no-deps into their own --target directory, after the machine's own site-packages on the path.
titan_deps() {
  local wheels=${TS_GPU_WHEELS:-.whl} missing=() module package
  for pair in torchtitan:torchtitan==0.2.2 tyro:tyro docstring_parser:docstring-parser typeguard:typeguard \
      torchdata:torchdata datasets:datasets dill:dill multiprocess:multiprocess xxhash:xxhash \
      tensorboard:tensorboard absl:absl-py google.protobuf:protobuf tokenizers:tokenizers \
      huggingface_hub:huggingface_hub dateutil:python-dateutil torchao:torchao==0.17.0; do
    module=${pair%%:*} package=${pair#*:}
    "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null ||
      missing+=("$package")
  done
  echo "torchtitan/llama: installing ${missing[*]:-nothing}" | tee "$OUT/testcases/deps.txt"
  [ "${#missing[@]}" -eq 0 ] ||
    "$PY" -m pip install -q --no-deps --no-index --find-links "$wheels" --target "$DEPS/titan" "${missing[@]}"
}

# The 1B shape, 8 x 2048, bf16, each case's recommended one-GPU settings (their defaults on a GPU): pytorch/fsdp
# and torchtitan/llama started directly, torchtitan/llama through the launch playbook (local launcher) for the
# launch path's cost, and both models' first-step loss on the same weights and batch (bench/testcase_parity.py).
run_testcases() {
  local dir="$OUT/testcases" args rc=0
  mkdir -p "$dir"
  titan_deps
  args=(--config llama3_2_1b --batch-size 8 --seq-len 2048 --steps "${TS_TESTCASE_STEPS:-30}" --lr 3e-4
        --peak-tflops "$PEAK")
  "$PY" testcases/pytorch/fsdp/train.py "${args[@]}" --summary-json "$dir/fsdp_direct.json" \
    > "$dir/fsdp_direct.log" 2>&1 || rc=1
  PYTHONPATH="$DEPS/titan" "$PY" testcases/torchtitan/llama/train.py "${args[@]}" \
    --summary-json "$dir/titan_direct.json" > "$dir/titan_direct.log" 2>&1 || rc=1
  PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local playbooks/launch_training.yml \
    -e launch_host=localhost -e ansible_python_interpreter="$PY" \
    -e training_job_testcase=torchtitan/llama -e training_job_launcher=local \
    -e training_job_venv=false -e training_job_python="$PY" -e training_job_shared_dir=/tmp/ts-shared \
    -e training_job_results_dir="$dir/launch" -e training_job_name=titan-1b-h200 -e training_job_timeout=540 \
    -e "{\"training_job_env\": {\"TRAINSTACK_GPU_PEAK_TFLOPS\": \"$PEAK\", \"PYTHONPATH\": \"$DEPS/titan\"}}" \
    -e "{\"training_job_args\": {\"config\": \"llama3_2_1b\", \"batch-size\": 8, \"seq-len\": 2048,
         \"steps\": ${TS_TESTCASE_STEPS:-30}, \"lr\": 3e-4}}" > "$dir/launch.txt" 2>&1 || rc=1
  find "$dir/launch" -name summary.json -exec cp {} "$dir/titan_launched.json" \; 2>/dev/null
  PYTHONPATH="$DEPS/titan" "$PY" bench/testcase_parity.py --output "$dir/parity.json" > "$dir/parity.log" 2>&1 || rc=1
  "$PY" bench/train_report.py testcases-collect "$dir" "$dir/testcases_llama3_2_1b.json" || rc=1
  return "$rc"
}

# megatron/gpt beside pytorch/fsdp and torchtitan/llama: the 1B shape, 8 x 2048, bf16, each case's recommended
# one-GPU settings; megatron/gpt's are megatron-core's for attention without Transformer Engine (TP=PP=DP=1,
# local layer spec, selective recomputation of core attention: the unfused attention's scores are recomputed
# in the backward pass instead of kept, 16 layers x 8 x 32 x 2048 x 2048 of them do not fit in 141 GB).
# megatron-core goes from $TS_GPU_WHEELS with --no-deps into its own --target directory (it needs only torch,
# numpy and packaging, which the machine has). The sub-steps, in the order of TS_MEGATRON_STEPS (default all):
#   direct    megatron/gpt started directly          launched  the same through launch_training (local)
#   fsdp      pytorch/fsdp started directly          titan     torchtitan/llama started directly
#   checks    the tiny shape's resume with the distributed optimizer (6 steps against 3 + 3) and, beside it,
#             bench/megatron_parity.py (first-step loss against pytorch/fsdp on the same weights and batch)
# A sub-step that does not fit in what is left of TS_MEGATRON_BUDGET_S (seconds, default unlimited) is skipped
# and says so; the collected JSON records a missing run as such.
megatron_step() {
  local dir=$1 step=$2 args=(--config llama3_2_1b --batch-size 8 --seq-len 2048
    --steps "${TS_TESTCASE_STEPS:-30}" --lr 3e-4 --peak-tflops "$PEAK")
  case "$step" in
    direct)
      PYTHONPATH="$DEPS/megatron" "$PY" testcases/megatron/gpt/train.py "${args[@]}" --recompute selective \
        --summary-json "$dir/megatron_direct.json" > "$dir/megatron_direct.log" 2>&1 ;;
    launched)
      PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local playbooks/launch_training.yml \
        -e launch_host=localhost -e ansible_python_interpreter="$PY" \
        -e training_job_testcase=megatron/gpt -e training_job_launcher=local \
        -e training_job_venv=false -e training_job_python="$PY" -e training_job_shared_dir=/tmp/ts-shared \
        -e training_job_results_dir="$dir/launch" -e training_job_name=megatron-1b-h200 \
        -e training_job_timeout=540 \
        -e "{\"training_job_env\": {\"TRAINSTACK_GPU_PEAK_TFLOPS\": \"$PEAK\", \"PYTHONPATH\": \"$DEPS/megatron\"}}" \
        -e "{\"training_job_args\": {\"config\": \"llama3_2_1b\", \"batch-size\": 8, \"seq-len\": 2048,
             \"steps\": ${TS_TESTCASE_STEPS:-30}, \"lr\": 3e-4, \"recompute\": \"selective\"}}" \
        > "$dir/launch.txt" 2>&1
      local rc=$?
      find "$dir/launch" -name summary.json -exec cp {} "$dir/megatron_launched.json" \; 2>/dev/null
      return "$rc" ;;
    fsdp)
      "$PY" testcases/pytorch/fsdp/train.py "${args[@]}" --summary-json "$dir/fsdp_direct.json" \
        > "$dir/fsdp_direct.log" 2>&1 ;;
    titan)
      titan_deps
      PYTHONPATH="$DEPS/titan" "$PY" testcases/torchtitan/llama/train.py "${args[@]}" \
        --summary-json "$dir/titan_direct.json" > "$dir/titan_direct.log" 2>&1 ;;
    checks) megatron_checks "$dir" ;;
    *) echo "unknown megatron step: $step" >&2; return 2 ;;
  esac
}

# The resume: one uninterrupted 6-step run and one stopped after its checkpoint at step 3 run side by side
# (the tiny shape leaves the GPU idle), then the resumed one; the parity check runs beside the first two.
megatron_checks() {
  local dir=$1 ckpt="$1/ckpt" common=(--config tiny --steps 6 --distributed-optimizer true) rc=0 pids=()
  local run=(env PYTHONPATH="$DEPS/megatron" "$PY" testcases/megatron/gpt/train.py "${common[@]}")
  "${run[@]}" --summary-json "$dir/resume_whole.json" > "$dir/resume_whole.log" 2>&1 & pids+=($!)
  "${run[@]}" --checkpoint-dir "$ckpt" --checkpoint-every 3 --max-steps-this-run 3 \
    --summary-json "$dir/resume_head.json" > "$dir/resume_head.log" 2>&1 & pids+=($!)
  PYTHONPATH="$DEPS/megatron" "$PY" bench/megatron_parity.py --output "$dir/megatron_parity.json" \
    > "$dir/megatron_parity.log" 2>&1 & pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  "${run[@]}" --checkpoint-dir "$ckpt" --checkpoint-every 3 --summary-json "$dir/resume_tail.json" \
    > "$dir/resume_tail.log" 2>&1 || rc=1
  return "$rc"
}

run_megatron() {
  local dir="$OUT/megatron" wheels=${TS_GPU_WHEELS:-.whl} rc=0 step started left status
  local budget=${TS_MEGATRON_BUDGET_S:-0}
  # What each sub-step needs at most, in seconds (measured on the H200, with headroom), for the budget.
  declare -A need=([direct]=60 [launched]=75 [fsdp]=100 [titan]=75 [checks]=60)
  mkdir -p "$dir" "$OUT/testcases"
  PYTHONPATH="$DEPS/megatron" "$PY" -c "import megatron.core" 2>/dev/null ||
    "$PY" -m pip install -q --no-deps --no-index --find-links "$wheels" --target "$DEPS/megatron" megatron-core==0.16.1
  for step in ${TS_MEGATRON_STEPS:-direct launched fsdp titan checks}; do
    left=$((budget - SECONDS))
    if [ "$budget" -gt 0 ] && [ "$left" -lt "${need[$step]:-0}" ]; then
      echo "megatron: skipped $step (${left}s left of ${budget}s, it needs ${need[$step]:-0}s)" | tee -a "$dir/steps.txt"
      continue
    fi
    started=$SECONDS
    megatron_step "$dir" "$step"
    status=$?
    [ "$status" -eq 0 ] || rc=1
    echo "megatron: $step rc=$status in $((SECONDS - started))s" | tee -a "$dir/steps.txt"
  done
  "$PY" bench/train_report.py testcases-collect "$dir" "$dir/testcases_megatron.json" || rc=1
  return "$rc"
}

run_verify() {
  # roles/pytorch's boot-time check wants <venv>/bin/python: a wrapper in a fresh directory, never a file
  # written through the machine venv's own bin/python symlink.
  mkdir -p /tmp/ts-torch-wrapper/bin
  printf '#!/bin/sh\nexec %s "$@"\n' "$PY" > /tmp/ts-torch-wrapper/bin/python
  chmod +x /tmp/ts-torch-wrapper/bin/python
  version=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
  PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local \
    tests/integration/image/gpu/pytorch_verify_gpu.yml -e ansible_python_interpreter="$PY" \
    -e pytorch_venv=/tmp/ts-torch-wrapper -e pytorch_version="$version" -e gpu_out="$OUT" \
    2>&1 | tail -25 | tee "$OUT/verify.txt"
}

if [ "$#" -eq 0 ]; then
  echo "usage: $0 bench|tests|launch|verify|testcases|megatron|all..." >&2
  exit 2
fi
PEAK=$("$PY" bench/catalog_peak.py "$INSTANCE_TYPE") || exit 2
echo "MFU against $PEAK TFLOP/s per GPU (dense BF16 of $INSTANCE_TYPE's GPU, stacks/instance_types.yml)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.csv" 2>&1
# Only the parts that run Ansible or pytest need them (megatron's launched sub-step runs Ansible).
[ "$*" = megatron ] && [[ " ${TS_MEGATRON_STEPS:-launched} " != *" launched "* ]] || deps "$@"
[ "$*" = all ] && set -- tests bench launch verify
status=0
for part in "$@"; do
  case "$part" in
    bench) run_bench || status=1 ;;
    tests) run_tests || status=1 ;;
    launch) run_launch || status=1 ;;
    testcases) run_testcases || status=1 ;;
    verify) run_verify || status=1 ;;
    megatron) run_megatron || status=1 ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
exit "$status"
