"""What keeps AMI builds and the hosts they reach safe: encryption key, who may SSH to the build instance,
IMDSv2 on the build instance before Ansible runs, and SSH host-key checking everywhere but the lab.

The templates are parsed with python-hcl2; one test runs Debian's Packer 1.6.6 (`packer validate`) to show
that it refuses a bad CIDR before anything is launched. `make lint-packer` validates the defaults.
"""

from __future__ import annotations

import configparser
import importlib.util
import ipaddress
import json
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml

from tests.unit.image.packer_effective import PROBE_VARS

REPO = Path(__file__).resolve().parents[3]
PACKER = REPO / "packer"
FLAVOURS = ("base-gpu", "slurm-gpu", "pcluster-gpu", "eks-gpu", "pcs-gpu", "batch-gpu")


def unquote(value):
    """python-hcl2 keeps HCL's quotes on keys and string literals; expressions stay as ${...}."""
    if isinstance(value, dict):
        return {unquote(k): unquote(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def load(name: str) -> dict:
    with open(PACKER / name) as handle:
        return unquote(hcl2.load(handle))


@pytest.fixture(scope="module")
def sources() -> dict:
    return {
        n: b for block in load("sources.amazon.pkr.hcl")["source"] for n, b in block["amazon-ebs"].items()
    }


@pytest.fixture(scope="module")
def builds() -> dict:
    return {unquote(b["name"]): b for b in load("builds.amazon.pkr.hcl")["build"]}


@pytest.fixture(scope="module")
def variables() -> dict:
    return {name: body for block in load("variables.pkr.hcl")["variable"] for name, body in block.items()}


def _imdsv2():
    spec = importlib.util.spec_from_file_location(
        "instance_imdsv2", PACKER / "scripts" / "instance_imdsv2.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------- encryption, SSH
def test_every_source_encrypts_with_the_kms_key_variable(sources):
    for name, src in sources.items():
        assert src["kms_key_id"] == "${var.kms_key_id}", name
        assert src["region_kms_key_ids"] == "${var.ami_copy_kms_key_ids}", name
    # The root volume's mapping is the build's (one per image, with its OS family's device): checked as Packer
    # evaluates it, below.


def test_every_image_gets_the_key_and_ssh_limits_as_packer_evaluates_them(flavour_images):
    """The source and the build's dynamic source carry these; every image of every flavour must get them."""
    images = {
        f"{flavour}.{source}": image["settings"]
        for flavour, built in flavour_images.items()
        for source, image in built["images"].items()
    }
    assert len(images) == 28
    for name, image in images.items():
        assert image["kms_key_id"] == PROBE_VARS["kms_key_id"], name
        assert image["launch_block_device_mappings[0]"]["kms_key_id"] == PROBE_VARS["kms_key_id"], name
        assert image["region_kms_key_ids"] == {"eu-copy-1": "alias/copy"}, name
        assert image["temporary_security_group_source_cidrs"] == ["198.51.100.7/32"], name
        assert image["ssh_interface"] == PROBE_VARS["ssh_interface"], name


def test_kms_variables_default_to_the_accounts_ebs_key(variables):
    assert variables["kms_key_id"]["default"] == ""
    assert variables["ami_copy_kms_key_ids"]["default"] == {}


def test_every_source_limits_ssh_to_the_cidr_variable(sources):
    for name, src in sources.items():
        assert src["temporary_security_group_source_cidrs"] == "${var.ssh_source_cidrs}", name
        assert src["ssh_interface"] == "${var.ssh_interface}", name


def test_ssh_source_cidrs_default_to_private_ranges_only(variables):
    cidrs = variables["ssh_source_cidrs"]["default"]
    assert cidrs, "an empty list would make Packer open SSH to 0.0.0.0/0"
    assert all(ipaddress.ip_network(cidr).is_private for cidr in cidrs), cidrs
    assert variables["ssh_interface"]["default"] == "private_ip"
    assert variables["ssh_source_cidrs"]["validation"], "bad CIDRs are refused by packer validate"


@pytest.mark.parametrize("cidrs", ["[]", '["10.0.0.0/8", "not-a-cidr"]'])
def test_packer_refuses_bad_ssh_source_cidrs(cidrs, tmp_path):
    if shutil.which("packer") is None:
        pytest.skip("packer is not installed (make host-deps)")
    proc = subprocess.run(
        [
            "packer",
            "validate",
            "-var",
            f"ssh_source_cidrs={cidrs}",
            "-var",
            f"output_dir={tmp_path}",
            "packer",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "ssh_source_cidrs must be a non-empty list of IPv4 CIDRs" in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------- IMDSv2
def test_every_build_requires_imdsv2_on_the_instance_before_ansible(builds):
    assert set(builds) == {"ami"}
    for name, build in builds.items():
        provisioners = [next(iter(p)) for p in build["provisioner"]]
        assert provisioners == ["shell-local", "ansible"], name
        first = json.dumps(build["provisioner"][0]["shell-local"])
        assert "scripts/instance_imdsv2.py --instance-id ${build.ID}" in first, name
        assert (
            "AWS_REGION=${var.aws_region}" in first and "EC2_ENDPOINT_URL=${var.custom_endpoint_ec2}" in first
        )


def test_every_image_of_every_flavour_requires_imdsv2_first_and_marks_the_ami(flavour_images):
    """As Packer evaluates them: IMDSv2 on the instance (by its id), then Ansible; the AMI marked after."""
    imdsv2 = "python3 <repo>/packer/scripts/instance_imdsv2.py --instance-id <build.ID>"
    finalize = "python3 <repo>/packer/scripts/ami_finalize.py --manifest /probe/out/packer-manifest.json"
    assert set(flavour_images) == set(FLAVOURS)
    for flavour, built in flavour_images.items():
        for source, image in built["images"].items():
            steps = sorted(part for part in image if part.startswith("provisioners["))
            kinds = [next(iter(image[step])) for step in steps]
            assert kinds == ["shell-local", "ansible"], (flavour, source)
            first = image["provisioners[0]"]["shell-local"]
            assert first["inline"] == [imdsv2], (flavour, source)
            assert first["environment_vars"] == ["AWS_REGION=eu-probe-1", "EC2_ENDPOINT_URL=http://ec2.probe"]
            last = image["post-processors[0][1]"]["shell-local"]["inline"]
            assert last == [f"{finalize} --imds-support v2.0"], (flavour, source)


def test_instance_imdsv2_requires_tokens():
    options = _imdsv2().metadata_options(1)
    assert options == {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1}


@pytest.mark.parametrize("bad", ["ERR_ID_NOT_IMPLEMENTED_BY_BUILDER", "", "ami-0123456789abcdef0", "i-XYZ"])
def test_instance_imdsv2_refuses_what_is_not_an_instance_id(bad):
    with pytest.raises(ValueError, match="is not an EC2 instance id"):
        _imdsv2().check_instance_id(bad)


def test_instance_imdsv2_exits_with_usage_before_any_aws_call(capsys):
    with pytest.raises(SystemExit) as stop:
        _imdsv2().main(["--instance-id", "Null"])
    assert stop.value.code == 2
    assert "--instance-id 'Null' is not an EC2 instance id" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- host keys
def test_ansible_cfg_checks_host_keys_by_default():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    assert cfg.getboolean("defaults", "host_key_checking") is True
    ssh_args = cfg.get("ssh_connection", "ssh_args")
    assert "StrictHostKeyChecking" not in ssh_args and "UserKnownHostsFile" not in ssh_args, ssh_args


def test_only_the_lab_inventory_turns_host_key_checking_off():
    lab = yaml.safe_load((REPO / "inventories/local/group_vars/all.yml").read_text())
    assert lab["ansible_host_key_checking"] is False
    assert "UserKnownHostsFile=/dev/null" in lab["ansible_ssh_common_args"]
    aws = yaml.safe_load((REPO / "inventories/aws/group_vars/all.yml").read_text())
    assert aws["ansible_host_key_checking"] is True
    assert "StrictHostKeyChecking=yes" in aws["ansible_ssh_extra_args"]
    assert "ansible_ssh_common_args" not in aws, "the inventory plugin sets it per host (HyperPod)"


def test_packer_keeps_its_one_off_proxy_out_of_known_hosts():
    env = dict(item.split("=", 1) for item in load("locals.pkr.hcl")["locals"][0]["ansible_env"])
    assert "UserKnownHostsFile=/dev/null" in env["ANSIBLE_SSH_ARGS"]
