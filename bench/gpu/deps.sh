# shellcheck shell=bash
# Sourced by the GPU machine's runners (bench/gpu/measure.sh, tests/gpu/run.sh): the Python that has CUDA
# torch, and Ansible (with pytest where asked) installed beside it, so that both runners set a GPU machine up
# the same way. Expects ROOT (the repository) to be set.
# The Python that has CUDA torch: TS_GPU_PYTHON, else a venv at /opt/torch/.venv, else python3 on PATH.
if [ -n "${TS_GPU_PYTHON:-}" ]; then PY=$TS_GPU_PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3); fi
OUT=${OUT:-/tmp/ts-gpu-out}
DEPS=${TS_GPU_DEPS:-/tmp/ts-gpu-deps}

# gpu_deps TOOL...: ansible-core and the given tools (pytest) into $DEPS, from the wheels in TS_GPU_WHEELS
# (default .whl) where that directory exists (a machine without network), else from the package index; and this
# repository as the collection trainstack.cluster. pip --target, not a venv: a venv made from this interpreter
# would not see the machine's torch.
gpu_deps() {
  local wheels=() tools=(ansible-core==2.19.14 "$@") tool missing=""
  [ -d "${TS_GPU_WHEELS:-.whl}" ] && wheels=(--no-index --find-links "${TS_GPU_WHEELS:-.whl}")
  # A directory made earlier for fewer tools gets the missing ones (each tool has a command of its name).
  for tool in ansible-playbook "$@"; do [ -x "$DEPS/bin/$tool" ] || missing=yes; done
  if [ -n "$missing" ]; then
    "$PY" -m pip install -q "${wheels[@]}" --target "$DEPS" "${tools[@]}" || return 1
  fi
  mkdir -p "$ROOT/.cache/collections/ansible_collections/trainstack"
  ln -sfn "$ROOT" "$ROOT/.cache/collections/ansible_collections/trainstack/cluster"
}
