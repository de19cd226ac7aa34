#!/usr/bin/env bash
# Build nccl-tests from its release tarball against the NCCL that PyTorch loads, then run four of its
# programs beside the nccl/collectives test case over the same size sweep on every visible GPU.
#
# Why on the GPU machine and against PyTorch's NCCL: both tools then drive the same libnccl.so.2, so any
# difference between their figures is the tools' own (timing loop, buffers, checks), not the library's.
#
# Usage (from the repository root, on a machine with an NVIDIA GPU, nvcc and a CUDA PyTorch):
#   bench/nccl_tests_device.sh TARBALL OUT_DIR [MAX_BYTES]
# TARBALL is `git archive` of the nccl-tests release tag (its sha256 is checked against NCCL_TESTS_SHA256);
# MAX_BYTES is nccl-tests' -e spelling (default 8G). Writes into OUT_DIR: one <program>.txt per nccl-tests
# program, collectives.txt and collectives.json (the test case's table and summary), build.log,
# versions.txt (nvcc, NCCL, torch, GPU), nvidia-smi-q.txt (the header of nvidia-smi -q) and commands.txt
# (every command as run). python3 -m bench.nccl_tests_compare turns that directory into the comparison JSON and plot.
#
# Environment: PYTHON (python3), NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), ARCHS (SM versions
# to build, "80 90 100": those this nvcc cannot build are left out), NGPUS (every visible GPU).
set -euo pipefail

NCCL_TESTS_SHA256=${NCCL_TESTS_SHA256:-a93c09241f55985677caa5151caaa8b1fc7cd6dfa40201e2ea1534d3326c983f}
PROGRAMS=(all_reduce_perf all_gather_perf reduce_scatter_perf alltoall_perf)
CASE_OPS=all_reduce,all_gather,reduce_scatter,all_to_all

tarball=${1:?usage: $0 TARBALL OUT_DIR [MAX_BYTES]}
out=${2:?usage: $0 TARBALL OUT_DIR [MAX_BYTES]}
max_bytes=${3:-8G}
python=${PYTHON:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
# NVLink multicast stays off: on shared hosts a program that uses it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
: >"$out/commands.txt"

note() { printf '%s\n' "$*" >>"$out/commands.txt"; }

echo "$NCCL_TESTS_SHA256  $tarball" | sha256sum -c - || {
	echo "$tarball: sha256 differs from NCCL_TESTS_SHA256 ($NCCL_TESTS_SHA256)" >&2
	exit 2
}

# ---------------------------------------------------------------------------------------- toolchain
nvcc=$(command -v "${NVCC:-nvcc}" || true)
nvcc=${nvcc:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || {
	echo "NVCC: no nvcc found (set NVCC to its path)" >&2
	exit 2
}
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
cuda_lib=$cuda_home/lib64
[ -d "$cuda_lib" ] || cuda_lib=$cuda_home/lib

# The NCCL wheel PyTorch loads: headers and libnccl.so.2, but no unversioned libnccl.so to link against.
nccl_root=$("$python" - <<'EOF'
import importlib.util
from pathlib import Path

spec = importlib.util.find_spec("nvidia.nccl")
roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
print(next((str(p) for p in roots if (p / "include" / "nccl.h").is_file()), ""))
EOF
)
[ -n "$nccl_root" ] || {
	echo "PYTHON: $python has no nvidia.nccl package with include/nccl.h (install torch's NCCL wheel)" >&2
	exit 2
}
mkdir -p "$work/nccl/lib"
ln -s "$nccl_root/include" "$work/nccl/include"
ln -s "$nccl_root/lib/libnccl.so.2" "$work/nccl/lib/libnccl.so"
export LD_LIBRARY_PATH=$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

gencode=()
built_archs=()
supported=$("$nvcc" --list-gpu-arch)
for arch in ${ARCHS:-80 90 100}; do
	if grep -qx "compute_$arch" <<<"$supported"; then
		gencode+=("-gencode=arch=compute_$arch,code=sm_$arch")
		built_archs+=("sm_$arch")
	fi
done
[ ${#gencode[@]} -gt 0 ] || {
	echo "ARCHS: nvcc $nvcc builds none of ${ARCHS:-80 90 100}" >&2
	exit 2
}

# ---------------------------------------------------------------------------------------- versions
ngpus=${NGPUS:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
{
	echo "nccl-tests tarball: $(basename "$tarball") sha256 $NCCL_TESTS_SHA256"
	echo "nvcc: $nvcc"
	"$nvcc" --version
	echo "archs: ${built_archs[*]}"
	echo "nccl: $nccl_root/lib/libnccl.so.2"
	"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
		"nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count(),
		"gpu", torch.cuda.get_device_name(0))'
	nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
	echo "cpus: $(nproc)"
} >"$out/versions.txt" 2>&1
nvidia-smi -q | sed -n '1,/^GPU /p;/Product Name/p;/Product Architecture/p;/Driver Version/p' \
	>"$out/nvidia-smi-q.txt" 2>&1 || true
note "# environment: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
note "# environment: LD_LIBRARY_PATH=$nccl_root/lib (the NCCL PyTorch loads)"

# ---------------------------------------------------------------------------------------- build
tar -xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 2 -maxdepth 2 -name Makefile -path '*nccl-tests*' -printf '%h\n' | head -n1)
make_args=(-j"$(nproc)" MPI=0 BUILDDIR="$work/build" NCCL_HOME="$work/nccl" CUDA_HOME="$cuda_home"
	CUDA_LIB="$cuda_lib" NVCC="$nvcc" NVCC_GENCODE="${gencode[*]}")
note "cd <tarball root> && make ${make_args[*]}"
started=$(date +%s)
make -C "$src" "${make_args[@]}" >"$out/build.log" 2>&1 || {
	tail -n 40 "$out/build.log" >&2
	exit 1
}
echo "build seconds: $(($(date +%s) - started))" >>"$out/build.log"

# ---------------------------------------------------------------------------------------- runs
status=0
for program in "${PROGRAMS[@]}"; do
	args=(-b 8 -e "$max_bytes" -f 2 -g "$ngpus")
	note "$program ${args[*]}"
	timeout 300 "$work/build/$program" "${args[@]}" >"$out/$program.txt" 2>&1 || status=1
done
case_args=(--standalone --nproc-per-node "$ngpus" testcases/nccl/collectives/collectives.py --ops "$CASE_OPS"
	--min-bytes 8 --max-bytes "$max_bytes" --step-factor 2 --summary-json "$out/collectives.json")
note "$python -m torch.distributed.run ${case_args[*]}"
(cd "$repo" && timeout 300 "$python" -m torch.distributed.run "${case_args[@]}") >"$out/collectives.txt" 2>&1 ||
	status=1
rm -rf "$work"
exit "$status"
