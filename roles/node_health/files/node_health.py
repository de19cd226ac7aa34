#!/usr/bin/env python3
"""Per-node health checks of a training node, as one JSON document.

Why a standalone script with only the standard library: the same file runs under Ansible (role
``node_health``), from a Slurm prolog/epilog (no Ansible there, and it must finish in seconds) and by
hand on a GPU box that has nothing but ``python3``. Expectations come from the collection's instance catalog
(stacks/instance_types.yml): the node_health role renders this node's row into ``instance_types.json`` next to
this file. A row whose gpu_count is null (the ``local`` entry: any single machine) takes the GPUs nvidia-smi
shows. Every check reports pass, fail, warn (a failure whose remedy is only ``monitor``) or skip with the
reason, so that a node without GPUs or EFA still gives a full report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1
HERE = Path(__file__).resolve().parent
DEFAULT_TABLE = HERE / "instance_types.json"
DEFAULT_TORCH_PROBE = HERE / "torch_probe.py"
# What an operator does about a failure, most drastic first. "monitor" failures are reported as warnings.
SEVERITIES = ("isolate", "reboot", "reset", "monitor")
QUICK_CHECKS = (
    "gpu_inventory",
    "gpu_ecc",
    "gpu_row_remap",
    "gpu_xid",
    "efa_devices",
    "memlock",
    "mounts",
    "memory",
)

# Xid -> remedy, after NVIDIA's Xid catalogue. Application-caused Xids (13, 31, 43, 45, 68) only need
# watching; hardware Xids name the smallest action that clears them.
XID_SEVERITY: dict[int, str] = {
    13: "monitor",
    31: "monitor",
    43: "monitor",
    45: "monitor",
    48: "reset",
    61: "reset",
    62: "reset",
    63: "monitor",
    64: "reset",
    68: "monitor",
    69: "reset",
    74: "reset",
    79: "reboot",
    92: "monitor",
    94: "reset",
    95: "reboot",
    109: "monitor",
    119: "reboot",
    120: "reboot",
    140: "reboot",
}
XID_LINE = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+),(?P<text>.*)")
# Xid 154 carries the driver's own recovery verdict in its text.
XID154_ACTIONS = (("Node Reboot Required", "reboot"), ("Reset Required", "reset"), ("Drain", "reset"))
THROTTLE_HW = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
THROTTLE_SW = ("sw_thermal_slowdown",)
SLURM_BAD_STATES = ("drain", "down", "fail", "inval", "maint", "not_responding", "reboot")


class UsageError(Exception):
    """Bad input, named by option; raised before any check runs."""


@dataclass
class Result:
    """One check's outcome: what an operator needs to decide what to do with the node."""

    check: str
    status: str  # pass | fail | warn | skip
    severity: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Probe:
    """Everything a check reads from the node; tests point it at fixture trees and recorded outputs."""

    expect: dict[str, Any]
    instance_type: str
    sysfs: Path = Path("/sys")
    proc: Path = Path("/proc")
    torch_python: str = ""
    torch_probe: Path = DEFAULT_TORCH_PROBE
    dcgm_level: int = 1
    gdrcopy_sanity: bool = False
    slurm_node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    timeout: int = 60
    # The lab's fault injection: kernel-log lines (such as an Xid) read as if the kernel had logged them, so
    # that a GPU fault can be staged on a node without a GPU. Lab nodes only (node_health_lab_fault_file).
    fault_injection_file: Path | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    def which(self, name: str) -> str | None:
        """A tool's path, or None when it is not installed."""
        return shutil.which(name)

    def run(self, argv: list[str], timeout: int | None = None) -> tuple[int, str]:
        """rc and stdout+stderr; a timeout or a missing binary becomes rc 124/127 instead of an exception."""
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return 124, f"timed out after {timeout or self.timeout}s: {' '.join(argv)}"
        except FileNotFoundError:
            return 127, f"not found: {argv[0]}"
        return done.returncode, done.stdout + done.stderr

    def memlock(self) -> int:
        """Soft RLIMIT_MEMLOCK in bytes (RLIM_INFINITY for unlimited), as a job started from here inherits."""
        return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


