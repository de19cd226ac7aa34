"""Verifier for the fabric and storage roles: effective state inside the node, against the stack's pins.

Built for real from their release sources (the mirror serves the upstream tags' tarballs with the sha256 the
stack's lock records): aws-ofi-nccl, nccl-tests, enroot and pyxis. The one stand-in (named as such, see
docs/fabric.md) is the EFA installer, which installs Debian's rdma-core, libfabric and Open MPI where the real
one puts its own. Everything else is real: CUDA 13.2 from NVIDIA's PyPI wheels, the stack's NCCL wheel, Slurm,
apt, systemd and PAM. There is no GPU: the nccl-tests programs run up to their first CUDA call.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".cache" / "collections"))
sys.path.insert(0, str(REPO / "tests" / "integration" / "fabric"))

from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix  # noqa: E402
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
RULES = yaml.safe_load((REPO / "stacks" / "rules.yml").read_text())["rules"]
VERSIONS = {name: str(comp["version"]) for name, comp in STACK["components"].items()}
LOCK = json.loads((REPO / "stacks" / "locks" / f"{CURRENT}.lock.json").read_text())["artifacts"]
PLUGIN = "/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so"


def _env_file(host) -> dict[str, str]:
    lines = host.file("/etc/trainstack/fabric.env").content_string.splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


# ---------------------------------------------------------------- efa


def test_pinned_installer_ran_with_the_roles_switches(host):
    record = host.file("/opt/amazon/efa_installed_packages").content_string
    assert f"# EFA installer version: {VERSIONS['efa_installer']}\n" in record
    assert "Stand-in" in record
    # --skip-kmod (container), --skip-limit-conf (the role owns the limits), --no-verify (no device here).
    assert "skip_kmod=1 skip_limit_conf=1 verify=0 enable_gdr=0" in record


def test_installer_came_through_the_artifact_layer_verified(host):
    lock = json.loads(host.file("/var/cache/trainstack/fabric-mirror.lock.json").content_string)
    digest = lock["artifacts"]["aws-efa-installer"]["sha256"]
    name = f"aws-efa-installer-{VERSIONS['efa_installer']}.tar.gz"
    tarball = f"/var/cache/trainstack/efa/aws-efa-installer/{name}"
    assert host.check_output(f"sha256sum {tarball}").split()[0] == digest


def test_libfabric_is_found_in_the_efa_prefix(host):
    out = host.check_output("ldconfig -p")
    assert "libfabric.so.1 (libc6,x86-64) => /opt/amazon/efa/lib/libfabric.so.1" in out
    version = host.run("/opt/amazon/efa/bin/fi_info --version").stdout
    assert version.startswith("/opt/amazon/efa/bin/fi_info: 1.")


def test_no_efa_device_so_provider_check_would_fail(host):
    # The role runs fi_info -p efa only where a device exists; here none does, and fi_info says so.
    assert not host.file("/sys/class/infiniband").exists or not host.run("ls /sys/class/infiniband").stdout
    assert host.run("/opt/amazon/efa/bin/fi_info -p efa").rc != 0


def test_memlock_limit_for_sessions_and_services(host):
    assert host.check_output("runuser -l root -c 'ulimit -l'") == "4096"
    assert host.check_output("systemd-run --wait --pipe --quiet sh -c 'ulimit -l'") == "4096"
    assert not host.file("/etc/ld.so.conf.d/100_ofinccl.conf").contains("/opt/amazon/ofi-nccl")


def test_huge_pages_written_for_boot(host):
    lines = host.file("/etc/sysctl.d/91-efa-hugepages.conf").content_string.splitlines()
    assert "vm.nr_hugepages=16" in [line.replace(" ", "") for line in lines]


def test_job_environment_is_the_rules(host):
    expected = stack_matrix.environment(STACK, RULES, "ubuntu-24.04", "x86_64", "g5")
    assert _env_file(host) == expected
    assert "FI_EFA_USE_DEVICE_RDMA" not in expected and expected["FI_PROVIDER"] == "efa"


def test_login_shell_gets_the_environment_without_preload(host):
    probe = "$FI_PROVIDER|${FI_EFA_USE_DEVICE_RDMA-unset}|${LD_PRELOAD-unset}"
    out = host.check_output(f"bash -lc 'echo \"{probe}\"'")
    assert out == "efa|unset|unset"
    # A value the user exported first wins.
    assert host.check_output("FI_PROVIDER=tcp bash -lc 'echo $FI_PROVIDER'") == "tcp"


# ---------------------------------------------------------------- aws-ofi-nccl


def test_plugin_is_found_by_nccls_search_path(host):
    out = host.check_output("ldconfig -p")
    assert "libnccl-net.so (libc6,x86-64) => /opt/aws-ofi-nccl/lib/libnccl-net.so" in out
    assert host.file("/etc/ld.so.conf.d/100_ofinccl.conf").content_string == "/opt/aws-ofi-nccl/lib\n"


@pytest.mark.parametrize(
    ("artifact", "path"),
    [
        ("aws-ofi-nccl-src", "/var/cache/trainstack/aws-ofi-nccl/aws-ofi-nccl-src"),
        ("nccl-tests-src", "/var/cache/trainstack/nccl-tests/nccl-tests-src"),
    ],
)
def test_release_source_was_the_locked_tag(host, artifact, path):
    assert served_source(host, artifact, LOCK[artifact]["url"], path) == (False, LOCK[artifact]["sha256"])


def test_plugin_was_built_at_the_pin_against_the_efa_libfabric(host):
    first, key = stamp(host, "/opt/aws-ofi-nccl/.trainstack-build")
    assert first.startswith(f"aws-ofi-nccl {VERSIONS['aws_ofi_nccl']} --prefix=/opt/aws-ofi-nccl")
    # The EFA layout's libfabric is Debian's 1.17 here; the AWS platform needs 1.22 (aws-ofi-nccl-libfabric).
    assert "--with-libfabric=/opt/amazon/efa" in first and "--disable-platform-aws" in first
    assert host.file(
        f"/shared/cache/aws-ofi-nccl/aws-ofi-nccl-{VERSIONS['aws_ofi_nccl']}-{key}.tar.gz"
    ).is_file
    ldd = host.check_output(f"ldd {PLUGIN}")
    assert "not found" not in ldd
    assert "libfabric.so.1 => /opt/amazon/efa/lib/libfabric.so.1" in ldd
    entries = needed(host, PLUGIN)
    assert "libfabric.so.1" in entries and all(PLUGIN_NEEDED.match(name) for name in entries), entries


def test_nccl_loads_the_plugin_by_both_names(host):
    # The release's version, as configure read it, is what NCCL logs when it initialises the plugin.
    strings = host.check_output(f"strings {PLUGIN}").splitlines()
    assert f"NET/OFI Initializing aws-ofi-nccl {VERSIONS['aws_ofi_nccl']}" in strings
    assert nccl_net_lookup(host) == [
        f"libnccl-net.so ncclNetPlugin_v11 Libfabric {len(NCCL_NET_SYMBOLS)}",
        f"libnccl-net-ofi.so ncclNetPlugin_v11 Libfabric {len(NCCL_NET_SYMBOLS)}",
    ]


# ---------------------------------------------------------------- nccl-tests


def test_every_release_program_is_built_with_mpi_against_the_stacks_nccl(host):
    first, key = stamp(host, "/opt/nccl-tests/.trainstack-build")
    assert first.startswith(f"nccl-tests {VERSIONS['nccl_tests']} MPI=1 ")
    assert "MPI_HOME=/opt/amazon/openmpi" in first
    assert "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 CUDARTLIB=cudart_static" in first
    programs = release_programs(VERSIONS["nccl_tests"])
    assert set(host.check_output("ls /opt/nccl-tests/bin").split()) == programs
    tarball = f"/shared/cache/nccl-tests/nccl-tests-{VERSIONS['nccl_tests']}-{key}.tar.gz"
    kept = host.check_output(f"tar -tzf {tarball}")
    assert {path.rsplit("/", 1)[-1] for path in kept.split() if path.endswith("_perf")} == programs
    for program in sorted(programs):
        ldd = host.check_output(f"ldd /opt/nccl-tests/bin/{program}")
        assert "not found" not in ldd, program
        assert "libnccl.so.2 => /opt/nvidia/nccl/lib/libnccl.so.2" in ldd, program
        assert "libmpi.so" in ldd and "libcudart" not in ldd, program


def test_nccl_tests_run_as_one_mpi_job_up_to_the_gpu(host):
    # Two ranks of one job: rank 0 alone prints the header (the stack's NCCL, headers and library); both then
    # reach CUDA, which has no driver in a lab node, and name their pids.
    run = host.run(
        "mpirun --allow-run-as-root --oversubscribe -np 2 /opt/nccl-tests/bin/all_reduce_perf -b 8 -e 8"
    )
    output = run.stdout + run.stderr
    assert output.count(nccl_tests_header(VERSIONS["nccl_tests"], VERSIONS["nccl"])) == 1
    assert len(set(re.findall(r"pid (\d+): Test failure", output))) == 2
    assert run.rc != 0


# ---------------------------------------------------------------- enroot + pyxis


def test_enroot_pinned_version_built_from_source(host):
    assert host.check_output("enroot version") == VERSIONS["enroot"]
    assert host.check_output("command -v enroot") == "/usr/bin/enroot"
    # Built here, not installed from a package: no dpkg entry, and the build's key recorded.
    assert not host.package("enroot").is_installed
    assert len(host.file("/usr/share/enroot/.trainstack-build").content_string.strip()) == 16
    # Its helpers are the static musl builds of the release (no dynamic loader to resolve in a container).
    for helper in (
        "enroot-switchroot",
        "enroot-nsenter",
        "enroot-mount",
        "enroot-aufs2ovlfs",
        "enroot-mksquashovlfs",
    ):
        headers = host.check_output(f"readelf -lW /usr/bin/{helper}")
        assert "DYN" in headers and "INTERP" not in headers, helper  # static PIE
    # The build is kept under its key in the shared cache, for the next run with the same inputs.
    key = host.file("/usr/share/enroot/.trainstack-build").content_string.strip()
    assert host.file(f"/shared/cache/enroot-pyxis/enroot-{VERSIONS['enroot']}-{key}.tar.gz").is_file


def test_enroot_storage_on_scratch(host):
    conf = host.file("/etc/enroot/enroot.conf").content_string
    assert "ENROOT_CACHE_PATH /scratch/enroot/cache/group-$(id -g)\n" in conf
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)\n" in conf
    assert "ENROOT_TEMP_PATH /scratch/enroot/tmp\n" in conf
    for sub in ("cache", "data", "tmp"):
        assert host.file(f"/scratch/enroot/{sub}").mode == 0o1777


def test_containers_get_the_job_environment(host):
    environ = host.file("/etc/enroot/environ.d/50-trainstack-fabric.env").content_string.splitlines()
    assert dict(line.split("=", 1) for line in environ) == _env_file(host)


def test_pruner_keeps_the_cache_under_its_cap(host):
    assert host.service("trainstack-enroot-prune.timer").is_enabled
    assert host.service("trainstack-enroot-prune.timer").is_running
    root = "/scratch/enroot/prune-test"
    host.check_output(
        f"rm -rf {root} && mkdir -p {root}/cache {root}/data/user-0/old {root}/data/user-0/new && "
        f'for i in 1 2 3 4; do head -c 1048576 /dev/zero > {root}/cache/layer$i; touch -d "$i hours ago" '
        f"{root}/cache/layer$i; done && touch -d '10 days ago' {root}/data/user-0/old"
    )
    out = host.check_output(f"/usr/local/sbin/trainstack-enroot-prune {root}/cache 2100 {root}/data 7")
    left = sorted(host.check_output(f"ls {root}/cache").split())
    # Oldest first: layer4 (4 h) and layer3 (3 h) go, the newest two fit in 2100 KiB.
    assert left == ["layer1", "layer2"], out
    assert not host.file(f"{root}/data/user-0/old").exists
    assert host.file(f"{root}/data/user-0/new").exists
    host.check_output(f"rm -rf {root}")


def test_pyxis_built_and_in_plugstack(host):
    assert host.file("/usr/local/lib/slurm/spank_pyxis.so").exists
    entry = host.file("/etc/slurm/plugstack.conf.d/pyxis.conf").content_string.splitlines()[-1]
    args = "runtime_path=/run/pyxis container_scope=job execute_entrypoint=0"
    assert entry == f"required /usr/local/lib/slurm/spank_pyxis.so {args}"
    plugstack = host.file("/etc/slurm/plugstack.conf").content_string
    assert plugstack == "include /etc/slurm/plugstack.conf.d/*.conf\n"


def test_slurm_loads_pyxis_through_the_plugstack(host):
    """pyxis' own options in srun's help: Slurm loaded the real plugin, built against its headers."""
    help_text = host.check_output("srun --help")
    assert "--container-image" in help_text and "--container-mounts" in help_text
    strings = host.check_output("strings /usr/local/lib/slurm/spank_pyxis.so")
    assert f"pyxis: version v{VERSIONS['pyxis']}" in strings


# ---------------------------------------------------------------- storage


def test_scratch_without_instance_store_is_a_directory(host):
    scratch = host.file("/scratch")
    assert scratch.is_directory and scratch.mode == 0o1777
    assert json.loads(host.file("/etc/trainstack/nvme-scratch.json").content_string)["discover"] is False
    assert host.service("trainstack-nvme-scratch").is_enabled
    result = json.loads(host.check_output("/usr/local/sbin/trainstack-nvme-scratch"))
    assert result == {"devices": [], "actions": [], "changed": False}


FSX = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdef12"


@pytest.mark.parametrize("field", [FSX, "/fsx", "lustre"])
def test_lustre_fstab_entry(host, field):
    line = next(ln for ln in host.file("/etc/fstab").content_string.splitlines() if " /fsx " in ln)
    assert field in line.split()
    assert "_netdev" in line.split()[3].split(",")
    assert host.file("/fsx").is_directory
