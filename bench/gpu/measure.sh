#!/usr/bin/env bash
# The GPU measurements this repository keeps (docs/performance.md), run on one GPU machine; each part writes
# its results under $OUT. The machine needs CUDA torch; Ansible is installed beside it (bench/gpu/deps.sh, see
# bench/gpu/README.md), from wheels in .whl/ when that directory exists (a machine without network), else
# from the package index. The GPU tests have their own runner, tests/gpu/run.sh.
#   bash bench/gpu/measure.sh PART...   under $OUT; PART: bench launch (all: these two), or a
#   side-by-side part: testcases megatron deepspeed hf jax frameworks (see bench/gpu/README.md)
# Parts are never implied: each takes minutes of GPU time (compilation included), so a bare call runs nothing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# PY (the Python with CUDA torch), OUT, DEPS and gpu_deps.
# shellcheck source=bench/gpu/deps.sh
. "$ROOT/bench/gpu/deps.sh"
LAUNCH_ARGS=${TS_LAUNCH_ARGS:-'{"training_job_args": {"config": "llama3_2_1b", "batch-size": 8, "seq-len": 2048, "steps": 30}}'}
# The catalog instance type whose GPU this machine has (stacks/instance_types.yml): MFU is measured against its
# bf16_dense_flops, by the benchmark and by the launched test case alike.
INSTANCE_TYPE=${TS_INSTANCE_TYPE:-p5en.48xlarge}
cd "$ROOT" || exit 2
# The test cases' shared library (testcases/common/trainstack_train), which staging puts beside each train.py;
# every run below that starts a test case's code from the repository has it on its Python path.
LIB="$ROOT/testcases/common"
mkdir -p "$OUT"

run_bench() {
  # Clocks, power and throttle reasons every 250 ms alongside: step-to-step variation is either the GPU's
  # clocks or the host falling behind (the bench reports the host's queueing time per step).
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 250 > "$OUT/gpu_clocks.csv" 2>&1 &
  local sampler=$! rc
  # torchtitan's row imports torchtitan: its case's lock, carried as for the side-by-side parts.
  carry titan
  # Only torchtitan's rows get its pins: they include huggingface_hub 2.x, which the machine's transformers
  # (the Hugging Face rows) refuses.
  # shellcheck disable=SC2086 # TS_BENCH_ARGS is a list of arguments
  PYTHONPATH="$LIB" "$PY" -m bench.train_throughput --steps 24 --warmup 4 --profile --instance-type "$INSTANCE_TYPE" \
    --titan-path "$DEPS/titan" \
    --output "$OUT/train_throughput_llama3_2_1b.json" --log-dir "$OUT/logs_bench" \
    ${TS_BENCH_ARGS:---ours-variant fsdp:fsdp=true}
  rc=$?
  kill "$sampler" 2>/dev/null
  return "$rc"
}

# carry NAME: the pins of the case's GPU lock (target $LOCK_TARGET) that bench/gpu/lock_carry.py carries, from
# the wheels in $TS_GPU_WHEELS (default .whl, made by `python3 -m bench.gpu.lock_carry download`), with --no-deps
# into a fresh $DEPS/NAME. PYTHONPATH puts that directory ahead of the machine's site-packages, so the lock's
# versions win while the machine's CUDA stack (torch, Triton, NVIDIA wheels, JAX) stays its own; what the run
# then finds, pin by pin, goes to $OUT/lock-NAME.json.
LOCK_TARGET=${TS_LOCK_TARGET:-gpu-ubuntu-24.04-x86_64}
# The launched runs' names end with the GPU's short name (h200, h100, ...).
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'h[0-9]+|a[0-9]+|b[0-9]+|l40s?' | head -1 | tr '[:upper:]' '[:lower:]')
GPU_TAG=${GPU_TAG:-gpu}
declare -A CASE_OF=([fsdp]=pytorch/fsdp [titan]=torchtitan/llama [megatron]=megatron/gpt [deepspeed]=deepspeed/zero3
  [hf]=hf/finetune [jax]=jax/llama)