# ---------------------------------------------------------------------------------------------- expectations
def load_table(path: Path) -> dict[str, Any]:
    """The per-instance-type table; a broken file is a usage error, not a failed node."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(f"--table {path}: cannot read the instance-type table: {err}") from err
    if not isinstance(table.get("types"), dict) or not isinstance(table.get("defaults"), dict):
        raise UsageError(f"--table {path}: needs 'defaults' and 'types' objects")
    return table


def expectations(table: dict[str, Any], instance_type: str, overrides: dict[str, Any] | None = None) -> dict:
    """Defaults, then the type's row, then per-site overrides; an unknown type names the known ones."""
    if instance_type not in table["types"]:
        known = ", ".join(sorted(table["types"]))
        raise UsageError(f"--instance-type {instance_type!r} is not in the table; known: {known}")
    unknown = sorted(set(overrides or {}) - set(table["defaults"]))
    if unknown:
        raise UsageError(f"expect overrides: unknown keys {unknown}; known: {sorted(table['defaults'])}")
    return {**table["defaults"], **table["types"][instance_type], **(overrides or {})}


# ---------------------------------------------------------------------------------------------- GPU parsing
def _text(node: ET.Element | None, path: str) -> str | None:
    found = node.find(path) if node is not None else None
    value = (found.text or "").strip() if found is not None else ""
    return value if value and value not in ("N/A", "[N/A]", "[Not Supported]") else None


def _number(text: str | None) -> float | None:
    match = re.match(r"^-?\d+(\.\d+)?", text or "")
    return float(match.group(0)) if match else None


def parse_smi_xml(xml_text: str) -> dict[str, Any]:
    """`nvidia-smi -q -x` reduced to what the checks use.

    Field names differ between drivers (ECC counters were single_bit/double_bit before the sram/dram split;
    throttle reasons became clocks_event_reasons in R535), so each reading takes whichever spelling is
    present and None when none is."""
    root = ET.fromstring(xml_text)
    gpus = []
    for gpu in root.findall("gpu"):
        volatile = gpu.find("ecc_errors/volatile")
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        active = []
        if reasons is not None:
            for leaf in reasons:
                if (leaf.text or "").strip() == "Active":
                    active.append(re.sub(r"^clocks_(event|throttle)_reason_", "", leaf.tag))
        gpus.append(
            {
                "bus_id": gpu.get("id") or _text(gpu, "pci/pci_bus_id"),
                "name": _text(gpu, "product_name"),
                "uuid": _text(gpu, "uuid"),
                "memory_mib": _number(_text(gpu, "fb_memory_usage/total")),
                "persistence": _text(gpu, "persistence_mode"),
                "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
                "ecc_uncorrected_volatile": _uncorrected(volatile),
                "retired_pending": _text(gpu, "retired_pages/pending_retirement")
                or _text(gpu, "retired_pages/pending_blacklist"),
                "remap_pending": _text(gpu, "remapped_rows/remapped_row_pending"),
                "remap_failure": _text(gpu, "remapped_rows/remapped_row_failure"),
                "throttle_active": active if reasons is not None else None,
                "sm_clock_mhz": _number(_text(gpu, "clocks/sm_clock")),
                "sm_clock_max_mhz": _number(_text(gpu, "max_clocks/sm_clock")),
            }
        )
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpus": gpus,
    }


def _uncorrected(volatile: ET.Element | None) -> int | None:
    """Sum of volatile uncorrected counters: sram/dram *_uncorrectable* leaves (R470+) or double_bit/total."""
    if volatile is None:
        return None
    values = [
        _number(leaf.text) for leaf in volatile.iter() if "uncorrectable" in leaf.tag and not list(leaf)
    ]
    values.append(_number(_text(volatile, "double_bit/total")))
    known = [int(v) for v in values if v is not None]
    return sum(known) if known else None


def parse_xids(log_text: str) -> list[dict[str, Any]]:
    """Xid lines from the kernel log, each with the remedy it calls for."""
    events = []
    for line in log_text.splitlines():
        match = XID_LINE.search(line)
        if not match:
            continue
        xid = int(match.group("xid"))
        severity = XID_SEVERITY.get(xid, "monitor")
        if xid == 154:
            severity = next((sev for text, sev in XID154_ACTIONS if text in line), "monitor")
        events.append(
            {"xid": xid, "pci": match.group("pci"), "severity": severity, "text": match.group("text")}
        )
    return events


def parse_nvlink(text: str) -> dict[int, int]:
    """Active links per GPU from `nvidia-smi nvlink -s` (inactive links print <inactive>)."""
    links: dict[int, int] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+):", line)
        if head:
            current = int(head.group(1))
            links[current] = 0
        elif current is not None and re.search(r"Link \d+: [\d.]+ GB/s", line):
            links[current] += 1
    return links


