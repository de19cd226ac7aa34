"""enroot and pyxis on the lab's Slurm cluster: an image pulled from the lab registry and run in containers.

The enroot_pyxis role builds enroot 4.1.2 and pyxis 0.24.0 from their release sources (served by the lab
mirror, as in the fabric scenario) on the head and both compute nodes, with the lab registry
(http://10.77.0.1:8673, Debian's docker-registry on the host) in ``enroot_pyxis_http_registries``. A real
image with a shell (probe_image.py: Debian's busybox-static) is built with buildah and pushed there. Then, on
the LXC nodes: ``enroot import`` over HTTP from that registry (and HTTPS for the same server under a name the
role does not list), ``enroot create`` + ``enroot start`` running a shell in the container, and pyxis through
Slurm: ``srun -N2 --container-image`` on both compute nodes, with ``--container-mounts`` of the lab's shared
directory. Everything the role installed is removed afterwards: the lab's other tests find the nodes as they
were (the node bootstrap tests, for one, apply enroot_pyxis only where enroot is installed).

Slow (marked ``slow``): the role's packages and, on a cold cache, enroot's build (about a minute).
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import fabric_mirror as mirror
from scripts import lab_registry
from tests.integration.fabric import probe_image
from tests.support import (
    REPO,
    VENV_BIN,
    lab_node_state,
    lab_ssh,
    on_lab_node,
    restore_lab_node,
    run,
)

pytestmark = [pytest.mark.lab, pytest.mark.slow]

BRIDGE = "10.77.0.1"
HEAD, COMPUTE1, COMPUTE2 = "10.77.0.11", "10.77.0.12", "10.77.0.13"
NODES = (HEAD, COMPUTE1, COMPUTE2)
# Not the fabric scenario's port (8671): its mirror may be up at the same time.
MIRROR_PORT = 8674
LOCK_ON_NODE = "/var/cache/trainstack/enroot-lab.lock.json"
# The lab's shared directory on the host; /shared on the nodes.
SHARED = Path("/var/lib/trainstack/lab/shared")
STORAGE = "/scratch/enroot"
# What the role (and these tests) may create on a node; what was absent before is removed after.
CREATED_PATHS = [
    "/usr/bin/enroot",
    "/usr/bin/enroot-aufs2ovlfs",
    "/usr/bin/enroot-makeself",
    "/usr/bin/enroot-mksquashovlfs",
    "/usr/bin/enroot-mount",
    "/usr/bin/enroot-nsenter",
    "/usr/bin/enroot-switchroot",
    "/usr/lib/enroot",
    "/usr/libexec/enroot",
    "/usr/share/enroot",
    "/etc/enroot",
    "/usr/local/lib/slurm/spank_pyxis.so",
    "/usr/local/share/pyxis",
    "/etc/slurm/plugstack.conf.d/pyxis.conf",
    "/usr/local/sbin/trainstack-enroot-prune",
    "/etc/systemd/system/trainstack-enroot-prune.service",
    "/etc/systemd/system/trainstack-enroot-prune.timer",
    "/var/cache/trainstack/enroot-pyxis",
    LOCK_ON_NODE,
    STORAGE,
    "/run/enroot",
    "/run/pyxis",
    "/root/.local/share/enroot",
    "/root/.cache/enroot",
]
PARENT_DIRS = ["/scratch", "/usr/local/lib/slurm", "/usr/local/share", "/var/cache/trainstack"]


def _role_packages() -> tuple[str, ...]:
    """The packages the role installs on Debian 12 (its vars file), purged again where they were absent."""
    import yaml

    names = yaml.safe_load((REPO / "roles" / "enroot_pyxis" / "vars" / "debian-12.yml").read_text())
    return tuple(names["__enroot_pyxis_build_packages"] + names["__enroot_pyxis_runtime_packages"])


PACKAGES = _role_packages()


@pytest.fixture(scope="module")
def registry(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The lab registry on the bridge (Debian's docker-registry), started for this module: its URL."""
    directory = tmp_path_factory.mktemp("enroot-registry")
    url = lab_registry.start(directory)
    try:
        yield url
    finally:
        lab_registry.stop(directory)