carry() {
  local name=$1 from=${TS_GPU_WHEELS:-.whl} pins=()
  [ -f "$DEPS/$name/.carried" ] && return 0
  mapfile -t pins < <("$PY" -m bench.gpu.lock_carry pins --target "$LOCK_TARGET" --wheels "$from" "${CASE_OF[$name]}")
  echo "$name: installing ${#pins[@]} pins of ${CASE_OF[$name]}'s $LOCK_TARGET lock"
  rm -rf "${DEPS:?}/$name" && mkdir -p "$DEPS/$name"
  [ "${#pins[@]}" -eq 0 ] ||
    "$PY" -m pip install -q --no-deps --no-index --find-links "$from" --target "$DEPS/$name" "${pins[@]}" || return 1
  PYTHONPATH="$DEPS/$name" "$PY" -m bench.gpu.lock_carry record --target "$LOCK_TARGET" --wheels "$from" \
    "${CASE_OF[$name]}" --out "$OUT/lock-$name.json" && touch "$DEPS/$name/.carried"
}

# launch_local TESTCASE NAME RESULTS ARGS_JSON [PYTHONPATH]: the launch playbook's local launcher on this machine
# with the machine's own Python (no venv to build). No training_job_instance_type (the type's EFA settings are not
# this machine's): the peak goes in as the variable the launcher would set, ahead of ARGS_JSON so that a
# training_job_env given there wins.
# With TS_ACCEPT_TORCH (the machine's torch version, as torch prints it), the launch accepts that torch in place of
# the lock's and the run's summary records the exception; without it, a machine whose torch is not the lock's
# is refused, as on a cluster.
launch_local() {
  local env="{\"training_job_env\": {\"TRAINSTACK_GPU_PEAK_TFLOPS\": \"$PEAK\"${5:+, \"PYTHONPATH\": \"$5\"}}}"
  local accept=()
  [ -n "${TS_ACCEPT_TORCH:-}" ] && accept=(-e "training_job_accept_torch=$TS_ACCEPT_TORCH")
  PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local playbooks/launch_training.yml \
    -e launch_host=localhost -e ansible_python_interpreter="$PY" \
    -e training_job_testcase="$1" -e training_job_launcher=local \
    -e training_job_venv=false -e training_job_python="$PY" -e training_job_shared_dir=/tmp/ts-shared \
    -e training_job_results_dir="$3" -e training_job_name="$2" -e training_job_timeout=540 -e "$env" -e "$4" \
    "${accept[@]}"
}

run_launch() {
  launch_local pytorch/fsdp fsdp-1b-h200 "$OUT/launch" "$LAUNCH_ARGS" 2>&1 | tail -40 | tee "$OUT/launch.txt"
}

# The shape every side-by-side run trains: TS_TESTCASE_SHAPE="CONFIG BATCH SEQ" (default the 1B shape, 8 x 2048),
# TS_TESTCASE_STEPS steps (default 30); a CPU dry run takes "tiny 2 128" and a few steps.
read -r SHAPE_CONFIG SHAPE_BATCH SHAPE_SEQ <<< "${TS_TESTCASE_SHAPE:-llama3_2_1b 8 2048}"
SHAPE=(--batch-size "$SHAPE_BATCH" --seq-len "$SHAPE_SEQ" --steps "${TS_TESTCASE_STEPS:-30}")