def parse_dcgm(text: str) -> list[dict[str, str]]:
    """Failed tests of `dcgmi diag -j`; walks the document because its layout changed between DCGM 3 and 4."""
    failures: list[dict[str, str]] = []

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict):
            here = str(node.get("name") or node.get("test_name") or name)
            if str(node.get("status", "")).lower() == "fail":
                info = node.get("info") or node.get("warnings") or node.get("error") or ""
                failures.append({"test": here, "info": json.dumps(info)[:300]})
            for value in node.values():
                walk(value, here)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    walk(json.loads(text), "dcgm")
    return failures


def parse_sinfo(text: str) -> list[dict[str, str]]:
    """`sinfo -h -N -o %N|%T|%E` rows (a node in two partitions appears twice; same state)."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0]:
            rows.append({"node": parts[0], "state": parts[1], "reason": parts[2]})
    return rows


def parse_mountinfo(text: str) -> dict[str, str]:
    """Mount point -> filesystem type, from /proc/self/mountinfo (the last mount on a path wins)."""
    mounts = {}
    for line in text.splitlines():
        left, _sep, right = line.partition(" - ")
        fields = left.split()
        if len(fields) >= 5 and right:
            mounts[fields[4].replace("\\040", " ")] = right.split()[0]
    return mounts


# ---------------------------------------------------------------------------------------------- checks
Check = Callable[[Probe], Result]


def _result(check: str, severity: str, problems: list[str], ok: str, data: dict[str, Any]) -> Result:
    if problems:
        status = "warn" if severity == "monitor" else "fail"
        return Result(check, status, severity, "; ".join(problems), data)
    return Result(check, "pass", severity, ok, data)


def _skip(check: str, severity: str, reason: str) -> Result:
    return Result(check, "skip", severity, reason)


def _smi(probe: Probe) -> dict[str, Any]:
    """Run nvidia-smi once per report; {'error': ...} when it is absent or broken."""
    if "smi" not in probe._cache:
        if not probe.which("nvidia-smi"):
            probe._cache["smi"] = {"error": "nvidia-smi is not installed", "absent": True}
        else:
            rc, out = probe.run(["nvidia-smi", "-q", "-x"])
            try:
                probe._cache["smi"] = (
                    parse_smi_xml(out) if rc == 0 else {"error": f"nvidia-smi rc={rc}: {out[-300:]}"}
                )
            except ET.ParseError as err:
                probe._cache["smi"] = {"error": f"nvidia-smi -q -x gave unparseable XML: {err}"}
    return probe._cache["smi"]


def _want_gpus(probe: Probe) -> int:
    """GPUs this node must have; a null expectation (a `local` machine) means the ones nvidia-smi lists."""
    want = probe.expect.get("gpu_count")
    if want is not None:
        return int(want)
    return len(_smi(probe).get("gpus") or [])


def _gpu_data(probe: Probe, check: str, severity: str) -> tuple[list[dict[str, Any]] | None, Result | None]:
    """GPUs for a per-GPU check, or the skip that explains why there are none to look at."""
    expected = _want_gpus(probe)
    smi = _smi(probe)
    if expected == 0 and smi.get("absent"):
        return None, _skip(
            check, severity, f"no GPU expected on {probe.instance_type} and nvidia-smi is absent"
        )
    if "error" in smi:
        return None, _skip(check, severity, f"no GPU data ({smi['error']}); see gpu_inventory")
    if not smi["gpus"]:
        return None, _skip(check, severity, "nvidia-smi lists no GPU; see gpu_inventory")
    return smi["gpus"], None


def check_gpu_inventory(probe: Probe) -> Result:
    """Count, model and memory against the table: a GPU that fell off the bus shows up here first."""
    expect = probe.expect
    smi = _smi(probe)
    want = _want_gpus(probe)
    if want == 0 and smi.get("absent"):
        return _skip(
            "gpu_inventory", "isolate", f"no GPU expected on {probe.instance_type} and nvidia-smi is absent"
        )
    if "error" in smi:
        return Result("gpu_inventory", "fail", "isolate", f"expected {want} GPU(s): {smi['error']}")
    gpus = smi["gpus"]
    problems = []
    if len(gpus) != want:
        problems.append(f"{len(gpus)} GPU(s) visible, {want} expected")
    model = expect.get("gpu_model")
    wrong = [g["bus_id"] for g in gpus if model and model not in (g["name"] or "")]
    if wrong:
        problems.append(f"model is not {model} on {', '.join(wrong)}")
    if expect.get("gpu_memory_mib"):
        floor = float(expect["gpu_memory_mib"]) * (1 - float(expect["gpu_memory_tolerance"]))
        small = [f"{g['bus_id']} ({g['memory_mib']} MiB)" for g in gpus if (g["memory_mib"] or 0) < floor]
        if small:
            problems.append(f"memory below {floor:.0f} MiB on {', '.join(small)}")
    names = sorted({g["name"] or "?" for g in gpus})
    data = {"count": len(gpus), "models": names, "driver": smi["driver_version"], "cuda": smi["cuda_version"]}
    return _result("gpu_inventory", "isolate", problems, f"{len(gpus)} x {', '.join(names)}", data)


def check_gpu_ecc(probe: Probe) -> Result:
    """Volatile uncorrected ECC errors since the last driver load: a GPU reset clears the state."""
    gpus, skip = _gpu_data(probe, "gpu_ecc", "reset")
    if skip:
        return skip
    assert gpus is not None
    counted = [g for g in gpus if g["ecc_uncorrected_volatile"] is not None]
    if not counted:
        return _skip(
            "gpu_ecc", "reset", "the driver reports no ECC counters for these GPUs (ECC off or unsupported)"
        )
    bad = [
        f"{g['bus_id']}: {g['ecc_uncorrected_volatile']}" for g in counted if g["ecc_uncorrected_volatile"]
    ]
    problems = [f"uncorrected ECC errors {', '.join(bad)}"] if bad else []
    return _result(
        "gpu_ecc", "reset", problems, f"0 uncorrected on {len(counted)} GPU(s)", {"gpus": len(counted)}
    )


def check_gpu_row_remap(probe: Probe) -> Result:
    """Row remapping (A100 and later) or page retirement (older): pending needs a reset, failure a new GPU."""
    gpus, skip = _gpu_data(probe, "gpu_row_remap", "reset")
    if skip:
        return skip
    assert gpus is not None
    failed = [g["bus_id"] for g in gpus if g["remap_failure"] == "Yes"]
    pending = [g["bus_id"] for g in gpus if "Yes" in (g["remap_pending"], g["retired_pending"])]
    if failed:
        return Result("gpu_row_remap", "fail", "isolate", f"row remapping failed on {', '.join(failed)}")
    known = [g for g in gpus if g["remap_pending"] or g["retired_pending"]]
    if not known:
        return _skip("gpu_row_remap", "reset", "the driver reports neither row remapping nor page retirement")
    problems = [f"remap/retirement pending on {', '.join(pending)}"] if pending else []
    return _result("gpu_row_remap", "reset", problems, f"nothing pending on {len(known)} GPU(s)", {})


def check_gpu_persistence(probe: Probe) -> Result:
    """Persistence off makes every job pay driver initialisation and loses state between jobs."""
    gpus, skip = _gpu_data(probe, "gpu_persistence", "monitor")
    if skip:
        return skip
    assert gpus is not None
    off = [g["bus_id"] for g in gpus if g["persistence"] != "Enabled"]
    problems = [f"persistence mode off on {', '.join(off)} (nvidia-persistenced)"] if off else []
    return _result("gpu_persistence", "monitor", problems, "enabled on every GPU", {})


def check_gpu_clocks(probe: Probe) -> Result:
    """Hardware slowdown is a board or cooling fault (replace); software thermal slowdown needs watching."""
    gpus, skip = _gpu_data(probe, "gpu_clocks", "isolate")
    if skip:
        return skip
    assert gpus is not None
    hw = [
        f"{g['bus_id']}: {','.join(r for r in g['throttle_active'] or [] if r in THROTTLE_HW)}" for g in gpus
    ]
    hw = [item for item in hw if not item.endswith(": ")]
    sw = [g["bus_id"] for g in gpus if set(g["throttle_active"] or []) & set(THROTTLE_SW)]
    clocks = {g["bus_id"]: [g["sm_clock_mhz"], g["sm_clock_max_mhz"]] for g in gpus}
    if hw:
        return Result(
            "gpu_clocks", "fail", "isolate", f"hardware clock slowdown active on {'; '.join(hw)}", clocks
        )
    problems = [f"software thermal slowdown on {', '.join(sw)}"] if sw else []
    return _result("gpu_clocks", "monitor", problems, "no hardware slowdown active", clocks)


def _kernel_log(probe: Probe) -> tuple[str | None, str]:
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        if probe.which(argv[0]):
            rc, out = probe.run(argv, timeout=30)
            if rc == 0:
                return out, " ".join(argv)
    return None, "neither dmesg nor journalctl -k could read the kernel log"


def _injected_fault(probe: Probe) -> str | None:
    """The lab's injected kernel-log lines, or None where no fault file is configured or present."""
    if probe.fault_injection_file is None:
        return None
    try:
        return probe.fault_injection_file.read_text(encoding="utf-8")
    except OSError:
        return None


