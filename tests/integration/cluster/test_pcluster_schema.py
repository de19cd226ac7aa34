"""Each example spec's rendered configuration through ParallelCluster's own schema and offline validators.

Slow (make test-slow): the first run makes the pinned ParallelCluster virtualenv (`make pcluster-venv`,
about 1 to 2 minutes cold on a 2-core host); later runs reuse it. The fast checks of the same rendering run in
make test (tests/unit/plugins/modules/test_pcluster_config.py).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, run

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

EXAMPLE_SPECS = sorted((REPO / "inventories" / "aws" / "clusters").glob("*.yml"))
REQUIREMENTS = REPO / "mk" / "pcluster-requirements.txt"


@pytest.fixture(scope="module")
def pcluster_python() -> Path:
    """The pinned ParallelCluster virtualenv's Python, made by the make target users run (cached by pin)."""
    run(["make", "-s", "pcluster-venv"], timeout=900)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    python = REPO / ".cache" / f"pcluster-venv-{digest}" / "bin" / "python"
    assert python.exists(), python
    return python


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clusters")
    run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            "scripts/render_clusters.py",
            "--out",
            str(out),
            *map(str, EXAMPLE_SPECS),
        ]
    )
    return out


def pcluster_check(python: Path, *configs: Path) -> tuple[int, dict]:
    proc = subprocess.run(
        [str(python), str(REPO / "scripts" / "pcluster_validate.py"), "--json", *map(str, configs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=[p.stem for p in EXAMPLE_SPECS])
def test_example_config_passes_parallelclusters_schema(pcluster_python, rendered, spec):
    rc, report = pcluster_check(pcluster_python, rendered / f"{spec.stem}.yaml")
    result = report["results"][0]
    assert (rc, result["schema_errors"], result["errors"]) == (0, [], []), result
    # The validators that need AWS are named, not silently passed.
    assert any("needs AWS" in line for line in result["not_run"])


def _broken(rendered: Path, tmp_path: Path, name: str, change) -> Path:
    config = yaml.safe_load((rendered / "p5.yaml").read_text())
    change(config)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_unknown_key_fails_parallelclusters_schema(pcluster_python, rendered, tmp_path):
    def misspell(config: dict) -> None:
        queue = config["Scheduling"]["SlurmQueues"][0]
        queue["CapacityTyp"] = queue.pop("CapacityType")

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "unknown-key", misspell))
    assert rc == 1
    assert "Scheduling.SlurmQueues.0.CapacityTyp: Unknown field." in report["results"][0]["schema_errors"]


def test_login_key_name_fails_parallelclusters_schema(pcluster_python, rendered, tmp_path):
    """Why the renderer gives login pools no Ssh.KeyName: ParallelCluster 3.15+ refuses it."""

    def add_key(config: dict) -> None:
        config["LoginNodes"]["Pools"][0]["Ssh"] = {"KeyName": "training"}

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "login-key", add_key))
    assert rc == 1
    assert any("LoginNodes.Pools.0.Ssh.KeyName" in line for line in report["results"][0]["schema_errors"])


def test_bad_fsx_size_fails_parallelclusters_own_validator(pcluster_python, rendered, tmp_path):
    def resize(config: dict) -> None:
        config["SharedStorage"][0]["FsxLustreSettings"]["StorageCapacity"] = 3000

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "fsx-size", resize))
    assert rc == 1
    assert any(line.startswith("FsxStorageCapacityValidator: ") for line in report["results"][0]["errors"])


def test_health_checks_off_pass_and_a_wrong_value_fails_parallelclusters_schema(
    pcluster_python, rendered, tmp_path
):
    """resilience.health_checks renders SlurmQueues[].HealthChecks.Gpu.Enabled: both values are
    ParallelCluster's, and the schema does read the field (a string there is refused)."""

    def switch_off(config: dict) -> None:
        for queue in config["Scheduling"]["SlurmQueues"]:
            assert queue["HealthChecks"] == {"Gpu": {"Enabled": True}}
            queue["HealthChecks"]["Gpu"]["Enabled"] = False

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "health-off", switch_off))
    assert (rc, report["results"][0]["schema_errors"], report["results"][0]["errors"]) == (0, [], [])

    def garble(config: dict) -> None:
        config["Scheduling"]["SlurmQueues"][0]["HealthChecks"]["Gpu"]["Enabled"] = "sometimes"

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "health-garbled", garble))
    assert rc == 1
    assert any("HealthChecks.Gpu.Enabled" in line for line in report["results"][0]["schema_errors"])


def test_parallelcluster_has_no_setting_that_keeps_unhealthy_nodes(pcluster_python, rendered, tmp_path):
    """Why resilience.replace_unhealthy_nodes: false is refused for ParallelCluster: no key of its schema
    turns clustermgtd's replacement off (a made-up one is an unknown field)."""

    def keep_nodes(config: dict) -> None:
        config["Scheduling"]["SlurmSettings"]["ReplaceUnhealthyNodes"] = False

    rc, report = pcluster_check(pcluster_python, _broken(rendered, tmp_path, "keep-nodes", keep_nodes))
    assert rc == 1
    assert (
        "Scheduling.SlurmSettings.ReplaceUnhealthyNodes: Unknown field."
        in report["results"][0]["schema_errors"]
    )