@pytest.fixture(scope="module")
def image(registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The probe image in the lab registry: its buildah and enroot references."""
    return probe_image.push(f"{registry}/lab", tmp_path_factory.mktemp("enroot-probe"))


@pytest.fixture(scope="module")
def source_mirror(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The lab mirror of enroot's and pyxis' release sources: (URL, lock file)."""
    directory = tmp_path_factory.mktemp("enroot-mirror")
    mirror.build(mirror.current_stack_file(), directory)
    mirror.serve(directory, BRIDGE, MIRROR_PORT)
    try:
        yield f"http://{BRIDGE}:{MIRROR_PORT}", directory / "lock.json"
    finally:
        mirror.stop(directory)


@pytest.fixture(scope="module")
def enroot_nodes(slurm_lab: None, source_mirror: tuple[str, Path], image: dict[str, str]) -> Iterator[None]:
    """The role applied to the head and compute nodes; afterwards every node as it was before."""
    before = {address: lab_node_state(address, CREATED_PATHS + PARENT_DIRS, PACKAGES) for address in NODES}
    url, lock = source_mirror
    try:
        run(
            [
                str(VENV_BIN / "ansible-playbook"),
                "-i",
                "inventories/local",
                str(Path(__file__).with_name("enroot_lab.yml")),
                "-e",
                f"enroot_lab_lock_file={lock}",
                "-e",
                f"artifact_mirror_url={url}",
                "-e",
                f"artifact_lock_file={LOCK_ON_NODE}",
                "-e",
                f"enroot_pyxis_storage_dir={STORAGE}",
                # The lab's shared mount: enroot is built once per set of inputs, not once per run.
                "-e",
                "enroot_pyxis_build_cache_dir=/shared/cache/enroot-pyxis",
                # No efa role here: no job environment file to hand the containers.
                "-e",
                "enroot_pyxis_environment_file=",
                "-e",
                '{"enroot_pyxis_http_registries": ["' + image["enroot"].split("#")[0] + '"]}',
            ],
            timeout=1800,
        )
        yield
    finally:
        for address, state in before.items():
            on_lab_node(
                "systemctl disable --now trainstack-enroot-prune.timer 2>/dev/null; "
                "rm -rf /run/pyxis/* /run/enroot/* 2>/dev/null; true",
                address,
                check=False,
            )
            restore_lab_node(address, state, CREATED_PATHS, PARENT_DIRS, PACKAGES)
            # slurmd loaded pyxis when the role restarted it: a restart leaves it as the plugstack now says.
            on_lab_node(
                "systemctl daemon-reload; systemctl try-restart slurmd; systemctl reset-failed; true",
                address,
                check=False,
            )


def _on(address: str, command: str, timeout: int = 300) -> tuple[int, str]:
    proc = lab_ssh(address, command, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def squashfs(enroot_nodes: None, image: dict[str, str]) -> str:
    """The probe image imported on the first compute node (the import test asserts on it)."""
    path = f"{STORAGE}/tmp/probe.sqsh"
    _on(COMPUTE1, f"rm -f {path}; enroot import --output {path} docker://{image['enroot']}")
    return path


def test_enroot_imports_from_the_lab_registry_over_http(squashfs: str, image: dict[str, str]) -> None:
    """enroot talks plain HTTP to the registry the role names (the probe's layers land in a squashfs)."""
    listing = on_lab_node(f"unsquashfs -l {squashfs}", COMPUTE1)
    assert "squashfs-root/bin/busybox" in listing
    assert "squashfs-root/etc/os-release" in listing


def test_enroot_keeps_https_for_other_registries(enroot_nodes: None, image: dict[str, str]) -> None:
    """The same server under another spelling of its address (10.77.1 is 10.77.0.1 to curl) is not in
    enroot_pyxis_http_registries: enroot speaks TLS to it, which the plain-HTTP registry cannot answer."""
    other = image["enroot"].replace(f"{BRIDGE}:", "10.77.1:", 1)
    code, output = _on(COMPUTE1, f"enroot import --output {STORAGE}/tmp/other.sqsh docker://{other}")
    assert code != 0
    assert "SSL" in output or "TLS" in output, output[-2000:]


def test_enroot_starts_a_shell_in_the_image(squashfs: str) -> None:
    """enroot create unpacks the image; enroot start runs its shell in new user and mount namespaces on the
    LXC node: /etc/os-release is the image's, the hostname the node's (enroot keeps the UTS namespace)."""
    script = "cat /etc/os-release; echo host=$(hostname); readlink /proc/self/ns/mnt"
    command = (
        f"enroot remove -f probe >/dev/null 2>&1; enroot create --name probe {squashfs} >/dev/null && "
        f"enroot start probe sh -c {shlex.quote(script)}; status=$?; enroot remove -f probe; exit $status"
    )
    code, output = _on(COMPUTE1, command)
    assert code == 0, output[-3000:]
    assert "ID=trainstack-enroot-probe" in output
    assert "host=ts-compute1" in output
    assert on_lab_node("readlink /proc/self/ns/mnt", COMPUTE1) not in output


def test_pyxis_runs_the_image_on_both_compute_nodes(enroot_nodes: None, image: dict[str, str]) -> None:
    """srun on the head node, pyxis on each compute node imports the image through enroot and runs in it."""
    script = "cat /etc/os-release; echo host=$(hostname)"
    code, output = _on(
        HEAD,
        f"srun -N2 --ntasks-per-node=1 --container-image={image['enroot']} sh -c {shlex.quote(script)}",
        timeout=600,
    )
    assert code == 0, output[-3000:]
    assert output.count("ID=trainstack-enroot-probe") == 2, output
    assert {"host=ts-compute1", "host=ts-compute2"} <= set(output.split())


def test_pyxis_mounts_the_shared_directory(enroot_nodes: None, image: dict[str, str]) -> None:
    """--container-mounts puts the lab's shared directory into each container, readable and writable."""
    token = uuid.uuid4().hex
    probe = SHARED / f"enroot-mount-{token}"
    probe.mkdir()
    (probe / "from-host").write_text(token)
    try:
        script = "cat /data/from-host && hostname > /data/from-$(hostname)"
        code, output = _on(
            HEAD,
            f"srun -N2 --ntasks-per-node=1 --container-image={image['enroot']} "
            f"--container-mounts=/shared/{probe.name}:/data sh -c {shlex.quote(script)}",
            timeout=600,
        )
        assert code == 0, output[-3000:]
        assert output.count(token) == 2, output
        assert (probe / "from-ts-compute1").read_text().strip() == "ts-compute1"
        assert (probe / "from-ts-compute2").read_text().strip() == "ts-compute2"
    finally:
        for path in probe.iterdir():
            path.unlink()
        probe.rmdir()
