"""playbooks/pcs_cluster.yml against a real moto server: the pcs-gpu AMI found by the spec's image.tags.

moto has no PCS backend, so the playbook runs with pcs_cluster_render_only (the requests rendered and
checked against botocore's PCS model, nothing sent to PCS); the AMI look-up is real EC2 calls to moto. The
account holds a newer AMI of another flavour with the same tags, as one that builds several flavours does:
the look-up must take the pcs-gpu one, and a spec whose tags name the other flavour is refused naming
image.tags.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, MotoServer, moto_aws_env, playbook, start_moto

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

SPEC = REPO / "inventories" / "aws" / "clusters" / "p4d.yml"
TEMPLATES = {"a100": {"id": "lt-0123456789abcdef0", "version": "1"}}


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def register(moto: MotoServer, tags: dict[str, str], flavour: str) -> str:
    ec2 = moto.client("ec2", "us-east-1")
    image = ec2.register_image(Name=f"trainstack-{flavour}", RootDeviceName="/dev/sda1")["ImageId"]
    every = {**tags, "trainstack:flavour": flavour}
    ec2.create_tags(Resources=[image], Tags=[{"Key": k, "Value": v} for k, v in every.items()])
    return image


def record(records: Path, name: str) -> None:
    """The foundation's record as cluster_foundation writes it (render only: nothing in it is looked up)."""
    records.mkdir(exist_ok=True)
    outputs = {
        "cluster_name": name,
        "region": "us-east-1",
        "public_subnet_id": "subnet-0a0a0a0a0a0a0a0a0",
        "private_subnet_id": "subnet-0b0b0b0b0b0b0b0b0",
        "security_group_id": "sg-0c0c0c0c0c0c0c0c0",
        "bucket": f"trainstack-{name}-123456789012",
        "instance_profile_arn": f"arn:aws:iam::123456789012:instance-profile/aws-pcs/{name}-node",
    }
    (records / f"{name}.foundation.json").write_text(json.dumps(outputs))


def render(moto: MotoServer, records: Path, spec: Path) -> tuple[int, str]:
    done = playbook(
        "pcs_cluster",
        *("-e", f"cluster_spec={spec}", "-e", f"cluster_foundation_outputs_dir={records}"),
        *(
            "-e",
            "pcs_cluster_render_only=true",
            "-e",
            json.dumps({"pcs_cluster_launch_templates": TEMPLATES}),
        ),
        check=False,
        env=moto_aws_env(moto.url),
    )
    return done.returncode, " ".join(done.stdout.split())  # the output callback folds long messages


def test_the_pcs_gpu_ami_is_found_among_other_flavours(moto: MotoServer, tmp_path: Path) -> None:
    data = yaml.safe_load(SPEC.read_text())
    record(tmp_path, data["name"])
    pcs = register(moto, data["image"]["tags"], "pcs-gpu")
    time.sleep(1.1)  # the other flavour's AMI is the newer one (creation dates count seconds)
    register(moto, data["image"]["tags"], "slurm-gpu")

    rc, out = render(moto, tmp_path, SPEC)
    assert rc == 0, out[-3000:]
    assert f"rendered and checked, nothing sent; node groups on {pcs}: a100" in out

    data["image"]["tags"]["trainstack:flavour"] = "slurm-gpu"
    other = tmp_path / "slurm-flavour.yml"
    other.write_text(yaml.safe_dump(data))
    rc, out = render(moto, tmp_path, other)
    assert rc != 0
    assert "image.tags: trainstack:flavour is 'slurm-gpu'; these nodes boot the pcs-gpu image" in out
