#!/usr/bin/env bash
# The GPU tests, run on one GPU machine (make test has no GPU); each part writes what it found under $OUT.
# Ansible and pytest are installed beside the machine's CUDA torch by bench/gpu/deps.sh, as for the GPU
# measurements (bench/gpu/measure.sh).
#   bash tests/gpu/run.sh PART...   PART: tests (pytest -m gpu tests/gpu), verify (roles/pytorch's boot-time
#   check, pytorch_verify_gpu.yml), all (both)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=bench/gpu/deps.sh
. "$ROOT/bench/gpu/deps.sh"
cd "$ROOT" || exit 2
mkdir -p "$OUT"

run_tests() {
  PYTHONPATH="$DEPS" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_tests.txt"
}

run_verify() {
  # roles/pytorch's boot-time check wants <venv>/bin/python: a wrapper in a fresh directory, never a file
  # written through the machine venv's own bin/python symlink.
  mkdir -p /tmp/ts-torch-wrapper/bin
  printf '#!/bin/sh\nexec %q "$@"\n' "$PY" > /tmp/ts-torch-wrapper/bin/python
  chmod +x /tmp/ts-torch-wrapper/bin/python
  local version
  version=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
  PYTHONPATH="$DEPS" "$DEPS/bin/ansible-playbook" -i localhost, -c local \
    tests/gpu/pytorch_verify_gpu.yml -e ansible_python_interpreter="$PY" \
    -e pytorch_venv=/tmp/ts-torch-wrapper -e pytorch_version="$version" -e gpu_out="$OUT" \
    2>&1 | tail -25 | tee "$OUT/verify.txt"
}

if [ "$#" -eq 0 ]; then
  echo "usage: $0 tests|verify|all..." >&2
  exit 2
fi
[ "$*" = all ] && set -- tests verify
for part in "$@"; do
  case "$part" in tests | verify) ;; *) echo "unknown part: $part" >&2; exit 2 ;; esac
done
gpu_deps pytest || { echo "could not install ansible-core and pytest into $DEPS" >&2; exit 2; }
status=0
for part in "$@"; do
  case "$part" in
    tests) run_tests || status=1 ;;
    verify) run_verify || status=1 ;;
  esac
done
exit "$status"
