"""Verifier for roles/node_health on a lab container: a real run of the installed script, then faults injected
into the node (a locked-memory limit below the lab's floor, a mount that is not there) and through the Slurm
prolog, each of which must be caught and named."""

import json

import pytest

SCRIPT = "/usr/local/lib/trainstack/node_health/node_health.py"
CONFIG = "/etc/trainstack/node_health.json"
HARDWARE = [
    "gpu_inventory",
    "gpu_ecc",
    "gpu_row_remap",
    "gpu_persistence",
    "gpu_clocks",
    "gpu_nvlink",
    "dcgm_diag",
    "efa_devices",
    "efa_libfabric",
    "gdrcopy",
    "torch_env",
    "slurm_state",
]


def run_checks(host, prefix=""):
    result = host.run(f"{prefix}python3 {SCRIPT} --config {CONFIG} --json")
    assert result.rc in (0, 1), result.stderr
    return result.rc, json.loads(result.stdout)


def by_check(report):
    return {row["check"]: row for row in report["checks"]}


def test_report_of_the_converge_run(host):
    report = json.loads(host.file("/var/lib/trainstack/node_health/last.json").content_string)
    assert report["ok"] is True and report["instance_type"] == "lab"
    rows = by_check(report)
    for name in HARDWARE:
        assert rows[name]["status"] == "skip", rows[name]
        assert rows[name]["message"], f"{name} skipped without a reason"
    for name in ("memlock", "memory", "disks", "mounts"):
        assert rows[name]["status"] == "pass", rows[name]


def test_clean_node_passes_now(host):
    rc, report = run_checks(host)
    assert rc == 0 and report["failed"] == []


def test_memlock_too_low_is_caught(host):
    rc, report = run_checks(host, "ulimit -S -l 1024; ")
    assert rc == 1
    assert report["failed"] == [
        {"check": "memlock", "severity": "isolate", "message": "ulimit -l is 1024 KiB, 4096 KiB required"}
    ]


def test_missing_mount_is_caught(host):
    result = host.run(f"python3 {SCRIPT} --config {CONFIG} --json --mount /fsx")
    report = json.loads(result.stdout)
    assert result.rc == 1
    assert [(f["check"], f["message"]) for f in report["failed"]] == [("mounts", "/fsx not mounted")]


@pytest.mark.parametrize("phase", ["prolog", "epilog"])
def test_slurm_hook_installed(host, phase):
    hook = host.file(f"/etc/slurm/{phase}.d/50-trainstack-node-health.sh")
    assert hook.mode == 0o755 and hook.user == "root"
    assert host.run(hook.path).rc == 0
    report = json.loads(host.file(f"/var/lib/trainstack/node_health/{phase}.json").content_string)
    assert report["ok"]


def test_prolog_fails_on_low_memlock(host):
    result = host.run("ulimit -S -l 1024; /etc/slurm/prolog.d/50-trainstack-node-health.sh")
    assert result.rc == 1
    report = json.loads(host.file("/var/lib/trainstack/node_health/prolog.json").content_string)
    assert [f["check"] for f in report["failed"]] == ["memlock"]


def test_unmounted_shared_dir_is_caught(host):
    """The real fault, last as it cannot be undone from inside the node: the shared filesystem goes away."""
    with host.sudo():
        assert host.run("umount /shared").rc == 0
    rc, report = run_checks(host)
    assert rc == 1
    assert ("mounts", "/shared not mounted") in [(f["check"], f["message"]) for f in report["failed"]]
