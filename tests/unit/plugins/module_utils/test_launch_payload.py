"""The payload archive (launch/payload.py): the same files make the same bytes whatever their times, owners or
compiled caches, GNU tar reads it, and each included package lands beside the entrypoint."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import payload


def case(root: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A test case with an entrypoint, a config and a compiled cache, and a shared package it includes."""
    source = root / "testcases" / "pytorch" / "fsdp"
    (source / "configs").mkdir(parents=True)
    (source / "train.py").write_text("print('train')\n")
    (source / "train.py").chmod(0o755)
    (source / "configs" / "tiny.yaml").write_text("dim: 8\n")
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0compiled")
    library = root / "testcases" / "common" / "trainstack_train"
    (library / "__pycache__").mkdir(parents=True)
    (library / "__init__.py").write_text("")
    (library / "metrics.py").write_text("STEP = 1\n")
    return source, [(str(library.parent), library.name)]


def test_the_archive_holds_the_case_and_its_includes_in_name_order(tmp_path: Path) -> None:
    source, includes = case(tmp_path)
    dest = tmp_path / "payload.tar"
    digest = payload.write_payload(str(source), includes, str(dest))
    assert digest == payload.file_sha256(str(dest)) and len(digest) == 64
    with tarfile.open(dest) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        ".",
        "./configs",
        "./configs/tiny.yaml",
        "./train.py",
        "trainstack_train",
        "trainstack_train/__init__.py",
        "trainstack_train/metrics.py",
    ]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.name: m.mode for m in members}["./train.py"] == 0o755
    listed = subprocess.run(["tar", "-tf", str(dest)], capture_output=True, text=True, check=True).stdout
    assert "./train.py" in listed.split() and "trainstack_train/metrics.py" in listed.split()


def test_the_same_files_make_the_same_bytes_and_a_change_makes_others(tmp_path: Path) -> None:
    source, includes = case(tmp_path)
    first = payload.write_payload(str(source), includes, str(tmp_path / "a.tar"))
    for path in source.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    (source / "__pycache__" / "other.pyc").write_bytes(b"\0more")
    assert payload.write_payload(str(source), includes, str(tmp_path / "b.tar")) == first
    (source / "configs" / "tiny.yaml").write_text("dim: 16\n")
    assert payload.write_payload(str(source), includes, str(tmp_path / "c.tar")) != first


def test_a_failed_pack_leaves_no_archive_and_no_temporary_file(tmp_path: Path) -> None:
    source, _ = case(tmp_path)
    dest = tmp_path / "payload.tar"
    with pytest.raises(OSError):
        payload.write_payload(str(source), [(str(tmp_path), "missing")], str(dest))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["testcases"]


def test_the_archive_is_the_one_gnu_tar_makes_so_staged_payloads_keep_their_hash(tmp_path: Path) -> None:
    """The launch packed with GNU tar before: the same bytes mean that a payload staged then is staged now."""
    source, includes = case(tmp_path)
    (directory, name), gnu = includes[0], tmp_path / "gnu.tar"
    normalise = ["--exclude=__pycache__", "--sort=name", "--mtime=@0", "--owner=0", "--group=0"]
    members = ["-C", str(source), ".", f"--directory={directory}", name]
    subprocess.run(["tar", *normalise, "--numeric-owner", "-cf", str(gnu), *members], check=True)
    ours = payload.write_payload(str(source), includes, str(tmp_path / "ours.tar"))
    assert ours == payload.file_sha256(str(gnu))
