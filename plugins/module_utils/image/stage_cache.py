# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Snapshots of the local image build's stages: where they live, which one a build resumes from, which ones
are pruned, and how one is written.

Why: a stage's key (stages.py) says what its root filesystem holds; the snapshot is that filesystem, a plain
tar under ``<cache>/stages/<key>.tar`` beside ``<key>.json`` (the key, role, stage, flavour, size and sha256
of the tar). A build resumes from the last stage whose snapshot is whole: the tar's size and sha256 match its
record and the record names the key it is filed under. Anything else is discarded and the stage before is
tried, down to the base root filesystem: a reused snapshot that is not what its key says would build a wrong
image without a word. The record is written after the tar, both through a temporary name and a rename, so a
build stopped half-way leaves no record of a partial tar; such a tar is removed by the next prune.

Snapshots are large (a slurm-gpu root filesystem is about 1.6 GB), so the directory keeps ``keep`` of them,
the least recently used (written or resumed from: the record's mtime) going first.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAGES_DIR = "stages"
# The host caches the LXC template bind-mounts into the build container: not part of any image. From the host
# the mounts are invisible (they live in the container's mount namespace), so these directories are empty
# there; they are excluded all the same, in case a host shares the mounts.
CACHE_MOUNTS = ("var/cache/apt/archives", "root/.cache/pip", "var/cache/trainstack/artifacts")
# tar's options for every snapshot, written and read: numeric owners, extended attributes (file capabilities).
TAR_OPTIONS = ("--numeric-owner", "--xattrs", "--xattrs-include=*")
CHUNK = 1 << 20


class StageCacheError(ValueError):
    """A stage cache that cannot be used: the setting and the rule are named."""


@dataclass(frozen=True)
class SnapshotPaths:
    """The two files of a stage's snapshot."""

    tar: Path
    record: Path


@dataclass
class Resume:
    """Where a build starts: after ``after`` stages (0: the base root filesystem), from ``snapshot``; and the
    snapshots found unusable on the way, with the reason (they are removed)."""

    after: int
    snapshot: str = ""
    key: str = ""
    discarded: list[dict[str, str]] = field(default_factory=list)


def stages_dir(cache_dir: str | os.PathLike[str]) -> Path:
    """The directory of the snapshots inside the image cache directory."""
    return Path(cache_dir) / STAGES_DIR


def snapshot_paths(cache_dir: str | os.PathLike[str], key: str) -> SnapshotPaths:
    """A stage's snapshot files, named by its key (the key is a sha256: 64 hex digits)."""
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise StageCacheError(f"stage key {key!r} is not a sha256 (64 lowercase hex digits)")
    folder = stages_dir(cache_dir)
    return SnapshotPaths(tar=folder / f"{key}.tar", record=folder / f"{key}.json")


def cache_dir_problems(cache_dir: str, setting: str = "IMAGE_CACHE_DIR") -> list[str]:
    """Why ``cache_dir`` cannot hold snapshots ([] when it can): it must be an absolute path, and it and its
    stages directory must be directories where they exist."""
    if not cache_dir or not os.path.isabs(cache_dir):
        return [f"{setting}={cache_dir!r} must be an absolute path (the image cache directory)"]
    for path in (Path(cache_dir), stages_dir(cache_dir)):
        if path.exists() and not path.is_dir():
            return [f"{setting}={cache_dir}: {path} exists and is not a directory"]
    return []


def check_keep(keep: Any, setting: str = "IMAGE_STAGE_KEEP") -> int:
    """The number of snapshots to keep, at least 1 (0 snapshots kept is IMAGE_STAGE_CACHE=0)."""
    if isinstance(keep, bool) or not str(keep).isdigit() or int(keep) < 1:
        raise StageCacheError(
            f"{setting}={keep!r} must be a whole number >= 1 (IMAGE_STAGE_CACHE=0 turns reuse off)"
        )
    return int(keep)


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes, read in chunks."""
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            sha.update(chunk)
    return sha.hexdigest()


def read_record(path: Path) -> dict[str, Any] | None:
    """A snapshot's record, or None when it is missing or not a JSON object."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def snapshot_problem(
    cache_dir: str | os.PathLike[str], key: str, role: str, hasher: Callable[[Path], str] = sha256_file
) -> str | None:
    """Why the snapshot filed under ``key`` must not be reused (None when it may): a record that names
    another key or role, a tar of another size, or other bytes than the record's sha256."""
    paths = snapshot_paths(cache_dir, key)
    record = read_record(paths.record)
    if record is None:
        return f"{paths.record.name}: no readable record"
    if record.get("key") != key:
        return f"{paths.record.name} records key {record.get('key')!r}, not the key it is filed under"
    if record.get("role") != role:
        return f"{paths.record.name} records stage {record.get('role')!r}, this build's stage is {role}"
    if not paths.tar.is_file():
        return f"{paths.tar.name} is missing"
    size = paths.tar.stat().st_size
    if size != record.get("size"):
        return f"{paths.tar.name} holds {size} bytes, its record {record.get('size')}"
    if hasher(paths.tar) != record.get("sha256"):
        return f"{paths.tar.name}'s sha256 differs from its record's"
    return None


