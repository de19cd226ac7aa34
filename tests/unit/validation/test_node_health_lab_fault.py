"""The lab's GPU fault injection and the reason a failing node is drained with.

A lab node has no GPU, so the lab stages a GPU fault as a file of kernel-log lines
(node_health_lab_fault_file) that the gpu_xid check reads as if the kernel had logged them; slurmd's health
check then drains the node with a reason that names the failed check, which is what `sinfo -R` shows.
"""

from __future__ import annotations

import json

XID_79 = "NVRM: Xid (PCI:0000:00:1e): 79, pid=0, GPU has fallen off the bus.\n"


def test_an_injected_xid_fails_gpu_xid_on_a_lab_node(probe_for, node_health, tmp_path):
    fault = tmp_path / "lab-fault-gpu"
    fault.write_text(XID_79)
    probe = probe_for("lab", {"dmesg": (0, "[    1.0] booted\n")}, fault_injection_file=fault)
    report = node_health.run_checks(probe, ["gpu_xid"])
    assert not report["ok"]
    row = report["checks"][0]
    assert (row["status"], row["severity"], row["message"]) == ("fail", "reboot", "Xid 79 x1")


def test_the_fault_is_read_where_the_kernel_log_is_not(probe_for, node_health, tmp_path):
    """In a container dmesg may be refused: the injected fault must still be seen."""
    fault = tmp_path / "lab-fault-gpu"
    fault.write_text(XID_79)
    probe = probe_for("lab", {"dmesg": (1, "dmesg: read kernel buffer failed")}, fault_injection_file=fault)
    row = node_health.run_checks(probe, ["gpu_xid"])["checks"][0]
    assert row["status"] == "fail"


def test_without_the_file_the_node_passes(probe_for, node_health, tmp_path):
    probe = probe_for("lab", {"dmesg": (0, "[    1.0] booted\n")}, fault_injection_file=tmp_path / "absent")
    assert node_health.run_checks(probe, ["gpu_xid"])["ok"]


def test_the_drain_reason_names_each_failed_check_on_one_line(node_health):
    report = {
        "failed": [
            {"check": "gpu_xid", "severity": "reboot", "message": "Xid 79 x1"},
            {"check": "mounts", "severity": "isolate", "message": "/shared not mounted\n'quoted' \"too\""},
        ]
    }
    reason = node_health.drain_reason(report)
    assert reason == "node_health: gpu_xid: Xid 79 x1; mounts: /shared not mounted quoted too"
    long = node_health.drain_reason({"failed": [{"check": "gpu_xid", "message": "x" * 500}]})
    assert len(long) == 200 and long.endswith("...")


def test_the_reason_option_prints_the_reason_from_the_config(node_health, table_file, tmp_path, capsys):
    fault = tmp_path / "lab-fault-gpu"
    fault.write_text(XID_79)
    config = tmp_path / "node_health.json"
    config.write_text(
        json.dumps({"instance_type": "lab", "table": str(table_file), "fault_injection_file": str(fault)})
    )
    rc = node_health.main(["--config", str(config), "--checks", "gpu_xid", "--reason"])
    assert rc == 1
    assert capsys.readouterr().out.strip() == "node_health: gpu_xid: Xid 79 x1"
    fault.unlink()
    assert node_health.main(["--config", str(config), "--checks", "gpu_xid", "--reason"]) == 0
    assert capsys.readouterr().out.strip() == ""
