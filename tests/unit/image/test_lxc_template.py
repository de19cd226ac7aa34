"""The local build's LXC template: the container's CPU weight, and a bad weight refused before any work.

The template is run as lxc-create runs it, against a cached root filesystem tarball made here (so no
debootstrap), and the container config it writes is read back.
"""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support import REPO

TEMPLATE = REPO / "packer" / "lxc" / "lxc-trainstack-debian"
SUITE, MIRROR, PACKAGES = "bookworm", "http://deb.debian.org/debian", "standin-package"


def _cached_rootfs(cache: Path) -> None:
    """The tarball the template reuses, under the name its cache key gives (suite, mirror, packages, arch)."""
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(f"{SUITE}|{MIRROR}|{PACKAGES}|{arch.strip()}".encode()).hexdigest()[:12]
    tree = cache / "tree"
    for sub in ("usr/sbin", "etc/apt"):
        (tree / sub).mkdir(parents=True)
    with tarfile.open(cache / f"rootfs-{SUITE}-{arch.strip()}-{key}.tar", "w") as tar:
        tar.add(tree, arcname=".")


def _template(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cache = tmp_path / "cache"
    if not cache.exists():
        cache.mkdir()
        _cached_rootfs(cache)
    (tmp_path / "ct").mkdir(exist_ok=True)
    (tmp_path / "ct" / "config").write_text("lxc.net.0.type = veth\n")
    argv = ["bash", str(TEMPLATE), "--path", str(tmp_path / "ct"), "--name", "ts-standin-build"]
    argv += ["--cache-dir", str(cache), "--packages", PACKAGES, *extra]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _expected_line(weight: int) -> str:
    """The line for this host's hierarchy: cgroup v1's cpu shares (1024 scale) or cgroup v2's cpu.weight."""
    if Path("/sys/fs/cgroup/cpu").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return f"lxc.cgroup.cpu.shares = {round(weight * 1024 / 100)}"
    return f"lxc.cgroup2.cpu.weight = {weight}"


@pytest.mark.parametrize("weight", [25, 100])
def test_the_build_container_gets_the_cpu_weight_asked_for(tmp_path: Path, weight: int) -> None:
    extra = ["--cpu-weight", str(weight)] if weight != 100 else []
    proc = _template(tmp_path, *extra)
    assert proc.returncode == 0, proc.stderr
    config = (tmp_path / "ct" / "config").read_text()
    assert _expected_line(weight) in config.splitlines()
    assert "lxc.net.0.type = none" in config and "veth" not in config


@pytest.mark.parametrize("weight", ["0", "10001", "low"])
def test_a_bad_cpu_weight_is_refused_before_anything_is_made(tmp_path: Path, weight: str) -> None:
    proc = _template(tmp_path, "--cpu-weight", weight)
    assert proc.returncode == 1
    assert f"--cpu-weight={weight} must be 1..10000" in proc.stderr
    assert not (tmp_path / "ct" / "rootfs").exists()
    assert (tmp_path / "ct" / "config").read_text() == "lxc.net.0.type = veth\n"


def test_print_base_key_names_the_tarball_the_template_caches() -> None:
    """The stage keys chain from this key (scripts/image_stages.py asks the template for it): it must be the
    one the cached tarball is named by, for the same suite, mirror and packages."""
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    key = hashlib.sha256(f"{SUITE}|{MIRROR}|{PACKAGES}|{arch}".encode()).hexdigest()[:12]
    argv = [
        "bash",
        str(TEMPLATE),
        "--print-base-key",
        "--suite",
        SUITE,
        "--mirror",
        MIRROR,
        "--packages",
        PACKAGES,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{SUITE}-{arch}-{key}\n"