def check_gpu_xid(probe: Probe) -> Result:
    """Xid events since boot, each classified; the worst remedy becomes the check's severity."""
    log, source = _kernel_log(probe)
    fault = _injected_fault(probe)
    if fault is not None:
        log, source = (
            (log or "") + "\n" + fault,
            f"{source}, lab fault injection {probe.fault_injection_file}",
        )
    if log is None:
        return _skip("gpu_xid", "monitor", source)
    events = parse_xids(log)
    if not events:
        return Result("gpu_xid", "pass", "monitor", f"no Xid in the kernel log ({source})")
    worst = min((e["severity"] for e in events), key=SEVERITIES.index)
    counts: dict[int, int] = {}
    for event in events:
        counts[event["xid"]] = counts.get(event["xid"], 0) + 1
    text = ", ".join(f"Xid {xid} x{n}" for xid, n in sorted(counts.items()))
    return _result("gpu_xid", worst, [text], "", {"events": events[-20:]})


def check_gpu_nvlink(probe: Probe) -> Result:
    """Every NVLink must be up: one down link halves a ring's bandwidth on that GPU."""
    want = int(probe.expect["nvlink_links_per_gpu"])
    if want == 0:
        return _skip("gpu_nvlink", "isolate", f"{probe.instance_type} has no NVLink expectation")
    _gpus, skip = _gpu_data(probe, "gpu_nvlink", "isolate")
    if skip:
        return skip
    rc, out = probe.run(["nvidia-smi", "nvlink", "-s"])
    if rc != 0:
        return Result("gpu_nvlink", "fail", "isolate", f"nvidia-smi nvlink -s rc={rc}: {out[-200:]}")
    links = parse_nvlink(out)
    short = [f"GPU {i}: {n}/{want}" for i, n in sorted(links.items()) if n < want]
    return _result(
        "gpu_nvlink", "isolate", short, f"{want} links up on {len(links)} GPU(s)", {"links": links}
    )


