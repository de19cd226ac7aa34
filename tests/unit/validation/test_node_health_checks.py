"""node_health.py: parsers and checks against stand-in tool outputs, and the command line on this host."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "roles/node_health/files/node_health.py"
MIB = 1024 * 1024


def smi_tools(xml: str, **extra):
    return {"nvidia-smi -q -x": (0, xml), **extra}


def by_check(report):
    return {row["check"]: row for row in report["checks"]}


# ------------------------------------------------------------------------------------------- table
def test_every_type_has_complete_expectations(table, node_health):
    for name in table["types"]:
        expect = node_health.expectations(table, name)
        assert set(expect) == set(table["defaults"]), name
        if expect["gpu_count"]:
            assert expect["gpu_model"] and expect["gpu_memory_mib"], name
    for name in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "lab", "local"):
        assert name in table["types"]


def test_unknown_type_and_override_are_named(table, node_health):
    with pytest.raises(node_health.UsageError, match=r"--instance-type 'p9\.huge'.*known: g4dn\.12xlarge"):
        node_health.expectations(table, "p9.huge")
    with pytest.raises(node_health.UsageError, match=r"unknown keys \['gpu_colour'\]"):
        node_health.expectations(table, "lab", {"gpu_colour": "green"})


# ------------------------------------------------------------------------------------------- GPUs
def test_parse_current_layout(node_health, fixture_text):
    smi = node_health.parse_smi_xml(fixture_text("nvidia-smi-q-x.p5.xml"))
    assert smi["driver_version"] == "550.127.08"
    assert len(smi["gpus"]) == 8
    first = smi["gpus"][0]
    assert first["memory_mib"] == 81559
    assert first["ecc_uncorrected_volatile"] == 0  # 3 corrected errors do not count
    assert first["remap_pending"] == "No" and first["retired_pending"] is None
    assert first["throttle_active"] == ["gpu_idle"]


def test_parse_old_layout(node_health, fixture_text):
    gpu = node_health.parse_smi_xml(fixture_text("nvidia-smi-q-x.old-layout.xml"))["gpus"][0]
    assert gpu["ecc_uncorrected_volatile"] == 2
    assert gpu["retired_pending"] == "Yes" and gpu["remap_pending"] is None
    assert "hw_slowdown" in gpu["throttle_active"]


def test_healthy_p5_passes_every_gpu_check(probe_for, node_health, fixture_text):
    probe = probe_for("p5.48xlarge", smi_tools(fixture_text("nvidia-smi-q-x.p5.xml")))
    names = ["gpu_inventory", "gpu_ecc", "gpu_row_remap", "gpu_persistence", "gpu_clocks"]
    report = node_health.run_checks(probe, names)
    assert [r["status"] for r in report["checks"]] == ["pass"] * 5, report
    assert report["ok"]


def test_wrong_model_and_missing_gpu_are_named(probe_for, node_health, fixture_text):
    xml = fixture_text("nvidia-smi-q-x.p5.xml")
    seven = xml[: xml.rindex("    <gpu id=")] + "</nvidia_smi_log>\n"
    report = node_health.run_checks(probe_for("p5e.48xlarge", smi_tools(seven)), ["gpu_inventory"])
    row = report["checks"][0]
    assert row["status"] == "fail" and row["severity"] == "isolate"
    assert "7 GPU(s) visible, 8 expected" in row["message"]
    assert "model is not H200" in row["message"]
    assert "memory below" in row["message"]
    assert report["failed"] == [{"check": "gpu_inventory", "severity": "isolate", "message": row["message"]}]


def test_local_machine_takes_the_gpus_it_shows_or_the_ones_given(probe_for, node_health, fixture_text):
    # `local` (any single machine) has no GPU count in the catalog: nvidia-smi's answer is the expectation,
    # unless the caller gives one, and then a missing GPU fails as on any catalog type.
    xml = fixture_text("nvidia-smi-q-x.p5.xml")
    seven = xml[: xml.rindex("    <gpu id=")] + "</nvidia_smi_log>\n"
    row = node_health.run_checks(probe_for("local", smi_tools(seven)), ["gpu_inventory"])["checks"][0]
    assert row["status"] == "pass" and row["data"]["count"] == 7, row
    given = {"gpu_count": 8, "gpu_model": "H100"}
    row = node_health.run_checks(probe_for("local", smi_tools(seven), expect=given), ["gpu_inventory"])
    assert "7 GPU(s) visible, 8 expected" in row["checks"][0]["message"]
    row = node_health.run_checks(probe_for("local"), ["gpu_inventory"])["checks"][0]
    assert row["status"] == "skip" and "no GPU expected on local" in row["message"]


def test_old_layout_faults_get_their_remedy(probe_for, node_health, fixture_text):
    probe = probe_for("p4d.24xlarge", smi_tools(fixture_text("nvidia-smi-q-x.old-layout.xml")))
    rows = by_check(node_health.run_checks(probe, ["gpu_ecc", "gpu_row_remap", "gpu_clocks"]))
    assert (rows["gpu_ecc"]["status"], rows["gpu_ecc"]["severity"]) == ("fail", "reset")
    assert "00000000:53:00.0: 2" in rows["gpu_ecc"]["message"]
    assert (rows["gpu_row_remap"]["status"], rows["gpu_row_remap"]["severity"]) == ("fail", "reset")
    assert (rows["gpu_clocks"]["status"], rows["gpu_clocks"]["severity"]) == ("fail", "isolate")
    assert "hw_slowdown" in rows["gpu_clocks"]["message"]


def test_row_remap_failure_isolates(probe_for, node_health, fixture_text):
    xml = fixture_text("nvidia-smi-q-x.p5.xml").replace(
        "<remapped_row_failure>No</remapped_row_failure>",
        "<remapped_row_failure>Yes</remapped_row_failure>",
        1,
    )
    row = node_health.run_checks(probe_for("p5.48xlarge", smi_tools(xml)), ["gpu_row_remap"])["checks"][0]
    assert (row["status"], row["severity"]) == ("fail", "isolate")


def test_persistence_off_is_a_warning_not_a_failure(probe_for, node_health, fixture_text):
    xml = fixture_text("nvidia-smi-q-x.p5.xml").replace(
        "<persistence_mode>Enabled", "<persistence_mode>Disabled"
    )
    report = node_health.run_checks(probe_for("p5.48xlarge", smi_tools(xml)), ["gpu_persistence"])
    assert report["checks"][0]["status"] == "warn" and report["ok"]


def test_gpu_type_without_driver_fails_inventory_and_skips_the_rest(probe_for, node_health):
    rows = by_check(node_health.run_checks(probe_for("p5.48xlarge"), ["gpu_inventory", "gpu_ecc"]))
    assert rows["gpu_inventory"]["status"] == "fail"
    assert "nvidia-smi is not installed" in rows["gpu_inventory"]["message"]
    assert rows["gpu_ecc"]["status"] == "skip" and "see gpu_inventory" in rows["gpu_ecc"]["message"]


def test_lab_skips_hardware_checks_with_reasons(probe_for, node_health):
    names = ["gpu_inventory", "gpu_ecc", "gpu_nvlink", "efa_devices", "efa_libfabric", "gdrcopy", "dcgm_diag"]
    report = node_health.run_checks(probe_for("lab"), names)
    for row in report["checks"]:
        assert row["status"] == "skip", row
        assert row["message"], row
    assert report["ok"]


def test_xid_classification(node_health, fixture_text):
    events = node_health.parse_xids(fixture_text("dmesg-xid.txt"))
    assert [(e["xid"], e["severity"]) for e in events] == [
        (13, "monitor"),
        (94, "reset"),
        (79, "reboot"),
        (154, "reset"),
    ]
    assert events[2]["pci"] == "PCI:0000:75:00"


def test_xid_check_takes_the_worst_remedy(probe_for, node_health, fixture_text):
    probe = probe_for("p5.48xlarge", {"dmesg": (0, fixture_text("dmesg-xid.txt"))})
    row = node_health.run_checks(probe, ["gpu_xid"])["checks"][0]
    assert (row["status"], row["severity"]) == ("fail", "reboot")
    assert "Xid 79 x1" in row["message"] and "Xid 94 x1" in row["message"]


def test_application_xid_only_warns(probe_for, node_health, fixture_text):
    log = fixture_text("dmesg-xid.txt").splitlines()[1]
    row = node_health.run_checks(probe_for("p5.48xlarge", {"dmesg": (0, log)}), ["gpu_xid"])["checks"][0]
    assert (row["status"], row["severity"]) == ("warn", "monitor")


def test_unreadable_kernel_log_is_skipped(probe_for, node_health):
    probe = probe_for("lab", {"dmesg": (1, "dmesg: read kernel buffer failed: Operation not permitted")})
    row = node_health.run_checks(probe, ["gpu_xid"])["checks"][0]
    assert row["status"] == "skip" and "kernel log" in row["message"]


def test_nvlink_names_the_short_gpu(probe_for, node_health, fixture_text):
    tools = smi_tools(
        fixture_text("nvidia-smi-q-x.p5.xml"), **{"nvidia-smi nvlink -s": (0, fixture_text("nvlink-s.txt"))}
    )
    probe = probe_for("p5.48xlarge", tools, expect={"nvlink_links_per_gpu": 2})
    row = node_health.run_checks(probe, ["gpu_nvlink"])["checks"][0]
    assert row["status"] == "fail" and row["message"] == "GPU 3: 1/2"


def test_dcgm_failure_is_named(probe_for, node_health, fixture_text):
    probe = probe_for("p5.48xlarge", {"dcgmi diag -r 1 -j": (226, fixture_text("dcgmi-diag.json"))})
    row = node_health.run_checks(probe, ["dcgm_diag"])["checks"][0]
    assert row["status"] == "fail" and row["message"] == "Persistence Mode failed"


# ------------------------------------------------------------------------------------------- EFA, limits
def make_efa_tree(root: Path, count: int, down: tuple[int, ...] = ()) -> None:
    """A sysfs shaped like an EFA node: class/infiniband/rdmapNs0 -> device/driver -> .../drivers/efa."""
    driver = root / "bus/pci/drivers/efa"
    driver.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        dev = root / f"class/infiniband/rdmap{i}s0"
        (dev / "device").mkdir(parents=True)
        os.symlink(driver, dev / "device/driver")
        (dev / "ports/1").mkdir(parents=True)
        (dev / "ports/1/state").write_text("1: DOWN\n" if i in down else "4: ACTIVE\n")


def test_efa_count_and_port_state(probe_for, node_health, tmp_path):
    make_efa_tree(tmp_path / "sys", 31, down=(5,))
    row = node_health.run_checks(probe_for("p5.48xlarge"), ["efa_devices"])["checks"][0]
    assert row["status"] == "fail"
    assert "31 EFA device(s), 32 expected" in row["message"]
    assert "port not ACTIVE on rdmap5s0" in row["message"]


def test_efa_healthy(probe_for, node_health, tmp_path):
    make_efa_tree(tmp_path / "sys", 4)
    tools = {"fi_info -p efa -t FI_EP_RDM": (0, "provider: efa\n    fabric: efa\n" * 4)}
    rows = by_check(
        node_health.run_checks(probe_for("p4d.24xlarge", tools), ["efa_devices", "efa_libfabric"])
    )
    assert rows["efa_devices"]["status"] == "pass" and rows["efa_libfabric"]["status"] == "pass"


def test_missing_libfabric_is_named(probe_for, node_health):
    row = node_health.run_checks(probe_for("p4d.24xlarge"), ["efa_libfabric"])["checks"][0]
    assert row["status"] == "fail" and "fi_info is not installed" in row["message"]


@pytest.mark.parametrize(
    ("instance_type", "have", "status"),
    [
        ("lab", 8 * MIB, "pass"),
        ("lab", 1 * MIB, "fail"),
        ("p5.48xlarge", 8 * MIB, "fail"),
        ("p5.48xlarge", resource.RLIM_INFINITY, "pass"),
        ("local", 64 * 1024, "skip"),
    ],
)
def test_memlock(probe_for, node_health, instance_type, have, status):
    row = node_health.run_checks(probe_for(instance_type, memlock_bytes=have), ["memlock"])["checks"][0]
    assert row["status"] == status, row
    if status == "fail":
        assert row["message"].startswith("ulimit -l is ")


# ------------------------------------------------------------------------------------------- Slurm, mounts
@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("ts-compute1|idle|none", "pass"),
        ("ts-compute1|mixed|none", "pass"),
        ("ts-compute1|drained|node_health: gpu_xid", "fail"),
        ("ts-compute1|allocated+drain|maintenance", "fail"),
        ("ts-compute1|idle*|none", "fail"),
        ("ts-compute1|down*|Not responding", "fail"),
    ],
)
def test_slurm_state(probe_for, node_health, line, status):
    tools = {"sinfo -h -N -n ts-compute1 -o %N|%T|%E": (0, line + "\n")}
    row = node_health.run_checks(probe_for("lab", tools, slurm_node="ts-compute1"), ["slurm_state"])[
        "checks"
    ][0]
    assert row["status"] == status, row
    if status == "fail":
        assert line.split("|")[1] in row["message"] and line.split("|")[2] in row["message"]


def test_slurm_unknown_node_is_skipped(probe_for, node_health):
    tools = {"sinfo -h -N -n ts-x -o %N|%T|%E": (0, "")}
    row = node_health.run_checks(probe_for("lab", tools, slurm_node="ts-x"), ["slurm_state"])["checks"][0]
    assert row["status"] == "skip" and "not a node" in row["message"]


def test_mounts(probe_for, node_health, tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "22 1 0:21 / / rw,relatime - ext4 /dev/vda1 rw\n"
        "30 22 0:40 / /fsx rw,relatime - lustre 10.0.0.5@tcp:/abc rw\n"
        "31 22 0:41 / /scratch\\040area rw - xfs /dev/nvme1n1 rw\n"
    )
    assert (
        node_health.parse_mountinfo((tmp_path / "proc/self/mountinfo").read_text())["/scratch area"] == "xfs"
    )
    tools = {"stat -f -c %T /fsx": (0, "lustre\n")}
    probe = probe_for(
        "p5.48xlarge", tools, proc=tmp_path / "proc", expect={"mounts": ["/fsx:lustre", "/data"]}
    )
    row = node_health.run_checks(probe, ["mounts"])["checks"][0]
    assert row["status"] == "fail" and row["message"] == "/data not mounted"
    probe = probe_for("p5.48xlarge", tools, proc=tmp_path / "proc", expect={"mounts": ["/fsx:nfs4"]})
    assert (
        node_health.run_checks(probe, ["mounts"])["checks"][0]["message"] == "/fsx is lustre, nfs4 expected"
    )


def test_a_crashing_check_is_a_named_failure(probe_for, node_health, tmp_path):
    probe = probe_for("lab", proc=tmp_path / "nowhere")
    report = node_health.run_checks(probe, ["memory"])
    assert report["failed"][0]["check"] == "memory"
    assert "check crashed: FileNotFoundError" in report["failed"][0]["message"]


# ------------------------------------------------------------------------------------------- command line
def run_cli(table_file, *args):
    argv = [sys.executable, str(SCRIPT), "--table", str(table_file), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_cli_bad_input_is_named(table_file):
    done = run_cli(table_file, "--instance-type", "p9.huge")
    assert done.returncode == 2 and "--instance-type 'p9.huge'" in done.stderr
    done = run_cli(table_file, "--instance-type", "lab", "--checks", "memory,warp_drive")
    assert done.returncode == 2 and "--checks: unknown ['warp_drive']" in done.stderr
    assert run_cli(table_file).returncode == 2


def test_cli_json_on_this_host(tmp_path, table_file):
    out = tmp_path / "r.json"
    done = run_cli(
        table_file,
        "--instance-type",
        "lab",
        "--checks",
        "memory,disks,mounts",
        "--mount",
        "/nonexistent-fsx",
        "--json",
        "--output",
        str(out),
    )
    report = json.loads(done.stdout)
    assert json.loads(out.read_text()) == report
    assert done.returncode == 1
    assert any(
        f["check"] == "mounts" and "/nonexistent-fsx not mounted" in f["message"] for f in report["failed"]
    )
    assert by_check(report)["memory"]["status"] == "pass"


def test_torch_probe_on_cpu(probe_for, node_health):
    """The real torch_probe.py with the controller's CPU torch: a gloo all-reduce of two processes."""
    pytest.importorskip("torch")
    probe = probe_for("lab", torch_python=sys.executable)
    probe.run = node_health.Probe.run.__get__(probe)  # real subprocesses for this one
    row = node_health.run_checks(probe, ["torch_env"])["checks"][0]
    assert row["status"] == "pass", row
    allreduce = row["data"]["allreduce"]
    assert (allreduce["backend"], allreduce["ranks"], allreduce["ok"]) == ("gloo", 2, True)
    assert row["data"]["torch"].startswith("2.")
