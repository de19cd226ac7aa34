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

# megatron/gpt beside pytorch/fsdp: the 1B shape, 8 x 2048, bf16, megatron-core's one-GPU settings (TP=PP=DP=1,
# local layer spec: no Transformer Engine), then the tiny shape's checkpoint resume (3 + 3 steps against 6, with
# the distributed optimizer), which no CPU test can run. megatron-core goes from $TS_GPU_WHEELS with --no-deps
# into its own --target directory (it needs only torch, numpy and packaging, which the machine has).
run_megatron() {
  local dir="$OUT/megatron" wheels=${TS_GPU_WHEELS:-.whl} args rc=0 ckpt
  mkdir -p "$dir"
  "$PY" -c "import megatron.core" 2>/dev/null ||
    "$PY" -m pip install -q --no-deps --no-index --find-links "$wheels" --target "$DEPS/megatron" megatron-core==0.16.1
  args=(--config llama3_2_1b --batch-size 8 --seq-len 2048 --steps "${TS_TESTCASE_STEPS:-30}" --lr 3e-4
        --peak-tflops "$PEAK")
  PYTHONPATH="$DEPS/megatron" "$PY" testcases/megatron/gpt/train.py "${args[@]}" \
    --summary-json "$dir/megatron_direct.json" > "$dir/megatron_direct.log" 2>&1 || rc=1
  "$PY" testcases/pytorch/fsdp/train.py "${args[@]}" --summary-json "$dir/fsdp_direct.json" \
    > "$dir/fsdp_direct.log" 2>&1 || rc=1
  ckpt="$dir/ckpt"
  args=(--config tiny --steps 6 --distributed-optimizer true)
  for run in whole:"" head:"--max-steps-this-run 3" tail:""; do
    local name=${run%%:*} extra=() more=()
    read -ra more <<< "${run#*:}"
    [ "$name" = whole ] || extra=(--checkpoint-dir "$ckpt" --checkpoint-every 3 "${more[@]}")
    PYTHONPATH="$DEPS/megatron" "$PY" testcases/megatron/gpt/train.py "${args[@]}" "${extra[@]}" \
      --summary-json "$dir/resume_$name.json" > "$dir/resume_$name.log" 2>&1 || rc=1
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
# Only the parts that run Ansible or pytest need them.
[ "$*" = megatron ] || deps "$@"
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
