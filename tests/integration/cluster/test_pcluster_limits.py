"""The committed snapshot of ParallelCluster's rules is the pinned release's
(tests/unit/plugins/module_utils/fixtures/pcluster_limits.json).

Slow (make test-slow): it needs the pinned ParallelCluster virtualenv (`make pcluster-venv`). The unit tests
(tests/unit/plugins/module_utils/test_target_limits.py) derive their cases from the snapshot without it; this
test is what makes a new release's rules reach them: when the pin moves, the snapshot is stale here, and once
rewritten (`scripts/pcluster_limits.py --write`), the unit tests name every rule target_limits lacks.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, run

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

SNAPSHOT = REPO / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "pcluster_limits.json"
REQUIREMENTS = REPO / "mk" / "pcluster-requirements.txt"


@pytest.fixture(scope="module")
def pcluster_python() -> Path:
    """The pinned ParallelCluster virtualenv's Python, made by the make target users run (cached by pin)."""
    run(["make", "-s", "pcluster-venv"], timeout=900)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    python = REPO / ".cache" / f"pcluster-venv-{digest}" / "bin" / "python"
    assert python.exists(), python
    return python


def test_the_committed_snapshot_is_the_pinned_releases(pcluster_python: Path, tmp_path: Path) -> None:
    specs = sorted((REPO / "inventories" / "aws" / "clusters").glob("*.yml"))
    run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            "scripts/render_clusters.py",
            "--out",
            str(tmp_path),
            *map(str, specs),
        ]
    )
    proc = subprocess.run(
        [
            str(pcluster_python),
            str(REPO / "scripts" / "pcluster_limits.py"),
            "--check",
            str(SNAPSHOT),
            *map(str, sorted(tmp_path.glob("*.yaml"))),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{proc.stderr[-2000:]}\nthe pinned release's snapshot:\n{proc.stdout[-6000:]}"
    )