def check_dcgm(probe: Probe) -> Result:
    """DCGM's own diagnostic at the chosen level (1: seconds, 2: about two minutes, 3: longer)."""
    if probe.dcgm_level <= 0:
        return _skip("dcgm_diag", "isolate", "DCGM diagnostics switched off (level 0)")
    if not probe.which("dcgmi"):
        return _skip("dcgm_diag", "isolate", "DCGM is not installed (no dcgmi)")
    rc, out = probe.run(["dcgmi", "diag", "-r", str(probe.dcgm_level), "-j"], timeout=1800)
    try:
        failures = parse_dcgm(out)
    except ValueError:
        return Result("dcgm_diag", "fail", "isolate", f"dcgmi diag rc={rc}, no JSON: {out[-200:]}")
    problems = [f"{f['test']} failed" for f in failures]
    return _result(
        "dcgm_diag", "isolate", problems, f"level {probe.dcgm_level} passed", {"failures": failures}
    )


def _efa_devices(probe: Probe) -> list[dict[str, str]]:
    devices = []
    root = probe.sysfs / "class" / "infiniband"
    for dev in sorted(root.glob("*")) if root.is_dir() else []:
        driver = dev / "device" / "driver"
        if driver.exists() and os.path.basename(os.path.realpath(driver)) == "efa":
            states = [
                (port / "state").read_text(encoding="utf-8").strip()
                for port in sorted((dev / "ports").glob("*"))
                if (port / "state").is_file()
            ]
            devices.append({"device": dev.name, "ports": ",".join(states)})
    return devices


def check_efa_devices(probe: Probe) -> Result:
    """EFA interfaces bound to the efa driver with an ACTIVE port, against the type's count."""
    want = int(probe.expect["efa_interfaces"])
    devices = _efa_devices(probe)
    if want == 0 and not devices:
        return _skip("efa_devices", "isolate", f"no EFA interface expected on {probe.instance_type}")
    problems = []
    if len(devices) != want:
        problems.append(f"{len(devices)} EFA device(s), {want} expected")
    down = [d["device"] for d in devices if "ACTIVE" not in d["ports"]]
    if down:
        problems.append(f"port not ACTIVE on {', '.join(down)}")
    return _result(
        "efa_devices", "isolate", problems, f"{len(devices)} EFA device(s) active", {"devices": devices}
    )


