#!/usr/bin/env bash
# Run make targets one after another as the stages of a test run, and end with how long each took.
# Stops at the first stage that fails (later stages would test on top of a broken one) and says which.
set -uo pipefail
[ "$#" -gt 0 ] || { echo "run-stages: no stages given" >&2; exit 2; }
make_cmd=${MAKE:-make}
declare -a rows=()
status=0
total_start=$(date +%s)
for stage in "$@"; do
  start=$(date +%s)
  echo "== stage ${stage}"
  "$make_cmd" --no-print-directory "$stage"
  rc=$?
  rows+=("$(printf '%-14s %-7s %6d' "$stage" "$([ "$rc" -eq 0 ] && echo ok || echo FAILED)" $(( $(date +%s) - start )))")
  if [ "$rc" -ne 0 ]; then status=$rc; break; fi
done
echo "== stage times (seconds)"
printf '%-14s %-7s %6s\n' STAGE RESULT SECONDS
printf '%s\n' "${rows[@]}"
printf '%-14s %-7s %6d\n' total "$([ "$status" -eq 0 ] && echo ok || echo FAILED)" $(( $(date +%s) - total_start ))
exit "$status"
