"""Verifier for roles/image_manifest and roles/image_selfcheck: the files a built image carries."""

import json
from pathlib import Path


def test_manifest_reads_versions_from_the_system(host):
    manifest = json.loads(host.file("/etc/trainstack/image.json").content_string)
    python = host.check_output("python3 -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])'")
    assert manifest["components"]["python"] == {
        "pinned": python.rsplit(".", 1)[0],
        "installed": python,
        "matches": True,
    }
    assert manifest["components"]["slurm"]["installed"] is None
    # No stack named in the converge: the manifest records the collection's current one.
    current = (Path(__file__).resolve().parents[3] / "stacks" / "current").read_text().strip()
    assert manifest["stack"] == current and manifest["source_revision"] == "molecule"
    assert manifest["kernel"] == host.check_output("uname -r")
    assert manifest["build_time"].endswith("Z")
    assert host.file("/etc/trainstack/image.json").mode == 0o644


def test_generalize_removed_history_and_cloud_init_state(host):
    assert not host.file("/root/.bash_history").exists
    assert not host.file("/var/lib/cloud/instances").exists
    assert host.file("/etc/machine-id").content_string == ""
    assert host.run("ls /etc/ssh/ssh_host_* 2>/dev/null").stdout == ""


def test_selfcheck_report(host):
    report = json.loads(host.file("/etc/trainstack/selfcheck.json").content_string)
    checks = {c["check"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert checks["version:python"]["status"] == "pass"
    assert checks["version:slurm"] == {
        "check": "version:slurm",
        "status": "skip",
        "detail": "not installed (no role in this build installs it)",
    }
    assert checks["gpu"]["status"] == "skip" and "/dev/nvidia0 does not exist" in checks["gpu"]["detail"]
    assert checks["free-disk"]["status"] == "pass"