def check_efa_libfabric(probe: Probe) -> Result:
    """libfabric must offer the efa provider's RDM endpoint, which is what aws-ofi-nccl opens."""
    if int(probe.expect["efa_interfaces"]) == 0:
        return _skip("efa_libfabric", "isolate", f"no EFA interface expected on {probe.instance_type}")
    if not probe.which("fi_info"):
        return Result(
            "efa_libfabric", "fail", "isolate", "fi_info is not installed (libfabric/EFA installer)"
        )
    rc, out = probe.run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    domains = len(re.findall(r"provider:\s*efa", out))
    problems = [] if rc == 0 and domains else [f"fi_info -p efa rc={rc}: {out.strip()[-200:]}"]
    return _result("efa_libfabric", "isolate", problems, f"efa provider: {domains} RDM domain(s)", {})


def check_memlock(probe: Probe) -> Result:
    """Locked memory of processes started from here: EFA and GPUDirect RDMA register (pin) buffers."""
    want = probe.expect["memlock_kib"]
    have = probe.memlock()
    shown = "unlimited" if have == resource.RLIM_INFINITY else f"{have // 1024} KiB"
    if want in (0, "0", None):
        return _skip(
            "memlock", "isolate", f"no locked-memory requirement on {probe.instance_type} (have {shown})"
        )
    if want == "unlimited":
        ok = have == resource.RLIM_INFINITY
    else:
        ok = have == resource.RLIM_INFINITY or have // 1024 >= int(want)
    needed = "unlimited" if want == "unlimited" else f"{want} KiB"
    problems = [] if ok else [f"ulimit -l is {shown}, {needed} required"]
    return _result("memlock", "isolate", problems, f"ulimit -l {shown}", {"memlock": shown})


def check_gdrcopy(probe: Probe) -> Result:
    """GDRCopy's driver (gdrdrv) loaded, its device present; the sanity test when asked (slow)."""
    if not probe.expect["gdrcopy"] or _want_gpus(probe) == 0:
        return _skip("gdrcopy", "monitor", f"GDRCopy not expected on {probe.instance_type}")
    problems = []
    if not (probe.sysfs / "module" / "gdrdrv").exists():
        problems.append("kernel module gdrdrv not loaded")
    if not Path("/dev/gdrdrv").exists():
        problems.append("/dev/gdrdrv missing")
    if probe.gdrcopy_sanity and not problems:
        if not probe.which("gdrcopy_sanity"):
            problems.append("gdrcopy_sanity not installed")
        else:
            rc, out = probe.run(["gdrcopy_sanity"], timeout=600)
            if rc != 0:
                problems.append(f"gdrcopy_sanity rc={rc}: {out.strip()[-200:]}")
    return _result("gdrcopy", "monitor", problems, "gdrdrv loaded", {})


def check_torch(probe: Probe) -> Result:
    """Versions plus a CUDA matmul and an all-reduce over the node's GPUs, run by the training interpreter."""
    python = probe.torch_python or sys.executable
    rc, out = probe.run([python, "-c", "import torch"], timeout=120)
    if rc != 0:
        return _skip("torch_env", "isolate", f"torch is not importable by {python} (set --torch-python)")
    rc, out = probe.run([python, str(probe.torch_probe)], timeout=600)
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Result("torch_env", "fail", "isolate", f"torch probe rc={rc}: {out.strip()[-300:]}")
    want = _want_gpus(probe)
    problems = list(report.get("problems", []))
    if want and report.get("cuda_devices") != want:
        problems.append(f"torch sees {report.get('cuda_devices')} CUDA device(s), {want} expected")
    versions = {k: report.get(k) for k in ("torch", "cuda", "cudnn", "nccl")}
    ok = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    return _result("torch_env", "isolate", problems, ok, report)


def check_slurm(probe: Probe) -> Result:
    """A drained or down node takes no jobs: report it with Slurm's own reason."""
    if not probe.which("sinfo"):
        return _skip("slurm_state", "isolate", "Slurm is not installed here (no sinfo)")
    rc, out = probe.run(["sinfo", "-h", "-N", "-n", probe.slurm_node, "-o", "%N|%T|%E"], timeout=30)
    if rc != 0:
        return Result("slurm_state", "fail", "isolate", f"sinfo rc={rc}: {out.strip()[-200:]}")
    rows = parse_sinfo(out)
    if not rows:
        return _skip("slurm_state", "isolate", f"{probe.slurm_node} is not a node of this Slurm cluster")
    state = rows[0]["state"]
    bad = [word for word in SLURM_BAD_STATES if word in state.lower()] or (
        ["not_responding"] if "*" in state else []
    )
    problems = [f"Slurm state {state} (reason: {rows[0]['reason']})"] if bad else []
    return _result("slurm_state", "isolate", problems, f"Slurm state {state}", rows[0])


