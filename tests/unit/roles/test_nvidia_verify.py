"""playbooks/verify_nvidia.yml on this (GPU-less) machine, with a STAND-IN nvidia-smi.

The real run is on the GPU machine (docs/nvidia.md). Here `nvidia-smi` and `modinfo` are shims on PATH that
print what the real tools print on a one-H200 machine (CSV query rows and the `-q` CUDA line), so that what is
tested is the playbook: it runs under --check, parses NVML's fields into facts, compares them with expected
values, writes the JSON report, and fails when the driver does not answer or the count is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, ansible_env, run

# Several roles' tests in one file: its markers are named here, not taken from its name.
pytestmark = [pytest.mark.nvidia]

# index, name, uuid, bus id, memory MiB, driver, ECC, persistence, compute capability
SMI_ROW = (
    "0, NVIDIA H200, GPU-5d1c7a2e-0000-0000-0000-000000000000, 00000000:18:00.0, 143771, "
    "580.159.04, Enabled, Enabled, 9.0"
)


def _shims(tmp: Path, smi: bool = True) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    if smi:
        (bin_dir / "nvidia-smi").write_text(
            "#!/bin/sh\n"
            'case "$1" in -q) echo "CUDA Version                              : 13.0" ;;\n'
            f'  --query-gpu=*) echo "{SMI_ROW}" ;; *) exit 9 ;; esac\n'
        )
        (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "modinfo").write_text("#!/bin/sh\necho 'Dual MIT/GPL'\n")
    (bin_dir / "modinfo").chmod(0o755)
    return bin_dir


def _verify(tmp: Path, bin_dir: Path, *extra: str, nccl: str = "nccl_verify_required=false", **env: str):
    """Run the verify playbook under --check with the shims first on PATH (NCCL not required unless asked)."""
    path = f"{bin_dir}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"
    cmd = [
        str(REPO / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        "--check",
        "-e",
        f"ansible_python_interpreter={REPO / '.venv' / 'bin' / 'python'}",
        "-e",
        nccl,
        "-e",
        f"verify_nvidia_report={tmp / 'report.json'}",
        str(REPO / "playbooks" / "verify_nvidia.yml"),
        *extra,
    ]
    return run(cmd, check=False, env=ansible_env(PATH=path, **env))


def test_facts_parsed_and_reported(tmp_path: Path) -> None:
    proc = _verify(
        tmp_path,
        _shims(tmp_path),
        "-e",
        "nvidia_driver_verify_expected_gpus=1",
        "-e",
        "nvidia_driver_verify_expected_version=580",
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    driver = report["driver"]
    assert (driver["driver_version"], driver["cuda_driver_version"], driver["kernel_modules"]) == (
        "580.159.04",
        "13.0",
        "open",
    )
    assert int(driver["gpu_count"]) == 1
    gpu = driver["gpus"][0]
    assert (
        gpu["name"],
        gpu["memory_total_mib"],
        gpu["ecc_mode"],
        gpu["persistence_mode"],
        gpu["compute_cap"],
    ) == ("NVIDIA H200", "143771", "Enabled", "Enabled", "9.0")
    # Read-only: the one change is the report file the run was asked to write.
    changed = [s.split("]", 1)[0] for s in proc.stdout.split("TASK [")[1:] if "changed: [" in s]
    assert changed == ["Write the result as JSON on the controller"]


def test_wrong_gpu_count_fails(tmp_path: Path) -> None:
    proc = _verify(tmp_path, _shims(tmp_path), "-e", "nvidia_driver_verify_expected_gpus=8")
    assert proc.returncode != 0
    assert "with 1 GPU(s); expected" in proc.stdout


def test_no_driver_fails(tmp_path: Path) -> None:
    proc = _verify(tmp_path, _shims(tmp_path, smi=False))
    assert proc.returncode != 0
    assert "Query the GPUs through NVML" in proc.stdout


def test_nccl_found_in_python_packages(tmp_path: Path) -> None:
    """The GPU machine's NCCL is the torch wheel's (nvidia/nccl/lib on sys.path), not in the linker cache.

    A STAND-IN libnccl.so.2 (compiled here, ncclGetVersion answers 2.28.9) stands where the wheel puts it.
    """
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the stand-in library")
    lib_dir = tmp_path / "site" / "nvidia" / "nccl" / "lib"
    lib_dir.mkdir(parents=True)
    source = tmp_path / "nccl.c"
    source.write_text("int ncclGetVersion(int *v) { *v = 22809; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib_dir / "libnccl.so.2"), str(source)], check=True)
    proc = _verify(
        tmp_path,
        _shims(tmp_path),
        nccl="nccl_verify_expected_version=2.28.9",
        PYTHONPATH=str(tmp_path / "site"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    nccl = json.loads((tmp_path / "report.json").read_text())["nccl"]
    assert nccl == {"version": "2.28.9", "found_by": f"python package {lib_dir / 'libnccl.so.2'}"}
