"""Stage reuse of `make image-local` end to end, in a cache directory of its own: a first build runs and
snapshots every stage; after the last stage's snapshot is damaged, a second build discards it, resumes after
the stage before and runs only the last one; a third, with nothing changed, runs none. Each image is whole
(the same roles, components and files as the first, self-check passed, no host identity), and the snapshots
hold none of the bind-mounted caches.

Three LXC builds (the first also snapshots about 3 GB): make test-slow runs it, as root. The builds use the
build container's fixed name, so the fixture is one of the host's (tests/integration/conftest.py) and never
runs beside another local build.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support import REPO, ansible_env

from .conftest import FLAVOUR, STACK

pytestmark = pytest.mark.slow

# What differs between two builds of the same image whatever the stages: logs, caches, the apt index.
VOLATILE = (
    "./var/log/",
    "./var/cache/",
    "./var/lib/apt/lists/",
    "./tmp/",
    "./var/tmp/",
    "./var/lib/systemd/",
)
MACHINE_CACHE = Path("/var/cache/trainstack/image")


def make_image(out: Path, cache: Path, *extra: str) -> str:
    """One `make image-local` into ``out`` with the image cache ``cache``; its output."""
    proc = subprocess.run(
        [
            "make",
            "image-local",
            f"STACK={STACK}",
            f"IMAGE_FLAVOUR={FLAVOUR}",
            f"IMAGE_OUT={out}",
            f"IMAGE_CACHE_DIR={cache}",
            *extra,
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc.stdout


def seeded_cache(root: Path) -> Path:
    """A cache directory of the test's own, with the machine's base root filesystem and package downloads
    linked in where there are some (they are not what is tested; the stages are)."""
    cache = root / "cache"
    cache.mkdir()
    if MACHINE_CACHE.is_dir():
        for path in MACHINE_CACHE.glob("rootfs-*.tar"):
            os.link(path, cache / path.name)
        for sub in ("apt-archives", "pip", "artifacts"):
            if (MACHINE_CACHE / sub).is_dir():
                subprocess.run(["cp", "-al", str(MACHINE_CACHE / sub), str(cache / sub)], check=True)
    return cache


def image_state(out: Path) -> tuple[dict, set[str], dict]:
    """image.json, the lab rootfs's file names (volatile ones left out) and selfcheck.json of a build."""
    local = out / f"local-{FLAVOUR}"
    with tarfile.open(local / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar") as tar:
        names = {n for n in tar.getnames() if not n.startswith(VOLATILE)}
        selfcheck = json.loads(tar.extractfile("./etc/trainstack/selfcheck.json").read())
        machine_id = tar.extractfile("./etc/machine-id").read()
    assert machine_id == b""
    assert not [n for n in names if n.startswith("./etc/ssh/ssh_host_")]
    assert "./usr/sbin/policy-rc.d" not in names
    assert selfcheck["ok"] is True
    return json.loads((local / "image.json").read_text()), names, selfcheck


def plan_of(out: Path) -> dict:
    return json.loads((out / f"local-{FLAVOUR}" / "stages.json").read_text())


@pytest.fixture(scope="module")
def image_stage_builds(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if os.geteuid() != 0:
        pytest.skip("LXC image builds need root")
    root = tmp_path_factory.mktemp("stages")
    cache = seeded_cache(root)
    first = make_image(root / "first", cache)
    plan = plan_of(root / "first")
    last = plan["stages"][-1]
    snapshot = Path(last["snapshot"])
    data = bytearray(snapshot.read_bytes()[:4096])
    data[1024] ^= 0xFF
    with snapshot.open("r+b") as handle:
        handle.write(bytes(data))
    second = make_image(root / "second", cache)
    third = make_image(root / "third", cache)
    return {"root": root, "cache": cache, "plan": plan, "outputs": (first, second, third)}


def test_the_first_build_runs_and_snapshots_every_stage(image_stage_builds: dict) -> None:
    plan, (first, _, _) = image_stage_builds["plan"], image_stage_builds["outputs"]
    assert plan["resume"]["after"] == 0
    roles = [s["role"] for s in plan["stages"]]
    assert {"base", "slurm", "pytorch"} <= set(roles)
    for role in roles:
        assert f"stage runs: {role}" in first
    for stage in plan["stages"][:-1]:
        record = json.loads(Path(stage["snapshot"]).with_suffix(".json").read_text())
        assert (record["key"], record["role"]) == (stage["key"], stage["role"])
    with tarfile.open(plan["stages"][0]["snapshot"]) as tar:
        cached = [
            n for n in tar.getnames() if n.startswith("./var/cache/apt/archives/") and n.endswith(".deb")
        ]
    assert cached == []


def test_a_damaged_last_snapshot_is_discarded_and_only_the_last_stage_runs(image_stage_builds: dict) -> None:
    root, plan, (_, second, _) = (
        image_stage_builds["root"],
        image_stage_builds["plan"],
        image_stage_builds["outputs"],
    )
    again = plan_of(root / "second")
    roles = [s["role"] for s in plan["stages"]]
    assert [s["key"] for s in again["stages"]] == [s["key"] for s in plan["stages"]]
    assert [d["role"] for d in again["discarded"]] == [roles[-1]]
    assert again["resume"]["after"] == len(roles) - 1
    for role in roles[:-1]:
        assert f"stage reused: {role}" in second
    assert f"stage runs: {roles[-1]}" in second
    first_json, first_names, _ = image_state(root / "first")
    second_json, second_names, _ = image_state(root / "second")
    assert (second_json["roles"], second_json["components"]) == (
        first_json["roles"],
        first_json["components"],
    )
    assert second_names == first_names


def test_an_unchanged_build_reuses_every_stage(image_stage_builds: dict) -> None:
    root, plan, (_, _, third) = (
        image_stage_builds["root"],
        image_stage_builds["plan"],
        image_stage_builds["outputs"],
    )
    again = plan_of(root / "third")
    assert again["resume"]["after"] == len(plan["stages"]) and again["discarded"] == []
    assert "stage runs:" not in third
    first_json, first_names, _ = image_state(root / "first")
    third_json, third_names, _ = image_state(root / "third")
    assert third_json["roles"] == first_json["roles"] and third_names == first_names
