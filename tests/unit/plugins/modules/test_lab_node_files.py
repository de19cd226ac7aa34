"""lab_node_files run by Ansible: a node's files written once, repaired, refused when unsafe."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import LOCALHOST_ARGS, VENV_BIN, run

Node = tuple[Path, list[dict[str, str]]]


def node_files(*flags: str, **args: Any) -> subprocess.CompletedProcess[str]:
    """One real module run on localhost; its result as Ansible's one-line JSON callback prints it."""
    return run(
        [
            str(VENV_BIN / "ansible"),
            "all",
            *LOCALHOST_ARGS,
            *flags,
            "-m",
            "trainstack.cluster.lab_node_files",
            "-a",
            json.dumps(args),
        ],
        check=False,
        timeout=300,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The module's result, as the configured callback prints it (YAML after the host's status)."""
    return yaml.safe_load(proc.stdout.split("=>", 1)[1])


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A container directory with an (almost empty) root filesystem, and the files a node gets."""
    root = tmp_path / "ts-standin"
    (root / "rootfs" / "etc" / "ssh").mkdir(parents=True)
    ca = tmp_path / "standin-egress-ca.crt"
    ca.write_text("stand-in certificate authority\n")
    files = [
        {"path": "config", "content": "lxc.uts.name = ts-standin\n"},
        {"path": "rootfs/etc/hostname", "content": "ts-standin\n"},
        {"path": "rootfs/root/.ssh/authorized_keys", "content": "ssh-ed25519 AAAA lab\n", "mode": "0600"},
        {"path": "rootfs/usr/local/share/ca-certificates/", "src": str(ca)},
    ]
    return root, files


def test_files_are_written_once_and_a_second_run_changes_nothing(node: Node) -> None:
    root, files = node
    first = node_files(root=str(root), files=files, host_keys="rootfs")
    assert first.returncode == 0 and "CHANGED" in first.stdout, first.stdout
    assert (root / "rootfs/etc/hostname").read_text() == "ts-standin\n"
    assert (root / "rootfs/root/.ssh/authorized_keys").stat().st_mode & 0o777 == 0o600
    assert (root / "rootfs/root/.ssh").stat().st_mode & 0o777 == 0o755
    ca = root / "rootfs/usr/local/share/ca-certificates/standin-egress-ca.crt"
    assert ca.read_text() == "stand-in certificate authority\n"
    assert (root / "rootfs/etc/ssh/ssh_host_ed25519_key").exists()

    again = node_files(root=str(root), files=files, host_keys="rootfs")
    assert again.returncode == 0 and "SUCCESS" in again.stdout, again.stdout
    assert result(again)["written"] == []


def test_a_changed_file_or_mode_is_put_back_and_only_it(node: Node) -> None:
    root, files = node
    assert node_files(root=str(root), files=files).returncode == 0
    (root / "rootfs/etc/hostname").write_text("someone-else\n")
    (root / "rootfs/root/.ssh/authorized_keys").chmod(0o644)
    proc = node_files(root=str(root), files=files)
    assert proc.returncode == 0 and "CHANGED" in proc.stdout
    assert sorted(result(proc)["written"]) == ["rootfs/etc/hostname", "rootfs/root/.ssh/authorized_keys"]
    assert (root / "rootfs/etc/hostname").read_text() == "ts-standin\n"
    assert (root / "rootfs/root/.ssh/authorized_keys").stat().st_mode & 0o777 == 0o600


def test_check_mode_reports_and_writes_nothing(node: Node) -> None:
    root, files = node
    proc = node_files("--check", root=str(root), files=files, host_keys="rootfs")
    assert proc.returncode == 0 and "CHANGED" in proc.stdout, proc.stdout
    assert not (root / "config").exists()
    assert not (root / "rootfs/etc/ssh/ssh_host_ed25519_key").exists()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"path": "../escaped", "content": "x"},
            "files[4].path='../escaped' must be a relative path inside root",
        ),
        ({"path": "/etc/hostname", "content": "x"}, "files[4].path='/etc/hostname' must be a relative path"),
        (
            {"path": "rootfs/etc/x", "content": "x", "src": "/etc/hostname"},
            "give exactly one of content and src",
        ),
        ({"path": "rootfs/etc/", "content": "x"}, "names a directory: only a src file can go into it"),
        (
            {"path": "rootfs/etc/x", "content": "x", "mode": "rw"},
            "files[4].mode='rw' must be an octal string",
        ),
        (
            {"path": "rootfs/etc/x", "src": "/nonexistent/standin"},
            "files[4].src='/nonexistent/standin' cannot be read",
        ),
    ],
)
def test_a_bad_entry_fails_naming_it_and_nothing_is_written(
    node: Node, bad: dict[str, str], message: str
) -> None:
    root, files = node
    proc = node_files(root=str(root), files=[*files, bad], host_keys="rootfs")
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout
    assert sorted(p.name for p in root.rglob("*")) == ["etc", "rootfs", "ssh"]
