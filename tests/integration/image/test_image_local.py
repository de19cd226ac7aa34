"""`make image-local` end to end: Packer's lxc builder, the shell-local + community.general.lxc provisioning
path, the manifest and self-check, and the rootfs tarball the lab boots. Warm (cached rootfs, apt, pip and
artifact caches) it took 1.5 to 3.5 minutes here depending on the machine's load; the first build on a
machine adds the debootstrap and every download (bench/image_build)."""

import json
import subprocess
import tarfile

import yaml

from tests.support import REPO

from .conftest import FLAVOUR, STACK


def read_member(tar_path, name):
    with tarfile.open(tar_path) as tar:
        return tar.extractfile(name).read().decode()


def test_rootfs_tarball_is_lab_ready(local_image):
    outdir, _ = local_image
    tar_path = outdir / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar"
    with tarfile.open(tar_path) as tar:
        names = set(tar.getnames())
        machine_id = tar.extractfile("./etc/machine-id").read()
    # Debian 12 has a merged /usr: /sbin/init is ./usr/sbin/init in the tarball.
    for needed in ("./usr/sbin/sshd", "./usr/bin/python3", "./usr/sbin/init", "./usr/lib/systemd/systemd"):
        assert needed in names, needed
    assert not any(n.startswith("./rootfs/") for n in names), "lab format: entries rooted at ./"
    assert not [n for n in names if n.startswith("./etc/ssh/ssh_host_")], "host keys baked into the image"
    assert "./usr/sbin/policy-rc.d" not in names, "services would never start on the lab node"
    assert not [n for n in names if n.endswith("/.bash_history")]
    assert machine_id == b""


def test_image_json_records_the_stack_read_from_the_system(local_image):
    outdir, _ = local_image
    tar_path = outdir / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar"
    manifest = json.loads(read_member(tar_path, "./etc/trainstack/image.json"))
    stack = yaml.safe_load((REPO / "stacks" / f"{STACK}.yml").read_text())
    # HEAD may move while the image builds (shared working tree): the revision must be a real commit, and the
    # one Packer recorded for the same build.
    revision = manifest["source_revision"]
    subprocess.run(["git", "cat-file", "-e", f"{revision}^{{commit}}"], cwd=REPO, check=True)
    assert (manifest["stack"], manifest["flavour"]) == (STACK, FLAVOUR)
    assert manifest["os"].startswith("debian-12") and manifest["arch"] == "x86_64"
    lab_components = {n for n, c in stack["components"].items() if "debian-12" in c["os"]}
    assert set(manifest["components"]) == lab_components
    assert (
        manifest["components"]["slurm"]["pinned"]
        == stack["components"]["slurm"]["by_os"]["debian-12"]["version"]
    )
    assert "base" in manifest["roles"]
    # Base, Slurm and a CPU PyTorch at least (the local image's floor), each read from the built system.
    assert {"base", "slurm", "pytorch"} <= set(manifest["roles"])
    assert manifest["components"]["slurm"]["matches"] is True
    pytorch = manifest["components"]["pytorch"]
    assert pytorch == {"pinned": "2.13.0", "installed": "2.13.0+cpu", "matches": True}
    assert manifest["build_time"].endswith("Z")
    # Copied out beside Packer's manifest, byte for byte the one in the image.
    assert json.loads((outdir / "image.json").read_text()) == manifest
    packer_manifest = json.loads((outdir / "packer-manifest.json").read_text())
    assert packer_manifest["builds"][-1]["custom_data"] == {
        "stack": STACK,
        "flavour": FLAVOUR,
        "revision": revision,
        # The one place the lab rootfs path is written (make demo and the lab read it from here).
        "lab_rootfs": str(outdir / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar"),
    }


def test_selfcheck_report_passed_and_explains_skips(local_image):
    outdir, stdout = local_image
    tar_path = outdir / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar"
    report = json.loads(read_member(tar_path, "./etc/trainstack/selfcheck.json"))
    checks = {c["check"]: c for c in report["checks"]}
    assert report["ok"] is True
    for name in ("no-ssh-host-keys", "no-shell-history", "no-cloud-init-state", "free-disk"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["gpu"]["status"] == "skip" and "no NVIDIA GPU" in checks["gpu"]["detail"]
    assert checks["version:pytorch"]["status"] == "pass" and checks["version:slurm"]["status"] == "pass"
    # The stack check ran first, in the same build.
    assert stdout.index("Check the stack against every rule") < stdout.index("Record what the image holds")
