"""The walkthrough of docs/aws-hyperpod.md, read from the page and run as written.

Its commands are the lines of the ```sh blocks under "## Walkthrough". The fast test holds the page to the
steps (foundation, node bundle, cluster, delete, teardown, each from the example spec). The slow one runs them
in order against a real moto server, with what moto needs (AWS_ENDPOINT_URL, the foundation switches for what
it lacks) and every record, bundle and lifecycle file in a temporary directory; the cluster step runs twice,
the second time changing nothing. The foundation and the node bundle take minutes on a 2-core host.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, VENV_BIN, moto_aws_env, start_moto

pytestmark = [pytest.mark.cluster]

DOC = REPO / "docs" / "aws-hyperpod.md"
HEADING = "## Walkthrough\n"
SPEC = "inventories/aws/hyperpod/train-hp.yml"
REGION = "us-east-1"


def walkthrough() -> list[str]:
    """The commands of the walkthrough's ```sh blocks, continuation lines joined, in page order."""
    section = DOC.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_walkthrough_is_foundation_bundle_cluster_delete_teardown() -> None:
    commands = walkthrough()
    steps = [re.search(r"trainstack\.cluster\.(\w+)", c).group(1) for c in commands]
    assert steps == [
        "cluster_foundation",
        "node_bundle",
        "hyperpod_cluster",
        "hyperpod_cluster",
        "cluster_teardown",
    ]
    assert all(f"-e cluster_spec={SPEC}" in c for c in commands if "node_bundle" not in c)
    assert "hyperpod_cluster_state=absent" in commands[3] and "state" not in commands[2]
    assert (REPO / SPEC).is_file()


def run_here(url: str, extra_vars: Path, command: str) -> subprocess.CompletedProcess:
    env = moto_aws_env(url, PATH=f"{VENV_BIN}:/usr/bin:/bin")
    done = subprocess.run(
        ["bash", "-c", f"{command} -e @{extra_vars}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.mark.slow
@pytest.mark.moto
def test_the_walkthrough_runs_against_moto(tmp_path: Path) -> None:
    server = start_moto(env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})
    try:
        extra = tmp_path / "extra.json"
        extra.write_text(
            json.dumps(
                {
                    "aws_foundation_placement_group": False,
                    "aws_foundation_fsx_link_bucket": False,
                    "cluster_foundation_outputs_dir": str(tmp_path / "records"),
                    "node_bundle_dir": str(tmp_path / "bundle"),
                    "hyperpod_cluster_lifecycle_dir": str(tmp_path / "lifecycle"),
                    "hyperpod_cluster_poll_interval": 1,
                }
            )
        )
        foundation, bundle, cluster, delete, teardown = walkthrough()
        run_here(server.url, extra, foundation)
        run_here(server.url, extra, bundle)
        run_here(server.url, extra, cluster)
        sagemaker = server.client("sagemaker", REGION)
        assert sagemaker.describe_cluster(ClusterName="train-hp")["ClusterStatus"] == "InService"
        again = run_here(server.url, extra, cluster)
        assert re.search(r"^localhost\s.*\bchanged=0\b", again.stdout, re.M), again.stdout[-3000:]
        run_here(server.url, extra, delete)
        assert sagemaker.list_clusters()["ClusterSummaries"] == []
        run_here(server.url, extra, teardown)
        assert not (tmp_path / "records" / "train-hp.foundation.json").exists()
    finally:
        server.stop()
