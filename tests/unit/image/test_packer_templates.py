"""The Packer templates' variables and per-build settings, parsed with python-hcl2 (no AWS, no Packer run).

`make lint-packer` proves Packer 1.6.6 accepts the templates; these tests pin what the image factory promises:
encrypted gp3 roots sized by a variable, AMI names carrying the stack id and a timestamp, tags, region copies,
both architectures, and defaults that follow the current stack.
"""

import importlib.util
import json
from pathlib import Path

import hcl2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PACKER = REPO / "packer"
FLAVOURS = {"base-gpu", "slurm-gpu", "pcluster-gpu", "eks-gpu"}


def unquote(value):
    """python-hcl2 keeps HCL's quotes on keys and string literals; expressions stay as ${...}."""
    if isinstance(value, dict):
        return {unquote(k): unquote(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def load(name):
    with open(PACKER / name) as handle:
        return unquote(hcl2.load(handle))


@pytest.fixture(scope="module")
def sources():
    return {
        name: body
        for block in load("sources.amazon.pkr.hcl")["source"]
        for name, body in block["amazon-ebs"].items()
    }


@pytest.fixture(scope="module")
def builds():
    return {
        unquote(b["name"]): b for b in load("builds.amazon.pkr.hcl")["build"] + load("local.pkr.hcl")["build"]
    }


@pytest.fixture(scope="module")
def variables():
    return {name: body for block in load("variables.pkr.hcl")["variable"] for name, body in block.items()}


@pytest.fixture(scope="module")
def current_stack():
    stacks = [yaml.safe_load(p.read_text()) for p in (REPO / "stacks").glob("ts-*.yml")]
    return next(s for s in stacks if s["status"] == "current")


def test_no_required_plugins_block_anywhere():
    """Packer 1.6.6 rejects `packer { required_plugins {} }`; current Packer's plugins are documented."""
    for path in PACKER.glob("*.pkr.hcl"):
        assert "required_plugins" not in path.read_text(), path


def test_every_amazon_source_has_an_encrypted_gp3_root_sized_by_variable(sources):
    assert len(sources) == 14
    for name, src in sources.items():
        assert src["encrypt_boot"] is True, name
        (bdm,) = src["launch_block_device_mappings"]
        assert bdm["volume_type"] == "gp3", name
        assert bdm["encrypted"] is True and bdm["delete_on_termination"] is True, name
        assert bdm["volume_size"] == "${var.root_volume_gb}", name
        assert src["ami_regions"] == "${var.ami_copy_regions}", name
        assert src["run_tags"] == "${local.common_tags}", name
        assert "ami_name" not in src, f"{name}: ami_name belongs to the build (it carries the flavour)"


def test_root_device_names_follow_the_os(sources):
    for name, src in sources.items():
        device = src["launch_block_device_mappings"][0]["device_name"]
        assert device == ("/dev/sda1" if "ubuntu" in name else "/dev/xvda"), name


def test_both_architectures_for_every_base(sources):
    bases = {name.rsplit("-", 1)[0] for name in sources}
    assert bases == {
        "ubuntu2204",
        "ubuntu2404",
        "al2023",
        "pcluster-ubuntu2204",
        "pcluster-ubuntu2404",
        "pcluster-al2023",
        "eks-al2023",
    }
    for base in bases:
        for arch in ("x86_64", "arm64"):
            src = sources[f"{base}-{arch}"]
            assert src["source_ami_filter"][0]["filters"]["architecture"] == arch
            assert src["instance_type"] == f"${{var.instance_type_{arch}}}"


def test_source_ami_filters_name_the_expected_images(sources):
    filters = {n: s["source_ami_filter"][0]["filters"]["name"] for n, s in sources.items()}
    assert "jammy-22.04-amd64" in filters["ubuntu2204-x86_64"]
    assert "noble-24.04-arm64" in filters["ubuntu2404-arm64"]
    assert filters["al2023-arm64"].endswith("-arm64")
    assert filters["pcluster-al2023-x86_64"].startswith("${local.pcluster_prefix}-amzn2023")
    assert "${var.eks_kubernetes_version}" in filters["eks-al2023-x86_64"]


def test_builds_are_the_flavours_plus_local(builds):
    assert set(builds) == FLAVOURS | {"local"}


def test_every_flavour_build_names_and_tags_its_amis(builds, sources):
    covered = set()
    for flavour in FLAVOURS:
        for block in builds[flavour]["source"]:
            for ref, override in block.items():
                source = ref.split(".", 1)[1]
                covered.add(source)
                assert source in sources
                name = override["ami_name"]
                assert name.startswith(f"trainstack-${{var.stack_id}}-{flavour}-{source}-")
                assert name.endswith("${local.timestamp}")
                assert f'"trainstack:flavour" = "{flavour}"' in override["tags"]
        (prov,) = [p for p in builds[flavour]["provisioner"] if "ansible" in p]
        args = prov["ansible"]["extra_arguments"]
        assert f"image_flavour={flavour}" in args
        assert prov["ansible"]["playbook_file"].endswith("/playbooks/build_image.yml")
    assert covered == set(sources), "every source is built by some flavour"


def test_every_build_runs_the_same_playbook(builds):
    local = json.dumps(builds["local"]["provisioner"])
    assert "playbooks/build_image.yml" in local and "community.general.lxc" in local
    assert "image_flavour=${var.local_flavour}" in local


def test_every_amazon_build_records_a_manifest_and_requires_imdsv2(builds):
    for flavour in FLAVOURS:
        text = json.dumps(builds[flavour]["post-processors"])
        assert "packer-manifest.json" in text
        assert "ami_finalize.py" in text and "--imds-support v2.0" in text


def test_variable_defaults_follow_the_current_stack(variables, current_stack):
    components = current_stack["components"]
    assert variables["stack_id"]["default"] == current_stack["id"]
    assert variables["pcluster_version"]["default"] == components["parallelcluster"]["version"]
    assert variables["eks_kubernetes_version"]["default"] == components["kubernetes"]["version"]
    assert variables["root_volume_gb"]["type"] == "number"
    assert variables["ami_copy_regions"]["default"] == []
    # Unverified downloads are a per-artifact decision of the stack (verify: false), never a build switch.
    assert not [name for name in variables if "unverified" in name]


def _ami_finalize():
    spec = importlib.util.spec_from_file_location("ami_finalize", PACKER / "scripts" / "ami_finalize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ami_finalize_reads_the_last_run_in_every_region():
    manifest = {
        "last_run_uuid": "b",
        "builds": [
            {"packer_run_uuid": "a", "artifact_id": "us-east-1:ami-old"},
            {"packer_run_uuid": "b", "artifact_id": "us-east-1:ami-111,eu-west-1:ami-222"},
        ],
    }
    assert _ami_finalize().last_build_amis(manifest) == [("us-east-1", "ami-111"), ("eu-west-1", "ami-222")]


def test_ami_finalize_refuses_a_non_ami_artifact():
    with pytest.raises(ValueError, match="not region:ami-id"):
        _ami_finalize().last_build_amis({"builds": [{"artifact_id": "VM"}]})