def discard(cache_dir: str | os.PathLike[str], key: str) -> None:
    """Remove a snapshot's files (the record first: a tar without a record is never reused)."""
    paths = snapshot_paths(cache_dir, key)
    for path in (paths.record, paths.tar):
        path.unlink(missing_ok=True)


def present(cache_dir: str | os.PathLike[str], key: str) -> bool:
    """Whether anything of a snapshot is on disk (a record or a tar)."""
    paths = snapshot_paths(cache_dir, key)
    return paths.record.exists() or paths.tar.exists()


def choose_resume(
    stages: Sequence[Mapping[str, Any]],
    cache_dir: str | os.PathLike[str],
    rebuild: str = "",
    hasher: Callable[[Path], str] = sha256_file,
) -> Resume:
    """The last stage a build can start after: the stages are tried from the last back (a key covers every
    stage before it, so a stage's snapshot stands for the whole prefix, whether or not the stages before it
    have one); a snapshot that is present but unusable is removed and the stage before tried. ``rebuild``
    names a role from which every stage runs again (its snapshot and later ones are not used)."""
    roles = [str(stage["role"]) for stage in stages]
    limit = roles.index(rebuild) if rebuild in roles else len(stages)
    discarded: list[dict[str, str]] = []
    for stage in reversed(list(stages)[:limit]):
        key, role = str(stage["key"]), str(stage["role"])
        if not present(cache_dir, key):
            continue
        problem = snapshot_problem(cache_dir, key, role, hasher)
        if problem is None:
            tar = snapshot_paths(cache_dir, key).tar
            return Resume(after=int(stage["index"]), snapshot=str(tar), key=key, discarded=discarded)
        discard(cache_dir, key)
        discarded.append({"key": key, "role": role, "reason": problem})
    return Resume(after=0, discarded=discarded)


def mark_used(cache_dir: str | os.PathLike[str], key: str, now: float | None = None) -> None:
    """Record that a snapshot was used (its record's mtime), so that pruning keeps it over older ones."""
    record = snapshot_paths(cache_dir, key).record
    if record.exists():
        stamp = time.time() if now is None else now
        os.utime(record, (stamp, stamp))


def prune(cache_dir: str | os.PathLike[str], keep: int, protect: Iterable[str] = ()) -> list[str]:
    """Keep the ``keep`` most recently used snapshots (record mtime), remove the others and every tar or
    temporary file that has no record (a capture that stopped half-way); ``protect`` keys are kept whatever
    their age (the snapshot this build resumed from). Returns the removed file names."""
    folder = stages_dir(cache_dir)
    if not folder.is_dir():
        return []
    kept_always = set(protect)
    records = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    removed: list[str] = []
    budget = max(keep - len([r for r in records if r.stem in kept_always]), 0)
    keep_keys = set(kept_always)
    for record in records:
        if record.stem in kept_always:
            continue
        if budget > 0:
            keep_keys.add(record.stem)
            budget -= 1
            continue
        removed.append(record.name)
        record.unlink(missing_ok=True)
    for path in sorted(folder.iterdir()):
        if path.suffix == ".json" and path.stem in keep_keys:
            continue
        if path.suffix == ".tar" and path.stem in keep_keys:
            continue
        if path.is_file():
            removed.append(path.name)
            path.unlink(missing_ok=True)
    return sorted(set(removed))


def tar_create_argv(rootfs: str) -> list[str]:
    """tar writing a root filesystem to standard output, entries rooted at ./ as the base tarball's, the
    bind-mounted caches' contents left out (their directories kept, as the base has them)."""
    excludes = [f"--exclude=./{mount}/*" for mount in CACHE_MOUNTS]
    return ["tar", *TAR_OPTIONS, *excludes, "-C", rootfs, "-cf", "-", "."]


def rootfs_from_config(config_text: str) -> str:
    """The root filesystem directory of an LXC container config (``lxc.rootfs.path = dir:/path``)."""
    for line in config_text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "lxc.rootfs.path":
            path = value.strip()
            path = path[len("dir:") :] if path.startswith("dir:") else path
            if not os.path.isabs(path):
                break
            return path
    raise StageCacheError("the build container's config has no lxc.rootfs.path = dir:<absolute path>")