def check_memory(probe: Probe) -> Result:
    """Host memory the kernel sees: a dead DIMM lowers MemTotal."""
    meminfo = (probe.proc / "meminfo").read_text(encoding="utf-8")
    total_kib = int(re.search(r"^MemTotal:\s+(\d+)", meminfo, re.M).group(1))  # type: ignore[union-attr]
    gib = total_kib / 1024 / 1024
    want = float(probe.expect["min_memory_gib"])
    problems = [f"{gib:.0f} GiB memory, {want:g} GiB expected"] if gib < want else []
    return _result("memory", "isolate", problems, f"{gib:.1f} GiB", {"total_gib": round(gib, 1)})


def check_disks(probe: Probe) -> Result:
    """Free space on the paths jobs write to (checkpoints, caches, /tmp)."""
    floor = float(probe.expect["disk_min_free_pct"])
    free = {}
    for path in probe.expect["disk_paths"]:
        try:
            st = os.statvfs(path)
        except OSError as err:
            free[path] = f"error: {err.strerror}"
            continue
        free[path] = round(100.0 * st.f_bavail / st.f_blocks, 1) if st.f_blocks else 100.0
    low = [
        f"{p} {v}% free" if not isinstance(v, str) else f"{p} {v}"
        for p, v in free.items()
        if isinstance(v, str) or v < floor
    ]
    problems = [f"below {floor:g}% free: {', '.join(low)}"] if low else []
    return _result("disks", "monitor", problems, ", ".join(f"{p} {v}% free" for p, v in free.items()), free)


def check_mounts(probe: Probe) -> Result:
    """Required mounts (``/fsx`` or ``/fsx:lustre``) present, of the right type, and answering within 10 s."""
    wanted = list(probe.expect["mounts"])
    if not wanted:
        return _skip("mounts", "isolate", f"no mount required on {probe.instance_type}")
    mounts = parse_mountinfo((probe.proc / "self" / "mountinfo").read_text(encoding="utf-8"))
    problems = []
    for item in wanted:
        path, _sep, fstype = item.partition(":")
        if path not in mounts:
            problems.append(f"{path} not mounted")
        elif fstype and mounts[path] != fstype:
            problems.append(f"{path} is {mounts[path]}, {fstype} expected")
        else:
            rc, out = probe.run(["stat", "-f", "-c", "%T", path], timeout=10)
            if rc != 0:
                problems.append(f"{path} does not answer: {out.strip()[-120:]}")
    return _result("mounts", "isolate", problems, f"mounted: {', '.join(wanted)}", {"required": wanted})


CHECKS: dict[str, Check] = {
    "gpu_inventory": check_gpu_inventory,
    "gpu_ecc": check_gpu_ecc,
    "gpu_row_remap": check_gpu_row_remap,
    "gpu_xid": check_gpu_xid,
    "gpu_persistence": check_gpu_persistence,
    "gpu_clocks": check_gpu_clocks,
    "gpu_nvlink": check_gpu_nvlink,
    "dcgm_diag": check_dcgm,
    "efa_devices": check_efa_devices,
    "efa_libfabric": check_efa_libfabric,
    "memlock": check_memlock,
    "gdrcopy": check_gdrcopy,
    "torch_env": check_torch,
    "slurm_state": check_slurm,
    "memory": check_memory,
    "disks": check_disks,
    "mounts": check_mounts,
}


# ---------------------------------------------------------------------------------------------- report
def run_checks(probe: Probe, names: Iterable[str]) -> dict[str, Any]:
    """Run the named checks; a check that crashes is a failed check (named), never a crashed report."""
    results = []
    for name in names:
        started = time.monotonic()
        try:
            result = CHECKS[name](probe)
        except Exception as err:  # a broken check must not hide the others' results
            result = Result(name, "fail", "isolate", f"check crashed: {type(err).__name__}: {err}")
        result.seconds = round(time.monotonic() - started, 3)
        results.append(result)
    failed = [r for r in results if r.status == "fail"]
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "warn", "skip")}
    return {
        "schema": SCHEMA,
        "node": socket.gethostname(),
        "instance_type": probe.instance_type,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "ok": not failed,
        "counts": counts,
        "failed": [{"check": r.check, "severity": r.severity, "message": r.message} for r in failed],
        "checks": [asdict(r) for r in results],
    }