# run_direct DIR RUN: one test case's entrypoint started directly at the shape above, with its recommended
# one-GPU settings (each case's GPU defaults unless said), its summary in DIR/RUN_direct.json:
#   fsdp      pytorch/fsdp: per-block compile, bf16 parameters over fp32 master weights, Triton loss
#   titan     torchtitan/llama: per-block compile, one process without sharding
#   megatron  megatron/gpt: TP=PP=DP=1, local layer spec, selective recomputation of core attention (megatron-
#             core has no fused attention without Transformer Engine; 16 layers x 8 x 32 x 2048 x 2048 scores
#             do not fit in 141 GB otherwise)
#   ds_zero2  deepspeed/zero3 at ZeRO stage 2 (DeepSpeed's advice for a model whose states fit on the GPU: on one
#             GPU nothing is partitioned)      ds_zero3  the same at stage 3, the case's default
#   hf        hf/finetune: LoRA rank 16, alpha 32, dropout 0.05 on every block projection, lr 2e-4, random
#             weights made in place at the shape (no download), plain model, no gradient checkpointing
#   jax       jax/llama: one jitted step, fp32 master weights with bf16 compute, cuDNN's fused attention
run_direct() {
  local dir=$1 run=$2 common=("${SHAPE[@]}" --peak-tflops "$PEAK")
  local model=(--config "$SHAPE_CONFIG" --lr 3e-4) cmd
  case "$run" in
    fsdp) carry fsdp; cmd=(testcases/pytorch/fsdp/train.py "${model[@]}") ;;
    titan) carry titan; cmd=(testcases/torchtitan/llama/train.py "${model[@]}") ;;
    megatron) carry megatron
      cmd=(testcases/megatron/gpt/train.py "${model[@]}" --recompute selective) ;;
    megatron_corpus) carry megatron
      cmd=(testcases/megatron/gpt/train.py "${model[@]}" --recompute selective --data "${TS_CORPUS:?a prepared corpus}") ;;
    ds_zero2 | ds_zero3) carry deepspeed
      cmd=(testcases/deepspeed/zero3/train.py "${model[@]}" --zero-stage "${run#ds_zero}") ;;
    hf) carry hf
      cmd=(testcases/hf/finetune/train.py --init-config "$SHAPE_CONFIG" --lr 2e-4 --lora-rank 16 --lora-alpha 32
           --lora-dropout 0.05 --lora-targets all-linear) ;;
    jax) carry jax; cmd=(testcases/jax/llama/train.py "${model[@]}") ;;
    *) echo "unknown run: $run" >&2; return 2 ;;
  esac
  local deps=${run%%_*}
  [ "$deps" = ds ] && deps=deepspeed
  # Each run under its own limit, so that one that hangs leaves the others their time.
  PYTHONPATH="$LIB:$DEPS/$deps" timeout "${TS_RUN_TIMEOUT_S:-150}" "$PY" "${cmd[@]}" "${common[@]}" \
    --summary-json "$dir/${run}_direct.json" > "$dir/${run}_direct.log" 2>&1
}

# resume_check DIR DEPS ENTRYPOINT ARG...: the tiny shape's resume from the case's own checkpoint: one
# uninterrupted 6-step run beside one stopped after its checkpoint at step 3 (the tiny shape leaves the GPU
# idle), then the resumed one; train_report.py compares the losses step by step.
resume_check() {
  local dir=$1 deps=$2 entry=$3 rc=0 whole
  shift 3
  local run=(env PYTHONPATH="$LIB:$DEPS/$deps" "$PY" "$entry" --config tiny --steps 6 "$@")
  "${run[@]}" --summary-json "$dir/resume_whole.json" > "$dir/resume_whole.log" 2>&1 & whole=$!
  "${run[@]}" --checkpoint-dir "$dir/ckpt" --checkpoint-every 3 --max-steps-this-run 3 \
    --summary-json "$dir/resume_head.json" > "$dir/resume_head.log" 2>&1 || rc=1
  "${run[@]}" --checkpoint-dir "$dir/ckpt" --checkpoint-every 3 \
    --summary-json "$dir/resume_tail.json" > "$dir/resume_tail.log" 2>&1 || rc=1
  wait "$whole" || rc=1
  rm -rf "$dir/ckpt"
  return "$rc"
}