def capture(
    rootfs: str,
    cache_dir: str | os.PathLike[str],
    stage: Mapping[str, Any],
    flavour: str,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Write the snapshot of ``stage`` from ``rootfs``: tar's output hashed as it is written to a temporary
    name, renamed into place, then the record (temporary name, rename). On any failure nothing of it is left
    and the error is raised. Returns the record."""
    key = str(stage["key"])
    paths = snapshot_paths(cache_dir, key)
    paths.tar.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = paths.tar.with_name(f".{key}.tar.part")
    sha = hashlib.sha256()
    size = 0
    started = time.monotonic()
    command = list(argv) if argv is not None else tar_create_argv(rootfs)
    try:
        with open(part, "wb") as out:
            os.chmod(part, 0o600)
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
                if proc.stdout is None or proc.stderr is None:  # both are PIPE, so never here
                    raise OSError("tar's output pipes were not opened")
                for chunk in iter(lambda: proc.stdout.read(CHUNK), b""):
                    sha.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                errors = proc.stderr.read().decode(errors="replace")
                code = proc.wait()
            if code != 0:
                raise StageCacheError(
                    f"tar of {rootfs} for stage {stage['role']} failed ({code}): {errors.strip()[-500:]}"
                )
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, paths.tar)
        record = {
            "key": key,
            "role": str(stage["role"]),
            "index": int(stage["index"]),
            "flavour": flavour,
            "size": size,
            "sha256": sha.hexdigest(),
            "seconds": round(time.monotonic() - started, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_record(paths.record, record)
        return record
    except BaseException:
        part.unlink(missing_ok=True)
        discard(cache_dir, key)
        raise


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """A record written atomically (temporary name in the same directory, then rename)."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(json.dumps(dict(record), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(part, path)


# Written by the LXC template beside the container's config: "base", or the snapshot it extracted.
ROOTFS_MARKER = "trainstack-rootfs-from"


def plan_problems(plan: Any) -> list[str]:
    """Why a plan file cannot be followed ([] when it can): its stages, and a resume point inside them."""
    if not isinstance(plan, Mapping) or not isinstance(plan.get("stages"), list):
        return ["image_stage_plan: not a stage plan (scripts/image_stages.py writes one: stages, resume)"]
    stages = plan["stages"]
    if [s.get("index") if isinstance(s, Mapping) else None for s in stages] != list(
        range(1, len(stages) + 1)
    ):
        return ["image_stage_plan: stages must be numbered 1..n in order"]
    resume = plan.get("resume")
    after = resume.get("after") if isinstance(resume, Mapping) else None
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= len(stages):
        return [
            f"image_stage_plan: resume.after={after!r} is out of range 0..{len(stages)} "
            "(the number of stages reused)"
        ]
    return []


def resume_point(
    plan: Mapping[str, Any], marker: str | None, applied: Sequence[str], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """Where the playbook starts its stages: after ``plan.resume.after`` stages when the container's root
    filesystem came from that stage's snapshot (``marker``, the template's record), after none when the
    template fell back to the base. Refused (StageCacheError, naming the variable) when the plan was made
    for other roles or other variables than this build's, or when the root filesystem came from a snapshot
    the plan does not name: skipping a stage on such a tree would build a wrong image."""
    problems = plan_problems(plan)
    if problems:
        raise StageCacheError("; ".join(problems))
    stages = list(plan["stages"])
    planned = [str(s["role"]) for s in stages]
    if planned != list(applied):
        raise StageCacheError(
            f"image_stage_plan: its stages ({', '.join(planned) or 'none'}) are not the roles this build "
            f"applies ({', '.join(applied) or 'none'}); plan again (make image-local) or build without reuse "
            "(IMAGE_STAGE_CACHE=0)"
        )
    recorded = plan.get("variables") or {}
    differing = sorted(name for name in settings if recorded.get(name) != settings[name])
    if differing:
        shown = ", ".join(f"{n}={settings[n]!r} (planned {recorded.get(n)!r})" for n in differing)
        raise StageCacheError(f"image_stage_plan was made for other variables than this build's: {shown}")
    after, snapshot = int(plan["resume"]["after"]), str(plan["resume"].get("snapshot") or "")
    note = ""
    if marker is None and after > 0:
        raise StageCacheError(
            f"image_stage_plan resumes after stage {after}, but the container records no root filesystem "
            f"source ({ROOTFS_MARKER}): it was not made by this build's LXC template"
        )
    if marker == "base" and after > 0:
        note = f"{snapshot} did not extract (discarded): every stage runs on the base"
        after, snapshot = 0, ""
    elif marker not in (None, "base") and marker != snapshot:
        raise StageCacheError(
            f"the container's root filesystem came from {marker}, the plan names {snapshot or 'the base'}"
        )
    return {
        "after": after,
        "snapshot": snapshot,
        "reused": planned[:after],
        "run": planned[after:],
        "note": note,
    }
