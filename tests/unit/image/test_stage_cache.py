"""Stage snapshots (module_utils/image/stage_cache.py): which one a build resumes from (the last whole one; a
missing middle one does not matter, a corrupt one is removed and the one before used), how they are named,
written and pruned, and the checks the build playbook makes before it skips a stage (module image_stage).
Snapshots are written with the real tar from small trees, and read back by the LXC template itself."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.image import stage_cache as sc

from tests.support import CURRENT_STACK_ID, REPO

TEMPLATE = REPO / "packer" / "lxc" / "lxc-trainstack-debian"
ROLES = ("base", "nccl", "slurm", "pytorch")


def key_of(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def plan_stages(cache: Path) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "role": role,
            "key": key_of(role),
            "snapshot": str(sc.snapshot_paths(cache, key_of(role)).tar),
        }
        for i, role in enumerate(ROLES, start=1)
    ]


def rootfs(tmp_path: Path, marker: str) -> Path:
    """A small root filesystem: a file naming the stage, and a cache mount holding a download."""
    tree = tmp_path / f"rootfs-{marker}"
    (tree / "etc" / "apt").mkdir(parents=True, exist_ok=True)
    (tree / "etc" / "stage").write_text(marker + "\n")
    archives = tree / "var" / "cache" / "apt" / "archives"
    archives.mkdir(parents=True, exist_ok=True)
    (archives / "big.deb").write_text("download")
    (tree / "usr" / "sbin").mkdir(parents=True, exist_ok=True)
    return tree


def snapshot(tmp_path: Path, cache: Path, index: int) -> dict[str, Any]:
    stage = plan_stages(cache)[index - 1]
    return sc.capture(str(rootfs(tmp_path, stage["role"])), cache, stage, "slurm-gpu")


# ---------------------------------------------------------------- naming and writing


def test_a_snapshot_is_named_by_its_key_and_a_non_key_is_refused(tmp_path: Path) -> None:
    paths = sc.snapshot_paths(tmp_path, key_of("x"))
    assert paths.tar == tmp_path / "stages" / f"{key_of('x')}.tar"
    assert paths.record == tmp_path / "stages" / f"{key_of('x')}.json"
    with pytest.raises(sc.StageCacheError, match=r"stage key '\.\./etc' is not a sha256"):
        sc.snapshot_paths(tmp_path, "../etc")


def test_capture_writes_the_tar_and_its_record_without_the_cache_mounts(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    record = snapshot(tmp_path, cache, 2)
    paths = sc.snapshot_paths(cache, key_of("nccl"))
    assert record["key"] == key_of("nccl") and record["role"] == "nccl" and record["index"] == 2
    assert record["size"] == paths.tar.stat().st_size
    assert record["sha256"] == hashlib.sha256(paths.tar.read_bytes()).hexdigest()
    assert json.loads(paths.record.read_text()) == record
    with tarfile.open(paths.tar) as tar:
        names = set(tar.getnames())
    assert "./etc/stage" in names and "./var/cache/apt/archives" in names
    assert "./var/cache/apt/archives/big.deb" not in names
    assert sorted(p.name for p in paths.tar.parent.iterdir()) == sorted([paths.tar.name, paths.record.name])
    assert oct(paths.tar.stat().st_mode & 0o777) == "0o600"


def test_a_failed_capture_leaves_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    stage = plan_stages(cache)[0]
    with pytest.raises(sc.StageCacheError, match=r"tar of .* for stage base failed \(2\)"):
        sc.capture(str(tmp_path / "absent"), cache, stage, "slurm-gpu")
    assert list((cache / "stages").iterdir()) == []


def test_the_cache_mounts_excluded_are_the_templates_mounts() -> None:
    """The template bind-mounts these caches into the container: a snapshot must never hold them."""
    mounts = [
        line.split()[3]
        for line in TEMPLATE.read_text().splitlines()
        if line.startswith("lxc.mount.entry = $cache_dir/")
    ]
    assert sorted(mounts) == sorted(sc.CACHE_MOUNTS)


def test_the_rootfs_is_read_from_the_container_config() -> None:
    config = "lxc.uts.name = b\nlxc.rootfs.path = dir:/var/lib/lxc/b/rootfs\n"
    assert sc.rootfs_from_config(config) == "/var/lib/lxc/b/rootfs"
    with pytest.raises(sc.StageCacheError, match=r"no lxc\.rootfs\.path"):
        sc.rootfs_from_config("lxc.rootfs.path = dir:relative\n")


# ---------------------------------------------------------------- which snapshot a build resumes from


def test_the_last_whole_snapshot_is_chosen(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for index in (1, 2, 3):
        snapshot(tmp_path, cache, index)
    resume = sc.choose_resume(plan_stages(cache), cache)
    assert (resume.after, resume.key, resume.discarded) == (3, key_of("slurm"), [])
    assert resume.snapshot == str(sc.snapshot_paths(cache, key_of("slurm")).tar)


def test_a_missing_middle_snapshot_does_not_matter(tmp_path: Path) -> None:
    """Stage 3's key covers stages 1 and 2: its snapshot stands for them without theirs."""
    cache = tmp_path / "cache"
    snapshot(tmp_path, cache, 1)
    snapshot(tmp_path, cache, 3)
    assert sc.choose_resume(plan_stages(cache), cache).after == 3