# The sub-steps of the side-by-side parts, in the order given; a sub-step that does not fit in what is left of
# TS_BUDGET_S (seconds, default unlimited) is skipped and says so, and the collected JSON records a missing run
# as such. What each needs at most, in seconds (measured on the H200, with headroom):
declare -A NEED=([fsdp]=100 [titan]=75 [megatron]=60 [ds_zero2]=70 [ds_zero3]=70 [hf]=70 [jax]=90
  [titan_launched]=75 [megatron_launched]=75 [titan_parity]=40 [megatron_checks]=60 [ds_resume]=40
  [fsdp_launched]=100 [ds_zero2_launched]=75 [hf_launched]=75 [jax_launched]=95 [torch_refused]=15
  [megatron_corpus]=60 [megatron_corpus_resume]=60)

side_step() {
  local dir=$1 step=$2
  case "$step" in
    torch_refused)
      # The machine's torch against the lock's, without TS_ACCEPT_TORCH: the launch must refuse, naming both.
      TS_ACCEPT_TORCH="" launch_local pytorch/fsdp fsdp-refused "$dir/launch" "$(launched_args)" "$DEPS/fsdp" \
        > "$dir/torch_refused.txt" 2>&1 && { echo "not refused" >> "$dir/torch_refused.txt"; return 1; }
      grep -q "training_job_accept_torch" "$dir/torch_refused.txt" ;;
    *_launched)
      local case=${step%_launched} deps args
      deps=${case%%_*}
      [ "$deps" = ds ] && deps=deepspeed
      case "$case" in
        megatron) args=$(launched_args recompute selective) ;;
        ds_zero2) args=$(launched_args zero-stage 2) ;;
        hf) args=$(printf '{"training_job_args": {"init-config": "%s", "batch-size": %s, "seq-len": %s, "steps": %s, "lr": 2e-4, "lora-rank": 16, "lora-alpha": 32, "lora-dropout": 0.05, "lora-targets": "all-linear"}}' \
              "$SHAPE_CONFIG" "$SHAPE_BATCH" "$SHAPE_SEQ" "${TS_TESTCASE_STEPS:-30}") ;;
        *) args=$(launched_args) ;;
      esac
      carry "$deps" || return 1
      launch_local "${CASE_OF[$deps]}" "$case-$GPU_TAG" "$dir/launch" "$args" "$DEPS/$deps" \
        > "$dir/${case}_launch.txt" 2>&1 || return 1
      find "$dir/launch" -path "*$case-$GPU_TAG*" -name summary.json -exec cp {} "$dir/${case}_launched.json" \; ;;
    titan_parity)
      PYTHONPATH="$LIB:$DEPS/titan" "$PY" testcases/torchtitan/llama/parity.py --output "$dir/parity.json" > "$dir/parity.log" 2>&1 ;;
    megatron_checks)
      # megatron-core's distributed optimizer through the resume; the first-step parity runs beside it.
      PYTHONPATH="$LIB:$DEPS/megatron" "$PY" testcases/megatron/gpt/parity.py --output "$dir/megatron_parity.json" \
        > "$dir/megatron_parity.log" 2>&1 & local parity=$! rc=0
      resume_check "$dir" megatron testcases/megatron/gpt/train.py --distributed-optimizer true || rc=1
      wait "$parity" || rc=1
      return "$rc" ;;
    ds_resume) resume_check "$dir" deepspeed testcases/deepspeed/zero3/train.py --zero-stage 3 ;;
    megatron_corpus_resume)
      # The tiny shape on a corpus whose vocabulary fits it (512 tokens at most): the reader's position
      # goes through the checkpoint, so the resumed run reads the rows the uninterrupted one read next.
      carry megatron || return 1
      resume_check "$dir" megatron testcases/megatron/gpt/train.py --data "${TS_CORPUS_TINY:?a prepared corpus}" ;;
    *) run_direct "$dir" "$step" ;;
  esac
}

