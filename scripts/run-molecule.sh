#!/usr/bin/env bash
# Run molecule scenarios side by side (MOLECULE_JOBS at a time, default 3), one log each, and report.
# Scenarios can share the host because each has its own node names and address block
# (molecule/scenarios.yml); the lab's bridge, proxy, base image and key exist before they start.
set -uo pipefail
jobs=${MOLECULE_JOBS:-3}
logs=${MOLECULE_LOGS:-.cache/molecule-logs}
mkdir -p "$logs"
[ "$#" -gt 0 ] || { echo "run-molecule: no scenarios given" >&2; exit 2; }

# shellcheck disable=SC2317 # run by xargs through export -f, not called here
run_one() {
  local s=$1 start rc
  start=$(date +%s)
  molecule test -s "$s" > "$logs/$s.log" 2>&1
  rc=$?
  echo "$s $rc $(( $(date +%s) - start ))" > "$logs/$s.result"
}
export -f run_one
export logs

rm -f "$logs"/*.result
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'run_one {}'

status=0
printf '%-20s %-6s %s\n' SCENARIO RESULT SECONDS
for s in "$@"; do
  read -r _ rc secs < "$logs/$s.result"
  printf '%-20s %-6s %s\n' "$s" "$([ "$rc" -eq 0 ] && echo ok || echo FAILED)" "$secs"
  if [ "$rc" -ne 0 ]; then
    status=1
    # The failing task first (the tail alone is mostly molecule's destroy step), then the tail.
    echo "---- failed tasks in $logs/$s.log"
    sed 's/\x1b\[[0-9;]*m//g' "$logs/$s.log" | grep -B 12 -A 25 -E 'fatal: |failed: \[|FAILED!|ERROR! ' | head -n 160
    echo "---- last lines of $logs/$s.log"
    sed 's/\x1b\[[0-9;]*m//g' "$logs/$s.log" | grep -vE '^\s*│\s*$' | tail -n 40
  fi
done
exit "$status"