def test_nothing_cached_starts_from_the_base(tmp_path: Path) -> None:
    resume = sc.choose_resume(plan_stages(tmp_path), tmp_path)
    assert (resume.after, resume.snapshot, resume.discarded) == (0, "", [])


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("bytes", "sha256 differs from its record's"),
        ("truncate", "holds 100 bytes, its record"),
        ("record-key", "records key"),
        ("record-role", "records stage 'base', this build's stage is slurm"),
        ("record-missing", "no readable record"),
        ("tar-missing", ".tar is missing"),
    ],
)
def test_a_corrupt_snapshot_is_discarded_and_the_stage_before_used(
    tmp_path: Path, damage: str, reason: str
) -> None:
    cache = tmp_path / "cache"
    for index in (1, 2, 3):
        snapshot(tmp_path, cache, index)
    paths = sc.snapshot_paths(cache, key_of("slurm"))
    record = json.loads(paths.record.read_text())
    if damage == "bytes":
        data = bytearray(paths.tar.read_bytes())
        data[600] ^= 0xFF
        paths.tar.write_bytes(bytes(data))
    elif damage == "truncate":
        paths.tar.write_bytes(paths.tar.read_bytes()[:100])
    elif damage == "record-key":
        paths.record.write_text(json.dumps({**record, "key": key_of("other")}))
    elif damage == "record-role":
        paths.record.write_text(json.dumps({**record, "role": "base"}))
    elif damage == "record-missing":
        paths.record.unlink()
    else:
        paths.tar.unlink()
    resume = sc.choose_resume(plan_stages(cache), cache)
    assert resume.after == 2 and resume.key == key_of("nccl")
    assert [d["role"] for d in resume.discarded] == ["slurm"]
    assert reason in resume.discarded[0]["reason"]
    assert not paths.tar.exists() and not paths.record.exists()


def test_a_rebuild_from_a_role_resumes_before_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for index in (1, 2, 3, 4):
        snapshot(tmp_path, cache, index)
    assert sc.choose_resume(plan_stages(cache), cache, rebuild="pytorch").after == 3
    assert sc.choose_resume(plan_stages(cache), cache, rebuild="nccl").after == 1
    assert sc.choose_resume(plan_stages(cache), cache, rebuild="base").after == 0
    assert sc.choose_resume(plan_stages(cache), cache).after == 4


# ---------------------------------------------------------------- pruning and settings


