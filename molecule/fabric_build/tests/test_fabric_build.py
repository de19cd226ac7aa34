"""Verifier for the real aws-ofi-nccl and nccl-tests builds: what the roles compiled from the release sources.

Everything here is real: the sources (`git archive` of each tag, served by scripts/fabric_mirror.py
with the sha256 the stack's lock records), nvcc 13.2 and the CUDA runtime from NVIDIA's PyPI wheels, NCCL
from the stack's nvidia-nccl-cu13 wheel (the nccl role), Debian's libfabric, hwloc and Open MPI. There is no
GPU: the nccl-tests programs run up to the point where they need a CUDA driver, as far as a lab takes them.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "integration" / "fabric"))

from build_checks import (  # noqa: E402
    NCCL_NET_SYMBOLS,
    PLUGIN_NEEDED,
    nccl_net_lookup,
    nccl_tests_header,
    needed,
    release_programs,
    served_source,
    stamp,
)

CURRENT = (REPO / "stacks" / "current").read_text().strip()
STACK = yaml.safe_load((REPO / "stacks" / f"{CURRENT}.yml").read_text())
LOCK = json.loads((REPO / "stacks" / "locks" / f"{CURRENT}.lock.json").read_text())["artifacts"]
VERSIONS = {name: str(comp["version"]) for name, comp in STACK["components"].items()}
# (prefix, built with MPI): the scenario's two builds (molecule.yml, converge.yml).
BUILDS = [("/opt/nccl-tests", True), ("/opt/nccl-tests-nompi", False)]
PLUGIN = "/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so"
HEADER = nccl_tests_header(VERSIONS["nccl_tests"], VERSIONS["nccl"])
PROGRAMS = release_programs(VERSIONS["nccl_tests"])


# ---------------------------------------------------------------- sources


@pytest.mark.parametrize(
    ("artifact", "path"),
    [
        ("nccl-tests-src", "/var/cache/trainstack/nccl-tests/nccl-tests-src"),
        ("aws-ofi-nccl-src", "/var/cache/trainstack/aws-ofi-nccl/aws-ofi-nccl-src"),
    ],
)
def test_release_source_was_the_locked_tag(host, artifact, path):
    assert served_source(host, artifact, LOCK[artifact]["url"], path) == (False, LOCK[artifact]["sha256"])


# ---------------------------------------------------------------- nccl-tests


@pytest.mark.parametrize(("prefix", "mpi"), BUILDS)
def test_every_release_program_is_installed(host, prefix, mpi):
    installed = set(host.check_output(f"ls {prefix}/bin").split())
    assert installed == PROGRAMS


@pytest.mark.parametrize(("prefix", "mpi"), BUILDS)
def test_programs_link_nccl_and_mpi_only_when_built_with_it(host, prefix, mpi):
    # The nccl role's library, through its prefix link (/opt/nvidia/nccl -> nccl-<version>).
    nccl_lib = "/opt/nvidia/nccl/lib/libnccl.so.2"
    real = host.check_output(f"readlink -f {nccl_lib}")
    assert real == f"/opt/nvidia/nccl-{VERSIONS['nccl']}/nvidia/nccl/lib/libnccl.so.2"
    for program in sorted(PROGRAMS):
        ldd = host.check_output(f"ldd {prefix}/bin/{program}")
        assert "not found" not in ldd, program
        assert f"libnccl.so.2 => {nccl_lib}" in ldd, program
        assert ("libmpi.so" in ldd) == mpi, program
        # nccl_tests_cudart: static in this scenario: the CUDA runtime is compiled in.
        assert "libcudart" not in ldd, program


@pytest.mark.parametrize(("prefix", "mpi"), BUILDS)
def test_stamp_names_the_release_sm90_and_its_cache_key(host, prefix, mpi):
    first, key = stamp(host, f"{prefix}/.trainstack-build")
    assert first.startswith(f"nccl-tests {VERSIONS['nccl_tests']} MPI={int(mpi)} ")
    assert "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 CUDARTLIB=cudart_static" in first
    kept = f"/shared/cache/nccl-tests/nccl-tests-{VERSIONS['nccl_tests']}-{key}.tar.gz"
    listing = host.check_output(f"tar -tzf {kept}").split()
    assert sorted(p.rsplit("/", 1)[-1] for p in listing if p.endswith("_perf")) == sorted(PROGRAMS)


def test_program_runs_against_the_stacks_nccl_up_to_the_gpu(host):
    # No GPU and no driver in a lab node: the program gets as far as asking CUDA for its devices.
    run = host.run("/opt/nccl-tests-nompi/bin/all_reduce_perf -b 8 -e 8")
    assert HEADER in run.stdout
    assert run.rc != 0 and "CUDA driver version is insufficient" in run.stdout + run.stderr


@pytest.mark.parametrize(("prefix", "mpi"), BUILDS)
def test_mpi_build_runs_as_one_job_under_mpirun(host, prefix, mpi):
    # Two processes under mpirun: the MPI build is one job of two ranks (only rank 0 prints the header), the
    # other build two separate programs (each prints it). Both ranks then reach CUDA and name their pids.
    run = host.run(f"mpirun --allow-run-as-root --oversubscribe -np 2 {prefix}/bin/all_reduce_perf -b 8 -e 8")
    output = run.stdout + run.stderr
    headers = output.count(HEADER)
    assert headers == (1 if mpi else 2)
    assert len(set(re.findall(r"pid (\d+): Test failure", output))) == 2
    assert run.rc != 0


# ---------------------------------------------------------------- aws-ofi-nccl


def test_plugin_was_built_at_the_pin_without_the_aws_platform(host):
    first, key = stamp(host, "/opt/aws-ofi-nccl/.trainstack-build")
    assert first.startswith(f"aws-ofi-nccl {VERSIONS['aws_ofi_nccl']} --prefix=/opt/aws-ofi-nccl")
    # Debian 12's libfabric is 1.17; the AWS platform needs 1.22 (stacks/rules.yml: aws-ofi-nccl-libfabric).
    assert "--with-libfabric" not in first and "--disable-platform-aws" in first
    assert host.file(
        f"/shared/cache/aws-ofi-nccl/aws-ofi-nccl-{VERSIONS['aws_ofi_nccl']}-{key}.tar.gz"
    ).is_file
    # The version configure took from .release_version is the one the plugin logs when NCCL initialises it.
    strings = host.check_output(f"strings {PLUGIN}").splitlines()
    assert f"NET/OFI Initializing aws-ofi-nccl {VERSIONS['aws_ofi_nccl']}" in strings


def test_plugin_links_only_libfabric_hwloc_and_the_c_and_cxx_runtimes(host):
    entries = needed(host, PLUGIN)
    assert entries and all(PLUGIN_NEEDED.match(name) for name in entries), entries
    assert "libfabric.so.1" in entries
    ldd = host.check_output(f"ldd {PLUGIN}")
    assert "not found" not in ldd
    assert "libfabric.so.1 => /lib/x86_64-linux-gnu/libfabric.so.1" in ldd


def test_nccl_finds_the_plugin_by_both_names_and_its_newest_interface(host):
    # NCCL opens libnccl-net.so by default and libnccl-net-ofi.so for NCCL_NET_PLUGIN=ofi
    # (src/plugin/plugin_open.cc), through the dynamic linker; the first ncclNetPlugin_v* it finds is used.
    assert "libnccl-net.so (libc6,x86-64) => /opt/aws-ofi-nccl/lib/libnccl-net.so" in host.check_output(
        "ldconfig -p"
    )
    lines = nccl_net_lookup(host)
    assert lines == [
        f"libnccl-net.so ncclNetPlugin_v11 Libfabric {len(NCCL_NET_SYMBOLS)}",
        f"libnccl-net-ofi.so ncclNetPlugin_v11 Libfabric {len(NCCL_NET_SYMBOLS)}",
    ]
