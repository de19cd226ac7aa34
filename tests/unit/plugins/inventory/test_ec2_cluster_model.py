"""Unit tests of the ec2_cluster grouping model: plain dicts in, exact nodes, groups and variables out."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory import ec2_cluster_model as model
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_aws import ec2_filters

PC = model.SourceFilter(kinds=("parallelcluster", "pcs", "hyperpod"))


def instance(iid: str, tags: dict[str, str], itype: str = "p5.48xlarge", ip: str = "10.0.0.5") -> dict:
    return {
        "InstanceId": iid,
        "InstanceType": itype,
        "PrivateIpAddress": ip,
        "PrivateDnsName": f"ip-{ip.replace('.', '-')}.ec2.internal",
        "Placement": {"AvailabilityZone": "us-east-1b"},
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
    }


def pc_tags(cluster: str, node_type: str, queue: str | None = None, resource: str | None = None) -> dict:
    tags = {"parallelcluster:cluster-name": cluster, "parallelcluster:node-type": node_type}
    if queue:
        tags["parallelcluster:queue-name"] = queue
    if resource:
        tags["parallelcluster:compute-resource-name"] = resource
    return tags


@pytest.mark.parametrize(
    ("node_type", "role"), [("HeadNode", "head"), ("LoginNode", "login"), ("Compute", "compute")]
)
def test_parallelcluster_node_types_map_to_roles(node_type, role):
    node = model.node_from_ec2_instance(instance("i-1", pc_tags("llm", node_type)), "us-east-1", PC)
    assert node is not None
    assert (node.cluster_kind, node.cluster_name, node.role) == ("parallelcluster", "llm", role)


def test_parallelcluster_compute_node_keeps_queue_resource_and_placement():
    raw = instance("i-2", pc_tags("llm", "Compute", "train", "p5-od"))
    node = model.node_from_ec2_instance(raw, "us-east-1", PC)
    assert node == model.Node(
        instance_id="i-2",
        instance_type="p5.48xlarge",
        region="us-east-1",
        cluster_name="llm",
        cluster_kind="parallelcluster",
        role="compute",
        availability_zone="us-east-1b",
        private_ip="10.0.0.5",
        private_dns="ip-10-0-0-5.ec2.internal",
        queue="train",
        compute_resource="p5-od",
    )


def test_unknown_parallelcluster_node_type_stays_visible():
    node = model.node_from_ec2_instance(instance("i-3", pc_tags("llm", "ExternalSlurmDbd")), "r", PC)
    assert node is not None and node.role == "externalslurmdbd"


def test_instance_without_cluster_tags_is_not_a_node():
    assert model.node_from_ec2_instance(instance("i-4", {"Name": "bastion"}), "r", PC) is None


def test_cluster_name_filter_and_disabled_kind_drop_nodes():
    only_other = model.SourceFilter(kinds=("parallelcluster",), cluster_names=frozenset({"other"}))
    assert model.node_from_ec2_instance(instance("i-5", pc_tags("llm", "Compute")), "r", only_other) is None
    pcs_only = model.SourceFilter(kinds=("pcs",))
    assert model.node_from_ec2_instance(instance("i-6", pc_tags("llm", "Compute")), "r", pcs_only) is None


def test_pcs_login_groups_and_queue_from_node_group():
    flt = model.SourceFilter(kinds=("pcs",), pcs_login_node_groups=frozenset({"pcs_login"}))
    tags = {"aws:pcs:cluster-id": "pcs_abc", "aws:pcs:compute-node-group-id": "pcs_login"}
    login = model.node_from_ec2_instance(instance("i-7", tags), "r", flt)
    tags["aws:pcs:compute-node-group-id"] = "pcs_gpu"
    compute = model.node_from_ec2_instance(instance("i-8", tags), "r", flt)
    assert (login.role, login.queue, login.cluster_id) == ("login", "pcs_login", "pcs_abc")
    assert (compute.role, compute.queue, compute.cluster_name) == ("compute", "pcs_gpu", "pcs_abc")


@pytest.mark.parametrize(
    ("value", "role"),
    [
        ("Controller", "head"),
        ("headnode", "head"),
        ("login", "login"),
        ("worker", "compute"),
        (None, "compute"),
    ],
)
def test_tagged_fleet_roles(value, role):
    flt = model.SourceFilter(
        kinds=("tagged",), tagged_cluster_tag="fleet", tagged_role_tag="role", tagged_queue_tag="part"
    )
    tags = {"fleet": "f1", "part": "gpu"}
    if value is not None:
        tags["role"] = value
    node = model.node_from_ec2_instance(instance("i-9", tags), "r", flt)
    assert (node.cluster_kind, node.cluster_name, node.role, node.queue) == ("tagged", "f1", role, "gpu")


def test_slurm_name_tag_and_include_tags():
    flt = model.SourceFilter(kinds=("parallelcluster",), slurm_node_name_tag="slurm:node", include_tags=True)
    tags = {**pc_tags("llm", "Compute", "train"), "slurm:node": "train-st-p5-1"}
    node = model.node_from_ec2_instance(instance("i-10", tags), "r", flt)
    assert node.slurm_node_name == "train-st-p5-1"
    assert node.tags == tags


def test_type_facts_from_describe_instance_types_entry():
    p5 = {
        "InstanceType": "p5.48xlarge",
        "GpuInfo": {"Gpus": [{"Name": "H100", "Count": 8, "MemoryInfo": {"SizeInMiB": 81920}}]},
        "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 32}},
    }
    cpu = {"InstanceType": "c5.large", "NetworkInfo": {"EfaSupported": False}}
    assert model.facts_from_instance_type(p5) == model.TypeFacts(8, "H100", 81920, 32, "api")
    assert model.facts_from_instance_type(cpu) == model.TypeFacts(0, None, None, 0, "api")


def test_hyperpod_node_roles_type_and_slurm_name():
    summary = {
        "InstanceGroupName": "worker-group-1",
        "InstanceId": "i-0abc",
        "InstanceType": "ml.p5.48xlarge",
    }
    details = {"PrivatePrimaryIp": "10.1.2.3", "Placement": {"AvailabilityZone": "us-east-2a"}}
    node = model.node_from_hyperpod(
        "hp", "x1y2z3", "us-east-2", summary, details, frozenset({"controller-machine"}), frozenset({"login"})
    )
    assert (node.role, node.instance_type, node.queue) == ("compute", "p5.48xlarge", "worker-group-1")
    assert node.slurm_node_name == "ip-10-1-2-3"
    assert model.ssm_target(node) == "sagemaker-cluster:x1y2z3_worker-group-1-i-0abc"
    head = model.node_from_hyperpod(
        "hp",
        "x1y2z3",
        "us-east-2",
        {**summary, "InstanceGroupName": "controller-machine"},
        None,
        frozenset({"controller-machine"}),
        frozenset(),
    )
    assert (head.role, head.private_ip, head.slurm_node_name) == ("head", None, None)


def test_slurm_name_prefers_dns_label():
    assert model.slurm_name_from_address("ip-10-9-8-7.ec2.internal", "10.0.0.1") == "ip-10-9-8-7"
    assert model.slurm_name_from_address(None, "10.0.0.1") == "ip-10-0-0-1"
    assert model.slurm_name_from_address(None, None) is None


def test_hostname_preference_order_falls_back_to_instance_id():
    node = model.Node("i-1", "c5.large", "r", "c", "parallelcluster", "head", private_ip="10.0.0.1")
    assert model.choose_hostname(node, ["private-dns-name", "private-ip-address"]) == "10.0.0.1"
    assert model.choose_hostname(node, ["slurm-node-name"]) == "i-1"
    assert model.choose_hostname(node, ["instance-id", "private-ip-address"]) == "i-1"


def test_host_variables_hyperpod_gets_ssm_proxy_and_cpu_has_no_gpu_model():
    node = model.Node(
        "n-0", "c5.xlarge", "us-east-1", "hp", "hyperpod", "head", queue="ctl", cluster_id="cid"
    )
    hostvars = model.host_variables(node, model.TypeFacts(), ssm=True, ssm_profile="prod")
    assert hostvars["ansible_host"] == "sagemaker-cluster:cid_ctl-n-0"
    assert hostvars["ansible_ssh_common_args"] == (
        '-o ProxyCommand="aws ssm start-session --target sagemaker-cluster:cid_ctl-n-0 '
        '--document-name AWS-StartSSHSession --parameters portNumber=%p --region us-east-1 --profile prod"'
    )
    assert hostvars["ec2_gpu_count"] == 0
    assert "ec2_gpu_model" not in hostvars and "ec2_private_ip_address" not in hostvars
    assert "ansible_ssh_common_args" not in model.host_variables(node, None, ssm=False, ssm_profile=None)


@pytest.mark.parametrize(
    ("target", "region", "profile"),
    [
        ("sagemaker-cluster:c_q-i-1; echo pwned", "us-east-1", None),
        ("i-1", "us-east-1 $(id)", "prod `id`"),
        ("i-1", "us-east-1", 'it\'s a "profile" with %p %h & | > spaces'),
        ("i-1", "us-east-1", r"back\slash\" '\'"),
    ],
)
def test_ssm_proxy_command_passes_hostile_values_as_single_words(target, region, profile):
    """Ansible splits ssh_common_args with shlex; ssh expands %-tokens (%% is a %) then runs the shell."""
    options = shlex.split(model.ssm_proxy_args(target, region, profile))
    assert options[0] == "-o" and len(options) == 2 and options[1].startswith("ProxyCommand=")
    command = options[1].removeprefix("ProxyCommand=")
    assert "portNumber=%p" in command
    ssh_expanded = re.sub(r"%([%p])", lambda token: {"%": "%", "p": "22"}[token.group(1)], command)
    words = shlex.split(ssh_expanded)
    expected = ["aws", "ssm", "start-session", "--target", target, "--document-name", "AWS-StartSSHSession"]
    expected += ["--parameters", "portNumber=22", "--region", region] + (
        ["--profile", profile] if profile else []
    )
    assert words == expected
    # and as ssh runs it: `exec <command>` by the shell (here printing each word instead of running aws)
    shell = subprocess.run(
        ["/bin/sh", "-c", "exec printf '%s\\0' " + ssh_expanded], capture_output=True, check=True
    )
    assert shell.stdout.decode().split("\0")[:-1] == expected


def test_plan_groups_children_and_variables_exact():
    head = model.Node(
        "i-h",
        "c5.large",
        "us-east-1",
        "llm-a",
        "parallelcluster",
        "head",
        availability_zone="us-east-1a",
        private_ip="10.0.0.1",
    )
    gpu = model.Node(
        "i-g",
        "p5.48xlarge",
        "us-east-1",
        "llm-a",
        "parallelcluster",
        "compute",
        availability_zone="us-east-1a",
        private_ip="10.0.0.2",
        queue="train",
        compute_resource="p5",
    )
    facts = {"p5.48xlarge": model.TypeFacts(8, "H100", 81920, 32), "c5.large": model.TypeFacts()}
    plan = model.build_plan([head, gpu], facts, ["private-ip-address"], prefix="ts_")
    assert plan.groups == {
        "ts_kind_parallelcluster": ["10.0.0.1", "10.0.0.2"],
        "ts_cluster_llm_a": ["10.0.0.1", "10.0.0.2"],
        "ts_cluster_llm_a_head": ["10.0.0.1"],
        "ts_cluster_llm_a_compute": ["10.0.0.2"],
        "ts_cluster_llm_a_queue_train": ["10.0.0.2"],
        "ts_role_head": ["10.0.0.1"],
        "ts_role_compute": ["10.0.0.2"],
        "ts_type_c5_large": ["10.0.0.1"],
        "ts_type_p5_48xlarge": ["10.0.0.2"],
        "ts_region_us_east_1": ["10.0.0.1", "10.0.0.2"],
        "ts_az_us_east_1a": ["10.0.0.1", "10.0.0.2"],
    }
    assert plan.children == {
        "ts_cluster_llm_a": [
            "ts_cluster_llm_a_compute",
            "ts_cluster_llm_a_head",
            "ts_cluster_llm_a_queue_train",
        ]
    }
    assert plan.hostvars["10.0.0.2"] == {
        "ansible_host": "10.0.0.2",
        "cluster_name": "llm-a",
        "cluster_kind": "parallelcluster",
        "cluster_node_role": "compute",
        "cluster_queue": "train",
        "cluster_compute_resource": "p5",
        "ec2_instance_id": "i-g",
        "ec2_instance_type": "p5.48xlarge",
        "ec2_region": "us-east-1",
        "ec2_availability_zone": "us-east-1a",
        "ec2_private_ip_address": "10.0.0.2",
        "ec2_gpu_count": 8,
        "ec2_gpu_model": "H100",
        "ec2_gpu_memory_mib": 81920,
        "ec2_efa_interfaces": 32,
    }
    assert plan.duplicates == []
    assert plan.host_only["10.0.0.2"] == {
        "ansible_host": "10.0.0.2",
        "cluster_compute_resource": "p5",
        "ec2_instance_id": "i-g",
        "ec2_private_ip_address": "10.0.0.2",
    }
    assert plan.groupvars["ts_type_p5_48xlarge"] == {
        "ec2_instance_type": "p5.48xlarge",
        "ec2_gpu_count": 8,
        "ec2_gpu_model": "H100",
        "ec2_gpu_memory_mib": 81920,
        "ec2_efa_interfaces": 32,
    }
    assert plan.groupvars["ts_cluster_llm_a"] == {"cluster_name": "llm-a", "cluster_kind": "parallelcluster"}
    assert plan.groupvars["ts_cluster_llm_a_compute"] == {"cluster_node_role": "compute"}
    assert plan.groupvars["ts_cluster_llm_a_queue_train"] == {"cluster_queue": "train"}
    assert plan.groupvars["ts_az_us_east_1a"] == {"ec2_availability_zone": "us-east-1a"}


def test_split_variables_recombine_to_the_full_set():
    """What a play sees (host vars over the group vars of the host's groups) equals the full variable set."""
    nodes = [
        model.Node(
            "i-1", "p5.48xlarge", "r1", "a", "parallelcluster", "compute", "r1a", "10.0.0.1", queue="q"
        ),
        model.Node("i-2", "c5.large", "r2", "b", "pcs", "login", None, "10.0.0.2", queue="g", cluster_id="b"),
        model.Node("n-3", "c5.large", "r2", "hp", "hyperpod", "head", queue="ctl", cluster_id="x"),
    ]
    plan = model.build_plan(nodes, {"c5.large": model.TypeFacts()}, ["instance-id"])
    for host, full in plan.hostvars.items():
        seen: dict = {}
        for group, members in plan.groups.items():
            if host in members:
                seen.update(plan.groupvars.get(group, {}))
        seen.update(plan.host_only[host])
        assert seen == full


def test_conflicting_shared_fact_stays_on_the_hosts():
    """A ParallelCluster and a tagged fleet both called `x`: one group, two kinds, so the kind is per host."""
    pc = model.Node("i-1", "c5.large", "r", "x", "parallelcluster", "head", cluster_id=None)
    tagged = model.Node("i-2", "c5.large", "r", "x", "tagged", "compute")
    pcs = model.Node("i-3", "c5.large", "r", "y", "pcs", "compute", cluster_id="y")
    plain_pcs = model.Node("i-4", "c5.large", "r", "y", "pcs", "compute")
    plan = model.build_plan([pc, tagged, pcs, plain_pcs], {}, ["instance-id"])
    assert plan.groupvars["cluster_x"] == {"cluster_name": "x"}
    assert plan.host_only["i-1"]["cluster_kind"] == "parallelcluster"
    assert plan.host_only["i-2"]["cluster_kind"] == "tagged"
    assert "cluster_id" not in plan.groupvars["cluster_y"]
    assert plan.host_only["i-3"]["cluster_id"] == "y" and "cluster_id" not in plan.host_only["i-4"]


def test_duplicate_host_names_keep_first_and_are_reported():
    one = model.Node("ctl-0", "c5.large", "r", "hp1", "hyperpod", "head", cluster_id="a", queue="ctl")
    two = model.Node("ctl-0", "c5.large", "r", "hp2", "hyperpod", "head", cluster_id="b", queue="ctl")
    plan = model.build_plan([one, two], {}, ["instance-id"])
    assert plan.duplicates == ["ctl-0"]
    assert plan.hostvars["ctl-0"]["cluster_name"] == "hp1"


def test_cache_records_round_trip_through_json_and_reject_other_layouts():
    nodes = [
        model.Node("i-1", "p5.48xlarge", "r", "c", "parallelcluster", "compute", queue="q", tags={"a": "b"}),
        model.Node("n-1", "c5.large", "r", "h", "hyperpod", "head", cluster_id="x"),
    ]
    facts = {
        "p5.48xlarge": model.TypeFacts(8, "H100", 81920, 32),
        "c5.large": model.catalog_type_facts("p5.48xlarge"),
    }
    restored = model.unpack_records(json.loads(json.dumps(model.pack_records(nodes, facts))))
    assert restored == (nodes, facts)
    assert model.unpack_records({"version": 0, "nodes": []}) is None
    assert model.unpack_records(["not", "a", "mapping"]) is None


def test_catalog_covers_the_training_types():
    for name in ("p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"):
        facts = model.catalog_type_facts(name)
        assert facts is not None and facts.gpu_count == 8 and facts.source == "catalog"
    b300 = model.catalog_type_facts("ml.p6-b300.48xlarge")
    assert b300 == model.TypeFacts(8, "B300", 274658, 16, "catalog")
    assert model.catalog_type_facts("trn2.48xlarge") == model.TypeFacts(0, None, None, 16, "catalog")


def test_catalog_gives_no_facts_for_its_own_machines_or_unknown_types():
    # lab and local are not EC2 types: an instance reporting either name must not get invented GPU facts.
    assert model.catalog_type_facts("lab") is None
    assert model.catalog_type_facts("local") is None
    assert model.catalog_type_facts("c5.large") is None


def test_safe_group_and_ml_prefix():
    assert model.safe_group("llm-pretrain.v2/a") == "llm_pretrain_v2_a"
    assert model.ec2_type_name("ml.p5.48xlarge") == "p5.48xlarge"
    assert model.ec2_type_name("p5.48xlarge") == "p5.48xlarge"
    assert model.hyperpod_cluster_id("arn:aws:sagemaker:us-east-1:1:cluster/abc123") == "abc123"


def test_server_side_filters_push_names_down_only_for_one_tag_key():
    one = model.SourceFilter(kinds=("parallelcluster", "hyperpod"), cluster_names=frozenset({"b", "a"}))
    assert ec2_filters(one, ["running"]) == [
        {"Name": "tag:parallelcluster:cluster-name", "Values": ["a", "b"]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    two = model.SourceFilter(
        kinds=("parallelcluster", "tagged"), cluster_names=frozenset({"a"}), tagged_cluster_tag="fleet"
    )
    assert ec2_filters(two, []) == [{"Name": "tag-key", "Values": ["parallelcluster:cluster-name", "fleet"]}]


@pytest.mark.parametrize(
    "field",
    ["cluster_name", "cluster_kind", "role", "instance_type", "region", "queue", "availability_zone"],
)
def test_hosts_that_differ_in_one_placement_field_get_their_own_groups(field):
    """build_plan works the groups out once per placement; a host whose placement differs in any one field
    from the host before it still gets exactly the groups and variables it would get alone."""
    first = model.Node("i-1", "p5.48xlarge", "us-east-1", "a", "parallelcluster", "compute", "us-east-1a")
    first.queue = "train"
    second = model.Node(**{name: getattr(first, name) for name in model.Node.__slots__})
    second.instance_id = "i-2"
    setattr(second, field, {"cluster_kind": "pcs", "region": "us-west-2"}.get(field, "other"))
    facts = {"p5.48xlarge": model.TypeFacts(8, "H100", 81920, 32), "other": model.TypeFacts()}
    together = model.build_plan([first, second], facts, ["instance-id"])
    alone = model.build_plan([second], facts, ["instance-id"])
    assert {g for g, hosts in together.groups.items() if "i-2" in hosts} == set(alone.groups)
    assert together.hostvars["i-2"] == alone.hostvars["i-2"]
    for host in ("i-1", "i-2"):
        seen: dict = {}
        for group, members in together.groups.items():
            if host in members:
                seen.update(together.groupvars.get(group, {}))
        seen.update(together.host_only[host])
        assert seen == together.hostvars[host]


def test_a_spec_d_clusters_storage_tags_become_its_cluster_storage():
    """The tags every renderer puts on a spec'd cluster (ParallelCluster gives them to its instances) are
    the launch's storage defaults: one value for the whole cluster, set on its group; a cluster without them,
    and a tag that is not a plain absolute path, give none."""
    storage = {"trainstack:data-dir": "/fsx/data", "trainstack:checkpoint-dir": "/fsx/trainstack/checkpoints"}
    head = model.node_from_ec2_instance(
        instance("i-h", {**pc_tags("llm", "HeadNode"), **storage}), "us-east-1", PC
    )
    gpu = model.node_from_ec2_instance(
        instance("i-c", {**pc_tags("llm", "Compute", "train"), **storage}, ip="10.0.0.6"), "us-east-1", PC
    )
    bare = model.node_from_ec2_instance(
        instance("i-o", {**pc_tags("other", "HeadNode"), "trainstack:data-dir": "/a/../b"}, ip="10.0.0.7"),
        "us-east-1",
        PC,
    )
    assert head is not None and gpu is not None and bare is not None and bare.storage is None
    plan = model.build_plan([head, gpu, bare], {}, ["instance-id"])
    expected = {"data_dir": "/fsx/data", "checkpoint_dir": "/fsx/trainstack/checkpoints"}
    assert plan.hostvars["i-h"]["cluster_storage"] == expected
    assert plan.groupvars["cluster_llm"]["cluster_storage"] == expected
    assert "cluster_storage" not in plan.host_only["i-h"] and "cluster_storage" not in plan.hostvars["i-o"]
    nodes, _rest = model.unpack_records(model.pack_records([head], {}))
    assert nodes[0].storage == expected


def test_eks_nodes_are_found_by_the_tags_eks_writes_and_carry_their_storage():
    """EKS writes eks:cluster-name and eks:nodegroup-name on a managed node group's instances; the launch
    template adds the spec's storage tags (eks_render). Every node is compute, its node group the queue; the
    kind is read only when asked for, and its tag joins the one server-side filter."""
    storage = {"trainstack:data-dir": "/fsx/datasets", "trainstack:checkpoint-dir": "/fsx/ckpt"}
    eks_tags = {"eks:cluster-name": "train-eks", "eks:nodegroup-name": "h100", **storage}
    eks = model.SourceFilter(kinds=("eks",))
    node = model.node_from_ec2_instance(instance("i-e", eks_tags), "us-east-1", eks)
    assert node is not None
    assert (node.cluster_kind, node.cluster_name, node.role, node.queue) == (
        "eks",
        "train-eks",
        "compute",
        "h100",
    )
    assert node.storage == {"data_dir": "/fsx/datasets", "checkpoint_dir": "/fsx/ckpt"}
    assert model.node_from_ec2_instance(instance("i-e", eks_tags), "us-east-1", PC) is None
    assert ec2_filters(eks, []) == [{"Name": "tag-key", "Values": ["eks:cluster-name"]}]
    named = model.SourceFilter(kinds=("eks",), cluster_names=frozenset({"train-eks"}))
    assert ec2_filters(named, []) == [{"Name": "tag:eks:cluster-name", "Values": ["train-eks"]}]
    plan = model.build_plan([node], {}, ["instance-id"])
    assert plan.groupvars["cluster_train_eks"]["cluster_storage"] == node.storage


def test_a_clusters_own_tags_give_its_nodes_storage_where_their_instances_carry_none():
    """PCS's and HyperPod's nodes do not carry the spec's tags; the cluster resource does, and the AWS layer
    hands its storage to the model. A node that carries its own (its launch template wrote them) keeps
    them."""
    pcs = model.SourceFilter(kinds=("pcs",))
    bare = model.node_from_ec2_instance(
        instance("i-p", {"aws:pcs:cluster-id": "pcs_abc", "aws:pcs:compute-node-group-id": "gpu"}),
        "us-east-1",
        pcs,
    )
    own = model.node_from_ec2_instance(
        instance(
            "i-q",
            {"aws:pcs:cluster-id": "pcs_abc", "trainstack:data-dir": "/fsx/own"},
            ip="10.0.0.9",
        ),
        "us-east-1",
        pcs,
    )
    other = model.node_from_ec2_instance(
        instance("i-r", {"aws:pcs:cluster-id": "pcs_other"}, ip="10.0.0.10"), "us-east-1", pcs
    )
    assert bare is not None and own is not None and other is not None and bare.storage is None
    cluster = {"data_dir": "/fsx/datasets", "checkpoint_dir": "/fsx/ckpt"}
    model.with_cluster_storage([bare, own, other], {"pcs_abc": cluster})
    assert bare.storage == cluster
    assert own.storage == {"data_dir": "/fsx/own"}
    assert other.storage is None
    summary = {"InstanceGroupName": "controller", "InstanceId": "i-h", "InstanceType": "ml.c5.xlarge"}
    head = model.node_from_hyperpod(
        "hp", "x1", "us-east-1", summary, None, frozenset({"controller"}), frozenset(), cluster
    )
    assert head.storage == cluster
    assert (
        model.build_plan([head], {}, ["instance-id"], ssm=False).hostvars["i-h"]["cluster_storage"] == cluster
    )
