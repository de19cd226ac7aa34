"""Verifier for the fabric and storage roles: effective state inside the node, against the stack's pins.

Built for real from their release sources (the mirror serves the upstream tags' tarballs): enroot and pyxis.
Stand-ins (named as such, see docs/fabric.md): the EFA installer (installs Debian's rdma-core, libfabric and
Open MPI) and the aws-ofi-nccl and nccl-tests sources (small builds with the real interfaces, compiled
against the real libraries). Everything they are built against, and Slurm, apt, systemd and PAM, is real.
"""

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.module_utils import stack_matrix  # noqa: E402

CURRENT = (REPO / "stacks" / "current").read_text().strip()
STACK = yaml.safe_load((REPO / "stacks" / f"{CURRENT}.yml").read_text())
RULES = yaml.safe_load((REPO / "stacks" / "rules.yml").read_text())["rules"]
VERSIONS = {name: str(comp["version"]) for name, comp in STACK["components"].items()}


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


def test_plugin_was_built_at_the_pin_against_the_efa_libfabric(host):
    stamp = host.file("/opt/aws-ofi-nccl/.trainstack-build").content_string
    assert stamp.startswith(f"aws-ofi-nccl {VERSIONS['aws_ofi_nccl']} --prefix=/opt/aws-ofi-nccl")
    assert "--with-libfabric=/opt/amazon/efa" in stamp and "--disable-platform-aws" in stamp
    ldd = host.check_output("ldd /opt/aws-ofi-nccl/lib/libnccl-net-ofi.so")
    assert "libfabric.so.1 => /opt/amazon/efa/lib/libfabric.so.1" in ldd


def test_plugin_loads_and_reports_the_libfabric_it_links(host):
    code = (
        "import ctypes; lib = ctypes.CDLL('libnccl-net.so'); "
        "v = lib.trainstack_standin_fi_version(); print(f'{v >> 16}.{v & 0xffff}')"
    )
    loaded = host.check_output(f'python3 -c "{code}"')
    fi_info = host.check_output("/opt/amazon/efa/bin/fi_info --version").splitlines()[1]
    assert fi_info.startswith(f"libfabric: {loaded}.")


# ---------------------------------------------------------------- nccl-tests


def test_nccl_tests_built_with_mpi(host):
    stamp = host.file("/opt/nccl-tests/.trainstack-build").content_string
    assert stamp.startswith(f"nccl-tests {VERSIONS['nccl_tests']} MPI=1 ")
    assert "MPI_HOME=/opt/amazon/openmpi" in stamp
    assert "libmpi.so" in host.check_output("ldd /opt/nccl-tests/bin/all_reduce_perf")


def test_nccl_tests_run_under_mpirun(host):
    out = host.check_output(
        "mpirun --allow-run-as-root --oversubscribe -np 2 /opt/nccl-tests/bin/all_reduce_perf"
    )
    assert "rank 0 of 2" in out and "rank 1 of 2" in out


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