def drain_reason(report: dict[str, Any], limit: int = 200) -> str:
    """The reason a failed node is drained with: every failed check by name, then its message; Slurm shows
    it in ``sinfo -R`` and ``scontrol show node``, so it is one line, of bounded length, without quotes."""
    failed = "; ".join(f"{f['check']}: {f['message']}" for f in report["failed"])
    text = re.sub(r"[\"'\\\s]+", " ", f"node_health: {failed}").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_table(report: dict[str, Any]) -> str:
    """Terminal lines, one per check."""
    lines = [f"{report['node']} ({report['instance_type']}): {'OK' if report['ok'] else 'FAILED'}"]
    for r in report["checks"]:
        lines.append(f"  {r['check']:<16} {r['status']:<5} {r['severity']:<8} {r['message']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options; a config file (written by the role) gives defaults that the command line overrides."""
    parser = argparse.ArgumentParser(description="trainstack node health checks")
    parser.add_argument("--config", type=Path, help="JSON written by the node_health role")
    parser.add_argument("--instance-type")
    parser.add_argument("--table", type=Path)
    parser.add_argument("--checks", help=f"comma list; default all: {','.join(CHECKS)}")
    parser.add_argument("--profile", choices=("full", "quick"), default="full")
    parser.add_argument("--mount", action="append", default=[], help="extra required mount (PATH[:FSTYPE])")
    parser.add_argument("--torch-python")
    parser.add_argument("--dcgm-level", type=int)
    parser.add_argument("--gdrcopy-sanity", action="store_true")
    parser.add_argument("--slurm-node")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument(
        "--reason", action="store_true", help="print only the drain reason (nothing when every check passed)"
    )
    parser.add_argument(
        "--fault-injection-file", type=Path, help="lab fault injection: extra kernel-log lines"
    )
    parser.add_argument("--output", type=Path, help="also write the JSON report here")
    return parser.parse_args(argv)


def build_probe(args: argparse.Namespace) -> tuple[Probe, list[str]]:
    """Merge config file and options into a Probe and the list of checks; every bad value is named."""
    config: dict[str, Any] = {}
    if args.config:
        try:
            config = json.loads(args.config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UsageError(f"--config {args.config}: {err}") from err
    instance_type = args.instance_type or config.get("instance_type")
    if not instance_type:
        raise UsageError("--instance-type is required (or instance_type in --config)")
    table = load_table(args.table or Path(config.get("table") or DEFAULT_TABLE))
    overrides = dict(config.get("expect") or {})
    expect = expectations(table, instance_type, overrides)
    expect["mounts"] = list(expect["mounts"]) + list(args.mount)
    if args.checks:
        names = [n.strip() for n in args.checks.split(",") if n.strip()]
    elif args.profile == "quick":
        names = list(QUICK_CHECKS)
    else:
        names = list(config.get("checks") or CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise UsageError(f"--checks: unknown {unknown}; known: {', '.join(CHECKS)}")
    for skipped in config.get("skip_checks") or []:
        if skipped in names:
            names.remove(skipped)
    probe = Probe(
        expect=expect,
        instance_type=instance_type,
        torch_python=args.torch_python or config.get("torch_python") or "",
        dcgm_level=args.dcgm_level if args.dcgm_level is not None else int(config.get("dcgm_level", 1)),
        gdrcopy_sanity=args.gdrcopy_sanity or bool(config.get("gdrcopy_sanity")),
    )
    fault_file = args.fault_injection_file or config.get("fault_injection_file")
    probe.fault_injection_file = Path(fault_file) if fault_file else None
    if args.slurm_node or config.get("slurm_node"):
        probe.slurm_node = args.slurm_node or config["slurm_node"]
    return probe, names


def main(argv: list[str] | None = None) -> int:
    """0: healthy; 1: at least one check failed; 2: bad input (named)."""
    args = parse_args(argv)
    try:
        probe, names = build_probe(args)
    except UsageError as err:
        print(f"node_health: {err}", file=sys.stderr)
        return 2
    report = run_checks(probe, names)
    text = json.dumps(report, indent=2)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    if args.reason:
        print("" if report["ok"] else drain_reason(report))
    else:
        print(text if args.json else format_table(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
