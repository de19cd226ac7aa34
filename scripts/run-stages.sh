#!/usr/bin/env bash
# Run make targets one after another as the stages of a test run, and end with how long each took.
# A stage written `a+b` runs targets a and b side by side (each into its own log under STAGE_LOGS, printed
# when both have ended): for stages that share no state. The first is the long pole; the others run at a lower
# CPU priority (nice STAGE_NICE, default 10), so that they take what it leaves and do not lengthen it.
# Stops at the first stage that fails (later stages would test on top of a broken one) and says which.
set -uo pipefail
[ "$#" -gt 0 ] || { echo "run-stages: no stages given" >&2; exit 2; }
make_cmd=${MAKE:-make}
logs=${STAGE_LOGS:-.cache/stage-logs}
niceness=${STAGE_NICE:-10}
declare -a rows=()
status=0
total_start=$(date +%s)

row() { # name, rc, seconds
  rows+=("$(printf '%-26s %-7s %6d' "$1" "$([ "$2" -eq 0 ] && echo ok || echo FAILED)" "$3")")
}

run_one() {
  local stage=$1 start rc
  start=$(date +%s)
  echo "== stage ${stage}"
  "$make_cmd" --no-print-directory "$stage"
  rc=$?
  row "$stage" "$rc" $(( $(date +%s) - start ))
  return "$rc"
}

run_side_by_side() {
  local group=$1 start stage rc secs worst=0
  local -a stages children=()
  IFS=+ read -ra stages <<< "$group"
  mkdir -p "$logs"
  start=$(date +%s)
  echo "== stages ${stages[*]}, side by side (logs: ${logs}/<stage>.log, printed when all have ended;" \
    "all but ${stages[0]} at nice ${niceness})"
  local -a priority=()
  for stage in "${stages[@]}"; do
    (
      begin=$(date +%s)
      "${priority[@]}" "$make_cmd" --no-print-directory "$stage" > "$logs/$stage.log" 2>&1
      echo "$? $(( $(date +%s) - begin ))" > "$logs/$stage.rc"
    ) &
    priority=(nice -n "$niceness")
  done
  wait
  for stage in "${stages[@]}"; do
    echo "== stage ${stage} (beside: ${group})"
    cat "$logs/$stage.log"
    read -r rc secs < "$logs/$stage.rc"
    children+=("$(printf '%-26s %-7s %6d' "  ${stage}" "$([ "$rc" -eq 0 ] && echo ok || echo FAILED)" "$secs")")
    [ "$rc" -eq 0 ] || worst=$rc
  done
  row "$group" "$worst" $(( $(date +%s) - start ))
  rows+=("${children[@]}")
  return "$worst"
}

for stage in "$@"; do
  if [[ $stage == *+* ]]; then
    run_side_by_side "$stage"
  else
    run_one "$stage"
  fi
  rc=$?
  if [ "$rc" -ne 0 ]; then status=$rc; break; fi
done
echo "== stage times (seconds; an a+b row is the wall time of stages run side by side, indented below it)"
printf '%-26s %-7s %6s\n' STAGE RESULT SECONDS
printf '%s\n' "${rows[@]}"
printf '%-26s %-7s %6d\n' total "$([ "$status" -eq 0 ] && echo ok || echo FAILED)" $(( $(date +%s) - total_start ))
exit "$status"
