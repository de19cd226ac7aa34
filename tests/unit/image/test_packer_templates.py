"""The Packer templates' variables and per-build settings, parsed with python-hcl2 and evaluated by Packer.

`make lint-packer` proves Packer 1.6.6 accepts the templates; these tests pin what the image factory promises:
encrypted gp3 roots sized by a variable, AMI names carrying the stack id and a timestamp, tags, region copies,
both architectures, and defaults that follow the current stack. Per-image settings come from tables expanded
by a `dynamic "source"` block, and one build serves every flavour (`-var flavour=`), so they are checked per
flavour as `make image-ami IMAGE_FLAVOUR=<flavour>` selects them and `packer console` evaluates them
(packer_effective.py; the record of all of it: test_packer_flavour_golden.py).
"""

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml

from tests.unit.image.packer_effective import PROBE_VARS, make_packer_command, parse_build_command

REPO = Path(__file__).resolve().parents[3]
PACKER = REPO / "packer"
FLAVOURS = {"base-gpu", "slurm-gpu", "pcluster-gpu", "eks-gpu", "pcs-gpu", "batch-gpu"}


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
def images(flavour_images):
    """Images by `<flavour>.<source>`, settings as Packer evaluates them with PROBE_VARS."""
    return {
        f"{flavour}.{source}": image["settings"]
        for flavour, built in flavour_images.items()
        for source, image in built["images"].items()
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


def test_one_amazon_source_for_every_image(sources):
    """Images are table entries (locals) expanded by `dynamic "source"`, not a copied source each; what an OS
    family decides (user, root device) is table data too, so there is one source, not one per family."""
    assert set(sources) == {"image"}
    for per_image in ("instance_type", "source_ami_filter", "ami_name", "tags", "ssh_username"):
        assert per_image not in sources["image"], f"{per_image} belongs to the image (builds.amazon.pkr.hcl)"
    # A build's source block only adds to its source: the root mapping (the family's device) is the build's.
    assert "launch_block_device_mappings" not in sources["image"]


def test_every_amazon_image_has_an_encrypted_gp3_root_sized_by_variable(images):
    assert len(images) == 28
    for name, image in images.items():
        assert image["encrypt_boot"] is True, name
        bdm = image["launch_block_device_mappings[0]"]
        assert "launch_block_device_mappings[1]" not in image, name
        assert bdm["volume_type"] == "gp3", name
        assert bdm["encrypted"] is True and bdm["delete_on_termination"] is True, name
        assert bdm["volume_size"] == int(PROBE_VARS["root_volume_gb"]), name
        assert image["ami_regions"] == ["eu-copy-1", "eu-copy-2"], name
        assert image["run_tags"]["trainstack:stack"] == PROBE_VARS["stack_id"], name


def test_root_device_and_user_follow_the_os(images):
    for name, image in images.items():
        ubuntu = "ubuntu" in name.rsplit(".", 1)[1]
        device = image["launch_block_device_mappings[0]"]["device_name"]
        assert device == ("/dev/sda1" if ubuntu else "/dev/xvda"), name
        assert image["ssh_username"] == ("ubuntu" if ubuntu else "ec2-user"), name


def test_both_architectures_for_every_base(images):
    sources = {name.split(".", 1)[1]: image for name, image in images.items()}
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
            image = sources[f"{base}-{arch}"]
            assert image["source_ami_filter[0]"]["filters"]["architecture"] == arch
            assert image["instance_type"] == PROBE_VARS[f"instance_type_{arch}"]


def test_source_ami_filters_name_the_expected_images(images):
    filters = {n.split(".", 1)[1]: i["source_ami_filter[0]"]["filters"]["name"] for n, i in images.items()}
    owners = {n.split(".", 1)[1]: i["source_ami_filter[0]"]["owners"] for n, i in images.items()}
    assert "jammy-22.04-amd64" in filters["ubuntu2204-x86_64"]
    assert "noble-24.04-arm64" in filters["ubuntu2404-arm64"]
    assert filters["al2023-arm64"].endswith("-arm64")
    assert filters["pcluster-al2023-x86_64"].startswith("aws-parallelcluster-9.9.9-amzn2023")
    assert "-nvidia-1.99-" in filters["eks-al2023-x86_64"]
    assert owners["ubuntu2404-x86_64"] == ["099720109477"] and owners["al2023-arm64"] == ["amazon"]
    assert owners["pcluster-ubuntu2204-arm64"] == ["247102896272"]
    assert owners["eks-al2023-arm64"] == ["602401143452"]


def test_one_amazon_build_for_every_flavour_plus_local(builds, variables):
    """The flavours are table entries (amazon_flavour_bases) picked by `-var flavour=`, not a build each."""
    assert set(builds) == {"ami", "local"}
    assert [next(iter(src)) for src in builds["ami"]["dynamic"]] == ["source"]
    tables = load("builds.amazon.pkr.hcl")["locals"]
    (bases,) = [table["amazon_flavour_bases"] for table in tables if "amazon_flavour_bases" in table]
    assert set(bases) == FLAVOURS
    (rule,) = variables["flavour"]["validation"]
    assert set(re.findall(r'"([\w-]+)"', rule["condition"])) == FLAVOURS, "the variable accepts every flavour"


def test_make_image_ami_picks_the_flavour_by_variable():
    """`make image-ami IMAGE_FLAVOUR=<flavour>` runs the ami build with var.flavour, nothing else."""
    command = make_packer_command("image-ami", IMAGE_FLAVOUR="eks-gpu")
    parsed = parse_build_command(command)
    assert (parsed["only"], parsed["except"], parsed["template"]) == (["ami.*"], [], "packer")
    assert parsed["vars"]["flavour"] == "eks-gpu"


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")
def test_packer_refuses_an_unknown_flavour(tmp_path):
    proc = subprocess.run(
        ["packer", "validate", "-var", "flavour=gpu-base", "-var", f"output_dir={tmp_path}", "packer"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "The flavour must be one of base-gpu, slurm-gpu," in proc.stdout + proc.stderr


def test_every_flavour_names_and_tags_its_amis(images, flavour_images):
    per_flavour = {flavour: set() for flavour in FLAVOURS}
    for name, image in images.items():
        flavour, source = name.split(".", 1)
        per_flavour[flavour].add(source)
        assert image["ami_name"] == f"trainstack-ts-probe-{flavour}-{source}-<timestamp>", name
        assert image["tags"]["trainstack:flavour"] == flavour and image["tags"]["Name"].endswith(source)
    assert per_flavour["base-gpu"] == per_flavour["slurm-gpu"] and len(per_flavour["base-gpu"]) == 6
    assert {s.split("-")[0] for s in per_flavour["pcluster-gpu"]} == {"pcluster"}
    assert per_flavour["eks-gpu"] == {"eks-al2023-x86_64", "eks-al2023-arm64"}
    # PCS runs Ubuntu and Amazon Linux nodes; Batch's ECS_AL2023_NVIDIA image type is Amazon Linux 2023 only.
    assert per_flavour["pcs-gpu"] == per_flavour["base-gpu"]
    assert per_flavour["batch-gpu"] == {"al2023-x86_64", "al2023-arm64"}
    for flavour, built in flavour_images.items():
        for source, image in built["images"].items():
            ansible = image["provisioners[1]"]["ansible"]
            tail = ["-e", f"image_flavour={flavour}", "-e", f"image_build_name={source}", "--become"]
            assert ansible["extra_arguments"][-5:] == tail, (flavour, source)
            assert ansible["playbook_file"] == "<repo>/playbooks/build_image.yml"
            manifest = image["post-processors[0][0]"]["manifest"]
            assert manifest["custom_data"]["flavour"] == flavour, (flavour, source)


def test_every_build_runs_the_same_playbook(builds):
    local = json.dumps(builds["local"]["provisioner"])
    assert "playbooks/build_image.yml" in local and "community.general.lxc" in local
    assert "image_flavour=${var.local_flavour}" in local


def test_every_amazon_build_records_a_manifest_and_requires_imdsv2(builds):
    text = json.dumps(builds["ami"]["post-processors"])
    assert "packer-manifest.json" in text
    assert "ami_finalize.py" in text and "--imds-support v2.0" in text


def test_variable_defaults_follow_the_current_stack(variables, current_stack, current_stack_id):
    components = current_stack["components"]
    # No stack id in the templates: an empty stack_id falls back to stacks/current, the one default.
    assert variables["stack_id"]["default"] == ""
    assert current_stack_id == current_stack["id"]
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


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")
@pytest.mark.parametrize(("extra", "expected"), [([], None), (["-var", "stack_id=ts-2025.12"], "ts-2025.12")])
def test_stack_id_defaults_to_the_current_stack(extra, expected, current_stack_id):
    """Packer evaluates the stack the build installs: stacks/current unless -var stack_id names another.
    Run as `make` runs Packer: from the repository root, with the template directory given relatively."""
    proc = subprocess.run(
        ["packer", "console", *extra, "packer"],
        input="local.stack_id\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.stdout.strip() == (expected or current_stack_id), proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], []),
        (
            ["-var", 'pytorch_testcases=["pytorch/fsdp", "pytorch/ddp"]'],
            ["-e", "pytorch_testcases=pytorch/fsdp,pytorch/ddp"],
        ),
        (["-var", "pytorch_testcases=[]"], ["-e", "pytorch_testcases="]),
    ],
)
def test_the_baked_test_cases_reach_the_playbook_of_every_build(extra, expected):
    """-var pytorch_testcases lands in the arguments every build gives build_image.yml (the ami builds' and
    the local build's shell command alike, as one word); unset, the pytorch role's default (every case)."""
    proc = subprocess.run(
        ["packer", "console", *extra, "packer"],
        input="jsonencode(local.pytorch_testcases_args)\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert json.loads(proc.stdout.strip()) == expected, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")
def test_packer_refuses_a_test_case_name_that_is_not_one(tmp_path):
    def validate(value: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["packer", "validate", "-var", value, "-var", f"output_dir={tmp_path}", "packer"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    for good in ('pytorch_testcases=["pytorch/fsdp", "torchtitan/llama"]', "pytorch_testcases=[]"):
        proc = validate(good)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for bad in (
        'pytorch_testcases=["a b; rm"]',
        'pytorch_testcases=["pytorch"]',
        'pytorch_testcases=["../x/y"]',
    ):
        proc = validate(bad)
        assert proc.returncode != 0
        assert "The pytorch_testcases must be test case names" in proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")
def test_the_baking_flavours_are_those_with_the_pytorch_role():
    """The AMI tag of the baked test cases is set for exactly the flavours whose roles include pytorch."""
    play = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())[1]
    flavours = play["vars"]["image_flavours"]
    with_pytorch = sorted(
        name
        for name, entries in flavours.items()
        if any(
            e.get("role") == "pytorch"
            for entry in entries
            for e in (entry if isinstance(entry, list) else [entry])
        )
    )
    proc = subprocess.run(
        ["packer", "console", "packer"],
        input="jsonencode(local.baking_flavours)\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert sorted(json.loads(proc.stdout.strip())) == with_pytorch, proc.stdout + proc.stderr