# The launched runs' arguments: the shape above, plus KEY VALUE pairs.
launched_args() {
  local extra=""
  while [ "$#" -ge 2 ]; do extra+=", \"$1\": \"$2\""; shift 2; done
  printf '{"training_job_args": {"config": "%s", "batch-size": %s, "seq-len": %s, "steps": %s, "lr": 3e-4%s}}' \
    "$SHAPE_CONFIG" "$SHAPE_BATCH" "$SHAPE_SEQ" "${TS_TESTCASE_STEPS:-30}" "$extra"
}

# side_by_side NAME STEP...: the steps under $OUT/NAME (TS_STEPS replaces the list), then one JSON of them all,
# $OUT/NAME/testcases_NAME.json, rendered by `python3 -m bench.train_report testcases`.
side_by_side() {
  local name=$1 dir="$OUT/$1" rc=0 step started left status runs=()
  shift
  local -a steps
  [ -n "${TS_STEPS:-}" ] && read -r -a steps <<< "$TS_STEPS" && set -- "${steps[@]}"
  mkdir -p "$dir"
  for step in "$@"; do
    left=$((${TS_BUDGET_S:-0} - SECONDS))
    if [ "${TS_BUDGET_S:-0}" -gt 0 ] && [ "$left" -lt "${NEED[$step]:-0}" ]; then
      echo "$name: skipped $step (${left}s left of ${TS_BUDGET_S}s, it needs ${NEED[$step]:-0}s)" | tee -a "$dir/steps.txt"
      continue
    fi
    started=$SECONDS
    side_step "$dir" "$step"
    status=$?
    [ "$status" -eq 0 ] || rc=1
    echo "$name: $step rc=$status in $((SECONDS - started))s" | tee -a "$dir/steps.txt"
    case "$step" in
      *_launched) runs+=("$step") ;;
      *_parity | *_checks | *_resume | torch_refused) ;;
      *) runs+=("${step}_direct") ;;
    esac
  done
  "$PY" -m bench.train_report testcases-collect "$dir" "$dir/testcases_$name.json" "${runs[@]}" || rc=1
  return "$rc"
}

if [ "$#" -eq 0 ]; then
  echo "usage: $0 bench|launch|testcases|megatron|deepspeed|hf|jax|frameworks|locked|corpus|all..." >&2
  exit 2
fi
PEAK=$("$PY" -m bench.catalog_peak "$INSTANCE_TYPE") || exit 2
echo "MFU against $PEAK TFLOP/s per GPU (dense BF16 of $INSTANCE_TYPE's GPU, stacks/instance_types.yml)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.csv" 2>&1
# Only the parts that run Ansible need it: launch and the launched sub-steps.
needs_tools() {
  local chosen=${TS_STEPS:-}
  [ -z "$chosen" ] && [[ " $* " =~ \ (testcases|megatron|locked)\  ]] && chosen=_launched
  [[ " $* " =~ \ (launch|all)\  || "$chosen" == *_launched* ]]
}
# shellcheck disable=SC2119 # Ansible alone: no further tools
if needs_tools "$@"; then gpu_deps || { echo "could not install ansible-core into $DEPS" >&2; exit 2; }; fi
[ "$*" = all ] && set -- bench launch
status=0
for part in "$@"; do
  case "$part" in
    bench) run_bench || status=1 ;;
    launch) run_launch || status=1 ;;
    testcases) side_by_side testcases fsdp titan titan_launched titan_parity || status=1 ;;
    megatron) side_by_side megatron megatron megatron_launched fsdp titan megatron_checks || status=1 ;;
    deepspeed) side_by_side deepspeed fsdp ds_zero2 ds_zero3 ds_resume || status=1 ;;
    hf) side_by_side hf hf fsdp || status=1 ;;
    jax) side_by_side jax jax fsdp || status=1 ;;
    frameworks) side_by_side frameworks fsdp titan megatron ds_zero2 hf jax || status=1 ;;
    corpus) side_by_side corpus megatron megatron_corpus megatron_corpus_resume || status=1 ;;
    locked) side_by_side locked torch_refused fsdp_launched titan_launched megatron_launched ds_zero2_launched \
      hf_launched jax_launched || status=1 ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
exit "$status"
