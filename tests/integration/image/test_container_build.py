"""Container images from the stack (playbooks/build_container.yml) on the lab: both flavours built with
buildah from the local image's Debian 12 root filesystem, pushed to a registry on the lab bridge and read
back; a second run builds and pushes nothing.

Slow (marked `slow`, run by `make test-slow`): a build of the two flavours takes minutes on two shared cores
(NCCL and torch are unpacked into layers, the push compresses them); bench/container_build.py measures it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import lab_registry
from tests.support import REPO, ansible_env, lab_ssh, run

pytestmark = [pytest.mark.lab, pytest.mark.slow]

STACK = "ts-2026.10"
# The default repository: a machine that already built these layers reuses them (the registry is new).
REPOSITORY = "trainstack"
NAMESPACE = "lab"
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
)


def build(registry_url: str, out: Path, **extra: object) -> subprocess.CompletedProcess:
    """One run of the playbook, as `make container-local` runs it, into ``registry_url`` (the lab's, plain
    HTTP); ``extra`` are further playbook variables (other tests pick the flavours or the manifest format)."""
    return run(
        [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "playbooks/build_container.yml",
            "-e",
            f"trainstack_stack={STACK}",
            "-e",
            f"container_registry_url={registry_url}",
            "-e",
            "container_registry_allow_http=true",
            "-e",
            f"container_build_dir={out}",
            "-e",
            "container_host_ca_certs=true",
            "-e",
            f"pytorch_wheelhouse={REPO / '.cache' / 'wheelhouse'}",
            "-e",
            json.dumps(extra),
        ],
        env=ansible_env(BUILDAH_ISOLATION="chroot"),
        timeout=3000,
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    counts = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE):
        counts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return counts


def buildah(*args: str) -> str:
    """buildah with a standard input of its own: `buildah run` leaves the stdin it is given non-blocking, and
    the ansible-playbook runs later in this process would refuse to start on a shared one."""
    return subprocess.run(
        ["buildah", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True
    ).stdout


def registry_manifest(registry: str, flavour: str, tag: str) -> tuple[dict, str]:
    """A manifest as the registry serves it, and its digest."""
    request = urllib.request.Request(
        f"{registry}/v2/{NAMESPACE}/{REPOSITORY}/{flavour}/manifests/{tag}",
        headers={"Accept": MANIFEST_TYPES},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read()), reply.headers["Docker-Content-Digest"]


@pytest.fixture(scope="module")
def registry(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The lab's registry on the bridge, empty for this module."""
    directory = tmp_path_factory.mktemp("registry")
    url = lab_registry.start(directory)
    yield url
    lab_registry.stop(directory)


@pytest.fixture(scope="module")
def builds(registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two runs in a row (the first may reuse layers an earlier run built: the registry is new either way)."""
    out = tmp_path_factory.mktemp("container")
    first = build(f"{registry}/{NAMESPACE}", out, container_repository=REPOSITORY)
    records = {f: json.loads((out / f"{f}.json").read_text()) for f in ("base", "pytorch")}
    ids = {
        f: buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", r["image"])
        for f, r in records.items()
    }
    second = build(f"{registry}/{NAMESPACE}", out, container_repository=REPOSITORY)
    return {"first": first, "second": second, "records": records, "ids": ids, "out": out}


def image_file(image: str, path: str) -> bytes | None:
    """A file of an image (None when absent), read from a mounted working container."""
    container = buildah("from", "--pull=never", image).strip()
    try:
        root = Path(buildah("mount", container).strip())
        target = root / path.lstrip("/")
        return target.read_bytes() if target.exists() else None
    finally:
        buildah("rm", container)


def test_pytorch_is_one_layer_on_base(builds: dict) -> None:
    base, pytorch = builds["records"]["base"], builds["records"]["pytorch"]
    assert pytorch["parent"] == base["image"]
    layers = {
        f: json.loads(buildah("inspect", "--type", "image", r["image"]))["OCIv1"]["rootfs"]["diff_ids"]
        for f, r in builds["records"].items()
    }
    assert layers["pytorch"][: len(layers["base"])] == layers["base"]
    assert len(layers["pytorch"]) == len(layers["base"]) + 1
    assert base["tags"] == [f"{STACK}-{base['key'][:12]}", STACK]
    assert "pytorch" in pytorch["roles"] and "pytorch" not in base["roles"]
    assert not {"nvidia_driver", "dcgm", "slurm", "enroot_pyxis"} & set(pytorch["roles"])


def test_image_json_is_inside_and_annotated(builds: dict) -> None:
    for flavour, record in builds["records"].items():
        inside = json.loads(image_file(record["image"], "/etc/trainstack/image.json") or b"{}")
        annotations = json.loads(buildah("inspect", "--type", "image", record["image"]))["ImageAnnotations"]
        assert json.loads(annotations["org.trainstack.image.json"]) == inside
        assert (inside["stack"], inside["flavour"]) == (STACK, f"container-{flavour}")
        assert inside["components"]["nccl"]["matches"] is True
    pytorch = json.loads(
        image_file(builds["records"]["pytorch"]["image"], "/etc/trainstack/image.json") or b"{}"
    )
    assert pytorch["components"]["pytorch"] == {
        "pinned": "2.13.0",
        "installed": "2.13.0+cpu",
        "matches": True,
    }


def test_no_host_identity_in_the_layers(builds: dict) -> None:
    for record in builds["records"].values():
        assert image_file(record["image"], "/etc/machine-id") == b""
        assert image_file(record["image"], "/etc/hostname") in (b"", None)
        assert image_file(record["image"], "/etc/resolv.conf") in (b"", None)
        assert image_file(record["image"], "/var/lib/dbus/machine-id") is None
        container = buildah("from", "--pull=never", record["image"]).strip()
        try:
            root = Path(buildah("mount", container).strip())
            assert not list((root / "etc" / "ssh").glob("ssh_host_*"))
            assert not list((root / "var" / "cache" / "apt" / "archives").glob("*.deb"))
        finally:
            buildah("rm", container)


def test_pushed_manifests_read_back_from_the_lab(builds: dict, registry: str) -> None:
    for flavour, record in builds["records"].items():
        content, digest = registry_manifest(registry, flavour, record["tags"][0])
        by_stack, stack_digest = registry_manifest(registry, flavour, STACK)
        assert digest == stack_digest == record["registry"]["digest"]
        assert json.loads(content["annotations"]["org.trainstack.image.json"])["stack"] == STACK
        assert content == by_stack
    # A lab node reaches the registry over the bridge (where enroot will pull from).
    probe = f"import urllib.request; print(urllib.request.urlopen('{registry}/v2/').status)"
    answer = lab_ssh("10.77.0.11", f"python3 -c {shlex.quote(probe)}")
    assert answer.stdout.strip() == "200", answer.stderr


def test_second_run_builds_and_pushes_nothing(builds: dict, registry: str) -> None:
    counts = recap(builds["second"].stdout)
    assert counts and all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    assert "unchanged (this key is built)" in builds["second"].stdout
    for flavour, record in builds["records"].items():
        now = buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", record["image"])
        assert now == builds["ids"][flavour]
        assert json.loads((builds["out"] / f"{flavour}.json").read_text()) == record
        assert registry_manifest(registry, flavour, record["tags"][0])[1] == record["registry"]["digest"]
