#!/bin/bash
# STAND-IN for NVIDIA Nsight Systems' `nsys` (NVIDIA's downloads are unreachable here and the lab has no GPU).
# It implements only what launch_training's wrapper calls: `nsys profile [--option=value ...] CMD [ARGS...]`,
# with --output=PATH among the options. It runs CMD like nsys does (its exit status passes through), then writes
# PATH.nsys-rep as JSON (the options, the command, the RANK it saw) so tests can see which ranks were wrapped.
set -uo pipefail
if [ "${1:-}" != profile ]; then
  echo "stand-in nsys: only 'profile' is implemented" >&2
  exit 2
fi
shift
options=()
output=""
while [ $# -gt 0 ] && [[ $1 == -* ]]; do
  [[ $1 == --output=* ]] && output=${1#--output=}
  options+=("$1")
  shift
done
if [ -z "$output" ] || [ $# -eq 0 ]; then
  echo "stand-in nsys: usage: nsys profile --output=PATH [--option=value ...] CMD [ARGS...]" >&2
  exit 2
fi
"$@"
status=$?
python3 - "$output.nsys-rep" "${#options[@]}" "${options[@]}" "$@" <<'PY'
import json, os, sys
path, count = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
record = {"tool": "stand-in nsys", "rank": os.environ.get("RANK"), "options": rest[:count], "command": rest[count:]}
with open(path, "w") as handle:
    json.dump(record, handle)
PY
exit $status
