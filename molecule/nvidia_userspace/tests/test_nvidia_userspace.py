"""Verifier for nccl, cuda, dcgm and container_runtime on one lab node.

NCCL is the real library from the stack's PyPI wheel: a C program (no -L at run time) finds it through
the linker cache and must read the stack's version from ncclGetVersion (no GPU needed for that call). CUDA,
DCGM and the container toolkit come from STAND-IN packages in signed local repositories (standin_repo.py):
what is checked for them is the roles' work — repository, pinned versions, holds, links, profile, units and
engine configuration read back by the real containerd — not NVIDIA's binaries.

Node ts-m-nvidia-userspace-2 takes NCCL from the signed local repository (libnccl2/libnccl-dev repackaged
from the same wheel) and installs nothing else; tests of the other roles skip it.
"""

import json
from pathlib import Path

import pytest
import yaml

STACKS = Path(__file__).resolve().parents[3] / "stacks"
STACK = yaml.safe_load((STACKS / f"{(STACKS / 'current').read_text().strip()}.yml").read_text())
NCCL_VERSION = STACK["components"]["nccl"]["version"]
TOOLKIT_VERSION = "1.20.1"
REPO_NODE = "ts-m-nvidia-userspace-2"
WHEEL_LIB = "/opt/nvidia/nccl/lib/libnccl.so.2"
WHEEL_REAL = f"/opt/nvidia/nccl-{NCCL_VERSION}/nvidia/nccl/lib/libnccl.so.2"
REPO_LIB = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"

PROGRAM = r"""
#include <dlfcn.h>
#include <stdio.h>
int ncclGetVersion(int *version);
static void show(const char *how, int v) { printf("%s %d.%d.%d\n", how, v / 10000, v / 100 % 100, v % 100); }
int main(void) {
  int linked = 0, opened = 0;
  if (ncclGetVersion(&linked) != 0) return 2;
  show("linked", linked);
  void *lib = dlopen("libnccl.so.2", RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  int (*get)(int *) = (int (*)(int *))dlsym(lib, "ncclGetVersion");
  if (!get || get(&opened) != 0) return 4;
  show("dlopen", opened);
  return 0;
}
"""


def _repo_node(host) -> bool:
    return host.backend.get_hostname() == REPO_NODE


@pytest.fixture
def wheel_node(host):
    if _repo_node(host):
        pytest.skip(f"{REPO_NODE} has only NCCL from the repository")
    return host


def test_nccl_in_linker_cache(host):
    cache = host.check_output("/sbin/ldconfig -p")
    entries = [
        line.split(" => ")[1] for line in cache.splitlines() if line.strip().startswith("libnccl.so.2 ")
    ]
    assert len(entries) == 1, entries
    if _repo_node(host):
        # Merged /usr: the cache may list /lib/x86_64-linux-gnu; it must be the package's file.
        assert host.check_output(f"readlink -f {entries[0]}") == REPO_LIB
    else:
        assert entries[0] == WHEEL_LIB


def test_nccl_version_from_a_program(host):
    host.check_output(f"cat > /tmp/nccl_version.c <<'EOF'\n{PROGRAM}\nEOF")
    # -L only for the link step; at run time the loader must find libnccl.so.2 by itself (no LD_LIBRARY_PATH).
    host.check_output("bash -lc 'gcc /tmp/nccl_version.c -o /tmp/nccl_version -L$NCCL_HOME/lib -lnccl -ldl'")
    out = host.check_output("env -u LD_LIBRARY_PATH -u LD_PRELOAD /tmp/nccl_version")
    assert out.splitlines() == [f"linked {NCCL_VERSION}", f"dlopen {NCCL_VERSION}"]
    linked = host.check_output("ldd /tmp/nccl_version | awk '/libnccl/ {print $3}'")
    assert host.check_output(f"readlink -f {linked}") == (REPO_LIB if _repo_node(host) else WHEEL_REAL)


def test_nccl_record_from_repository(host):
    if not _repo_node(host):
        pytest.skip("wheel node: see test_nccl_headers_and_record")
    record = json.loads(host.file("/etc/trainstack/nccl.json").content_string)
    assert (record["source"], record["home"], record["library"]) == ("nvidia_repo", "/usr", REPO_LIB)
    assert host.package("libnccl2").version == f"{NCCL_VERSION}-1+cuda13.0"
    assert {"libnccl2", "libnccl-dev"} <= set(host.check_output("apt-mark showhold").split())
    assert not host.file("/opt/nvidia/nccl").exists


def test_nccl_headers_and_record(wheel_node):
    host = wheel_node
    assert host.file("/opt/nvidia/nccl/include/nccl.h").is_file
    record = json.loads(host.file("/etc/trainstack/nccl.json").content_string)
    assert record == {
        "version": NCCL_VERSION,
        "source": "wheel",
        "cuda_major": 13,
        "home": "/opt/nvidia/nccl",
        "lib_dir": "/opt/nvidia/nccl/lib",
        "include_dir": "/opt/nvidia/nccl/include",
        "library": "/opt/nvidia/nccl/lib/libnccl.so.2",
    }
    assert host.file("/opt/nvidia/nccl").linked_to == f"/opt/nvidia/nccl-{NCCL_VERSION}"


def test_no_preload_and_wheel_dropped(wheel_node):
    host = wheel_node
    assert not host.file("/etc/ld.so.preload").exists
    assert "LD_" not in host.file("/etc/profile.d/trainstack-nccl.sh").content_string
    assert host.run("find /var/cache/trainstack/artifacts -name '*.whl' | grep -q .").rc == 1


def test_cuda_toolkits_side_by_side(wheel_node):
    host = wheel_node
    assert host.file("/usr/local/cuda-13.2").is_directory
    assert host.file("/usr/local/cuda-12.9").is_directory
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-13.2"
    # The profile puts the default toolkit first on a login shell's PATH (stand-in nvcc prints its release).
    assert "release 13.2," in host.check_output("bash -lc 'nvcc --version'")
    assert host.check_output("bash -lc 'echo $CUDA_HOME'") == "/usr/local/cuda"


def test_vendor_repositories_signed_and_packages_pinned(wheel_node):
    host = wheel_node
    sources = host.file("/etc/apt/sources.list.d/trainstack-nvidia-cuda.list").content_string
    assert "signed-by=/usr/share/keyrings/trainstack-nvidia-cuda.asc" in sources
    assert host.package("datacenter-gpu-manager-4-cuda13").version == "1:4.7.0-1~standin"
    assert host.package("nvidia-container-toolkit").version == f"{TOOLKIT_VERSION}-1~standin"
    held = set(host.check_output("apt-mark showhold").split())
    assert {
        "cuda-toolkit-13-2",
        "cuda-toolkit-12-9",
        "datacenter-gpu-manager-4-cuda13",
        "libnvidia-container1",
    } <= held


@pytest.mark.parametrize(
    ("unit", "needle"),
    [("nvidia-dcgm", "-p 5600"), ("dcgm-exporter", "--address ${TRAINSTACK_CLUSTER_ADDRESS}:9500")],
)
def test_dcgm_units_enabled_with_ports(wheel_node, unit, needle):
    host = wheel_node
    assert host.run(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
    assert needle in host.check_output(f"systemctl show -p ExecStart --value {unit}")


def test_containerd_runs_with_nvidia_runtime(wheel_node):
    host = wheel_node
    assert host.service("containerd").is_running
    dumped = host.check_output("containerd config dump")
    assert 'default_runtime_name = "nvidia"' in dumped
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dumped