def test_pruning_keeps_the_most_recently_used_and_removes_partial_captures(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for index in (1, 2, 3, 4):
        snapshot(tmp_path, cache, index)
    for age, role in enumerate(ROLES):  # base oldest ... pytorch newest
        os.utime(sc.snapshot_paths(cache, key_of(role)).record, (1000 + age, 1000 + age))
    sc.mark_used(cache, key_of("base"), now=5000)  # resumed from: now the newest
    orphan = cache / "stages" / f"{key_of('orphan')}.tar"
    orphan.write_text("a tar whose record was never written")
    (cache / "stages" / f".{key_of('x')}.tar.part").write_text("half")
    removed = sc.prune(cache, keep=2)
    left = sorted(p.name for p in (cache / "stages").iterdir())
    expected = [f"{key_of(r)}.{ext}" for r in ("base", "pytorch") for ext in ("json", "tar")]
    assert left == sorted(expected)
    assert f"{key_of('nccl')}.tar" in removed and orphan.name in removed


def test_pruning_never_removes_the_snapshot_the_build_resumed_from(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for index in (1, 2, 3):
        snapshot(tmp_path, cache, index)
    os.utime(sc.snapshot_paths(cache, key_of("base")).record, (1, 1))
    sc.prune(cache, keep=1, protect=[key_of("base")])
    assert sorted(p.stem for p in (cache / "stages").glob("*.json")) == [key_of("base")]


def test_a_cache_dir_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    assert sc.cache_dir_problems(str(afile)) == [
        f"IMAGE_CACHE_DIR={afile}: {afile} exists and is not a directory"
    ]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "stages").write_text("")
    assert "c/stages exists and is not a directory" in sc.cache_dir_problems(str(tmp_path / "c"))[0]
    assert sc.cache_dir_problems(str(tmp_path)) == []
    with pytest.raises(sc.StageCacheError, match="IMAGE_STAGE_KEEP='many' must be a whole number >= 1"):
        sc.check_keep("many")


# ---------------------------------------------------------------- the playbook's check before skipping


def plan(cache: Path, after: int) -> dict[str, Any]:
    stages = plan_stages(cache)
    return {
        "cache_dir": str(cache),
        "flavour": "slurm-gpu",
        "keep": 8,
        "variables": {"flavour": "slurm-gpu", "stack": CURRENT_STACK_ID},
        "stages": stages,
        "resume": {"after": after, "snapshot": stages[after - 1]["snapshot"] if after else ""},
    }


SETTINGS = {"flavour": "slurm-gpu", "stack": CURRENT_STACK_ID}


def test_the_playbook_skips_the_stages_in_the_snapshot_it_was_started_from(tmp_path: Path) -> None:
    p = plan(tmp_path, 3)
    point = sc.resume_point(p, p["resume"]["snapshot"], list(ROLES), SETTINGS)
    assert point == {
        "after": 3,
        "snapshot": p["resume"]["snapshot"],
        "reused": list(ROLES[:3]),
        "run": ["pytorch"],
        "note": "",
    }


def test_a_snapshot_that_did_not_extract_makes_every_stage_run(tmp_path: Path) -> None:
    p = plan(tmp_path, 3)
    point = sc.resume_point(p, "base", list(ROLES), SETTINGS)
    assert (point["after"], point["run"]) == (0, list(ROLES))
    assert "did not extract (discarded)" in point["note"]


@pytest.mark.parametrize(
    ("after", "marker", "applied", "settings", "message"),
    [
        (
            3,
            "OTHER",
            list(ROLES),
            SETTINGS,
            "the container's root filesystem came from /elsewhere.tar, the plan names",
        ),
        (3, None, list(ROLES), SETTINGS, "records no root filesystem source (trainstack-rootfs-from)"),
        (
            2,
            "PLAN",
            ["base", "slurm", "pytorch"],
            SETTINGS,
            "its stages (base, nccl, slurm, pytorch) are not the roles",
        ),
        (
            2,
            "PLAN",
            list(ROLES),
            {**SETTINGS, "flavour": "pcs-gpu"},
            "flavour='pcs-gpu' (planned 'slurm-gpu')",
        ),
        (7, "PLAN", list(ROLES), SETTINGS, "resume.after=7 is out of range 0..4"),
        (-1, "PLAN", list(ROLES), SETTINGS, "resume.after=-1 is out of range 0..4"),
    ],
)
def test_a_plan_that_does_not_fit_the_build_stops_it(
    tmp_path: Path, after: int, marker: str | None, applied: list[str], settings: dict[str, Any], message: str
) -> None:
    p = plan(tmp_path, max(min(after, 4), 0))
    p["resume"]["after"] = after
    marker = {"PLAN": p["resume"]["snapshot"], "OTHER": "/elsewhere.tar"}.get(marker or "", marker)
    with pytest.raises(sc.StageCacheError) as caught:
        sc.resume_point(p, marker, applied, settings)
    assert message in str(caught.value)


# ---------------------------------------------------------------- the LXC template reads them back


def _base(cache: Path) -> None:
    """A base root filesystem tarball under the name --print-base-key gives (no debootstrap)."""
    key = subprocess.run(
        ["bash", str(TEMPLATE), "--print-base-key", "--packages", "standin"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = cache / "base-tree"
    (tree / "usr" / "sbin").mkdir(parents=True)
    (tree / "etc" / "apt").mkdir(parents=True)
    (tree / "etc" / "stage").write_text("base\n")
    with tarfile.open(cache / f"rootfs-{key}.tar", "w") as tar:
        tar.add(tree, arcname=".")


def run_template(tmp_path: Path, cache: Path, rootfs_from: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ct").mkdir(exist_ok=True)
    (tmp_path / "ct" / "config").write_text("lxc.net.0.type = veth\n")
    argv = ["bash", str(TEMPLATE), "--path", str(tmp_path / "ct"), "--name", "ts-standin-build"]
    argv += ["--cache-dir", str(cache), "--packages", "standin", "--rootfs-from", rootfs_from]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def test_the_template_starts_the_container_from_a_snapshot(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _base(cache)
    snapshot(tmp_path, cache, 3)
    tar = str(sc.snapshot_paths(cache, key_of("slurm")).tar)
    proc = run_template(tmp_path, cache, tar)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ct" / "rootfs" / "etc" / "stage").read_text() == "slurm\n"
    assert (tmp_path / "ct" / sc.ROOTFS_MARKER).read_text().strip() == tar
    assert "lxc.rootfs.path = dir:" in (tmp_path / "ct" / "config").read_text()


def test_a_snapshot_that_does_not_extract_is_discarded_and_the_base_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _base(cache)
    snapshot(tmp_path, cache, 3)
    paths = sc.snapshot_paths(cache, key_of("slurm"))
    paths.tar.write_bytes(b"not a tar" * 100)
    proc = run_template(tmp_path, cache, str(paths.tar))
    assert proc.returncode == 0, proc.stderr
    assert "does not extract; discarded, starting from the base" in proc.stderr
    assert (tmp_path / "ct" / "rootfs" / "etc" / "stage").read_text() == "base\n"
    assert (tmp_path / "ct" / sc.ROOTFS_MARKER).read_text().strip() == "base"
    assert not paths.tar.exists() and not paths.record.exists()


def test_an_empty_rootfs_from_is_the_base(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _base(cache)
    proc = run_template(tmp_path, cache, "")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ct" / sc.ROOTFS_MARKER).read_text().strip() == "base"


@pytest.mark.parametrize("bad", ["/etc/shadow", "STAGES/not-a-key.tar", "STAGES/" + "a" * 64 + ".tar"])
def test_a_rootfs_from_outside_the_stage_cache_is_refused_before_anything_is_made(
    tmp_path: Path, bad: str
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _base(cache)
    bad = bad.replace("STAGES", str(cache / "stages"))
    proc = run_template(tmp_path, cache, bad)
    assert proc.returncode == 1
    assert f"--rootfs-from={bad}" in proc.stderr
    assert not (tmp_path / "ct" / "rootfs").exists()
    assert (tmp_path / "ct" / "config").read_text() == "lxc.net.0.type = veth\n"
