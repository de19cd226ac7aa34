"""ansible-inventory with trainstack.cluster.ec2_cluster against moto in server mode.

moto stands in for AWS (EC2, SageMaker, STS) through its real HTTP endpoint; PCS and ParallelCluster have
no moto backend and are represented by the EC2 tags those services write, which is what the plugin reads.
"""

from __future__ import annotations

import json

import pytest

from bench.support import moto_fleet
from bench.support.moto_fleet import plain
from tests.support import start_moto

pytestmark = pytest.mark.moto

ALL_KINDS = """
plugin: trainstack.cluster.ec2_cluster
regions: [us-east-1, us-west-2]
endpoint_url: @ENDPOINT@
cluster_kinds: [parallelcluster, pcs, hyperpod, tagged]
tagged_cluster_tag: training-cluster
tagged_role_tag: training-role
tagged_queue_tag: training-partition
pcs_login_node_groups: [pcs_login]
pcs_cluster_tags: false  # moto has no PCS API; test_storage_readback.py stubs it
"""

HYPERPOD_WORKERS = ["worker-group-1-0", "worker-group-1-1"]


def hosts(listing: dict, group: str) -> list[str]:
    return sorted(listing[group].get("hosts", []))


def test_groups_are_exact(runner, fleet):
    listing = runner.listing(ALL_KINDS)
    expected = {
        "all",
        *("kind_parallelcluster", "kind_pcs", "kind_tagged", "kind_hyperpod"),
        *("cluster_llm_a", "cluster_llm_a_head", "cluster_llm_a_login", "cluster_llm_a_compute"),
        *("cluster_llm_a_queue_train", "cluster_llm_a_queue_cpu"),
        *("cluster_pcs_abc123", "cluster_pcs_abc123_login", "cluster_pcs_abc123_compute"),
        *("cluster_pcs_abc123_queue_pcs_login", "cluster_pcs_abc123_queue_pcs_gpu"),
        *(
            "cluster_fleet_x",
            "cluster_fleet_x_head",
            "cluster_fleet_x_compute",
            "cluster_fleet_x_queue_batch",
        ),
        *("cluster_llm_b", "cluster_llm_b_head", "cluster_llm_b_compute", "cluster_llm_b_queue_train"),
        *("cluster_hp_1", "cluster_hp_1_head", "cluster_hp_1_login", "cluster_hp_1_compute"),
        *("cluster_hp_1_queue_controller_machine", "cluster_hp_1_queue_login_group"),
        "cluster_hp_1_queue_worker_group_1",
        *("role_head", "role_login", "role_compute", "region_us_east_1", "region_us_west_2"),
        *("type_c5_2xlarge", "type_c5_xlarge", "type_p5_48xlarge", "type_c5_large", "type_p4d_24xlarge"),
        *("type_m5_large", "type_g5_xlarge", "type_g5_48xlarge"),
        *(
            f"az_{i['Placement']['AvailabilityZone'].replace('-', '_')}"
            for i in fleet.instances["llm-a/head"]
        ),
        *(
            f"az_{i['Placement']['AvailabilityZone'].replace('-', '_')}"
            for i in fleet.instances["llm-b/head"]
        ),
    }
    assert set(listing) - {"_meta"} == expected
    assert sorted(listing["cluster_llm_a"]["children"]) == [
        "cluster_llm_a_compute",
        "cluster_llm_a_head",
        "cluster_llm_a_login",
        "cluster_llm_a_queue_cpu",
        "cluster_llm_a_queue_train",
    ]


def test_group_members_are_exact(runner, fleet):
    listing = runner.listing(ALL_KINDS)
    assert hosts(listing, "cluster_llm_a_head") == fleet.dns("llm-a/head")
    assert hosts(listing, "cluster_llm_a_login") == fleet.dns("llm-a/login")
    assert hosts(listing, "cluster_llm_a_compute") == sorted(
        fleet.dns("llm-a/train") + fleet.dns("llm-a/cpu")
    )
    assert hosts(listing, "cluster_llm_a_queue_train") == fleet.dns("llm-a/train")
    assert hosts(listing, "cluster_pcs_abc123_login") == fleet.dns("pcs/pcs_login")
    assert hosts(listing, "cluster_pcs_abc123_compute") == fleet.dns("pcs/pcs_gpu")
    assert hosts(listing, "cluster_fleet_x_head") == fleet.dns("fleet-x/head")
    assert hosts(listing, "cluster_fleet_x_queue_batch") == sorted(
        fleet.dns("fleet-x/head") + fleet.dns("fleet-x/compute")
    )
    assert hosts(listing, "cluster_hp_1_head") == ["controller-machine-0"]
    assert hosts(listing, "cluster_hp_1_login") == ["login-group-0"]
    assert hosts(listing, "cluster_hp_1_compute") == HYPERPOD_WORKERS
    assert hosts(listing, "role_head") == sorted(
        fleet.dns("llm-a/head")
        + fleet.dns("fleet-x/head")
        + fleet.dns("llm-b/head")
        + ["controller-machine-0"]
    )
    assert hosts(listing, "type_p5_48xlarge") == sorted(fleet.dns("llm-a/train") + HYPERPOD_WORKERS)
    assert hosts(listing, "region_us_west_2") == sorted(
        fleet.dns("llm-b/head")
        + fleet.dns("llm-b/train")
        + ["controller-machine-0", "login-group-0", *HYPERPOD_WORKERS]
    )
    hostvars = listing["_meta"]["hostvars"]
    assert len(hostvars) == 5 + 3 + 3 + 3 + 4
    for left_out in ("untagged", "stopped"):
        assert fleet.dns(left_out)[0] not in hostvars


def test_parallelcluster_host_variables_are_exact(runner, fleet):
    node = fleet.instances["llm-a/train"][0]
    hostvars = runner.listing(ALL_KINDS)["_meta"]["hostvars"][node["PrivateDnsName"]]
    assert hostvars == {
        "ansible_host": node["PrivateIpAddress"],
        "cluster_name": "llm-a",
        "cluster_kind": "parallelcluster",
        "cluster_node_role": "compute",
        "cluster_queue": "train",
        "cluster_compute_resource": "p5-od",
        "ec2_instance_id": node["InstanceId"],
        "ec2_instance_type": "p5.48xlarge",
        "ec2_region": "us-east-1",
        "ec2_availability_zone": node["Placement"]["AvailabilityZone"],
        "ec2_private_ip_address": node["PrivateIpAddress"],
        "ec2_private_dns_name": node["PrivateDnsName"],
        "ec2_gpu_count": 8,
        "ec2_gpu_model": "H100",
        "ec2_gpu_memory_mib": 81920,
        "ec2_efa_interfaces": 32,
    }


def test_gpu_facts_come_from_describe_instance_types(runner, fleet):
    """g5.xlarge is not in the instance catalog, so its A10G facts can only have come from the API."""
    hostvars = runner.listing(ALL_KINDS)["_meta"]["hostvars"]
    g5 = hostvars[fleet.dns("fleet-x/compute")[0]]
    assert (g5["ec2_gpu_count"], g5["ec2_gpu_model"], g5["ec2_gpu_memory_mib"], g5["ec2_efa_interfaces"]) == (
        1,
        "A10G",
        22888,
        0,
    )
    head = hostvars[fleet.dns("fleet-x/head")[0]]
    assert (head["ec2_gpu_count"], "ec2_gpu_model" in head) == (0, False)


def test_hyperpod_host_variables_carry_the_ssm_proxy(runner, fleet):
    hostvars = runner.listing(ALL_KINDS)["_meta"]["hostvars"]["worker-group-1-0"]
    cluster_id = fleet.hyperpod_arn.rsplit("/", 1)[1]
    target = f"sagemaker-cluster:{cluster_id}_worker-group-1-worker-group-1-0"
    assert hostvars == {
        "ansible_host": target,
        "ansible_ssh_common_args": f'-o ProxyCommand="aws ssm start-session --target {target} '
        '--document-name AWS-StartSSHSession --parameters portNumber=%p --region us-west-2"',
        "hyperpod_ssm_target": target,
        "cluster_id": cluster_id,
        "cluster_name": "hp-1",
        "cluster_kind": "hyperpod",
        "cluster_node_role": "compute",
        "cluster_queue": "worker-group-1",
        "ec2_instance_id": "worker-group-1-0",
        "ec2_instance_type": "p5.48xlarge",
        "ec2_region": "us-west-2",
        "ec2_gpu_count": 8,
        "ec2_gpu_model": "H100",
        "ec2_gpu_memory_mib": 81920,
        "ec2_efa_interfaces": 32,
    }


def test_cluster_names_keep_only_those_clusters(runner, fleet):
    listing = runner.listing(ALL_KINDS + "cluster_names: [llm-b, hp-1]\n")
    assert sorted(listing["_meta"]["hostvars"]) == sorted(
        fleet.dns("llm-b/head")
        + fleet.dns("llm-b/train")
        + ["controller-machine-0", "login-group-0", *HYPERPOD_WORKERS]
    )


def test_options_shape_names_groups_and_constructed_features(runner, fleet):
    body = ALL_KINDS.replace("pcs, hyperpod, tagged]", "pcs]") + "\n".join(
        [
            "hostnames: [instance-id]",
            "group_prefix: ts_",
            "groups:",
            "  gpu8: ec2_gpu_count == 8",
            "keyed_groups:",
            "  - key: ec2_gpu_model | default('cpu')",
            "    prefix: gpu",
            "compose:",
            "  training_port: 29500 + (ec2_gpu_count | int)",
            "",
        ]
    )
    listing = runner.listing(body)
    ids = fleet.ids
    assert hosts(listing, "gpu8") == sorted(ids("llm-a/train") + ids("pcs/pcs_gpu") + ids("llm-b/train"))
    assert hosts(listing, "gpu_A100") == ids("pcs/pcs_gpu")
    assert hosts(listing, "gpu_A10G") == ids("llm-b/train")
    assert hosts(listing, "ts_cluster_llm_b_head") == ids("llm-b/head")
    assert (
        "cluster_llm_b" not in listing and "kind_hyperpod" not in listing and "ts_kind_tagged" not in listing
    )
    assert listing["_meta"]["hostvars"][ids("llm-a/train")[0]]["training_port"] == 29508


def test_cache_is_used_until_flushed(runner, fleet, tmp_path):
    cached = (
        ALL_KINDS + f"cache: true\ncache_plugin: ansible.builtin.jsonfile\ncache_connection: {tmp_path}/c\n"
    )
    first = runner.listing(cached)
    # Same file name (the cache key) now pointing at a dead endpoint: only the cache can answer.
    dead = cached.replace("@ENDPOINT@", "http://127.0.0.1:9")
    path = runner.write(dead)
    again = runner.run(path, "--list")
    assert again.returncode == 0, again.stderr
    assert plain(json.loads(again.stdout)) == first
    flushed = runner.run(path, "--list", "--flush-cache")
    assert flushed.returncode != 0
    assert "cannot reach http://127.0.0.1:9" in " ".join(flushed.stderr.split())


def test_assume_role_reads_through_sts(runner, fleet):
    body = ALL_KINDS + "assume_role_arn: arn:aws:iam::123456789012:role/inventory-reader\n"
    assert hosts(runner.listing(body), "cluster_llm_a_head") == fleet.dns("llm-a/head")


def test_unknown_option_is_named(errors):
    assert "bogus_option" in errors(ALL_KINDS + "bogus_option: 1\n")


def test_missing_credentials_are_explained(errors):
    message = errors(ALL_KINDS, {})
    assert "no AWS credentials found" in message and "access_key/secret_key" in message


def test_unknown_profile_is_named(errors):
    message = errors(ALL_KINDS + "profile: no-such-profile\n")
    assert "profile: The config profile (no-such-profile) could not be found" in message


def test_unreachable_endpoint_is_explained(errors):
    message = errors(ALL_KINDS.replace("@ENDPOINT@", "http://127.0.0.1:9"))
    assert "cannot reach http://127.0.0.1:9" in message and "endpoint_url" in message


def test_unknown_cluster_is_an_error(errors):
    message = errors(ALL_KINDS + "cluster_names: [llm-a, no-such-cluster]\n")
    assert "cluster_names: no cluster named no-such-cluster" in message


NOTHING_MATCHES = """
plugin: trainstack.cluster.ec2_cluster
regions: [us-east-1]
endpoint_url: @ENDPOINT@
cluster_kinds: [tagged]
tagged_cluster_tag: no-instance-has-this-tag
"""


def test_no_node_at_all_is_an_error(errors):
    message = errors(NOTHING_MATCHES)
    assert "no node found (cluster_kinds: tagged; regions: us-east-1; instance_states: pending, running)" in (
        message
    )
    assert "allow_empty: true" in message


def test_allow_empty_accepts_an_empty_inventory(runner):
    listing = runner.listing(NOTHING_MATCHES + "allow_empty: true\n")
    assert listing["_meta"]["hostvars"] == {}


def test_tagged_kind_needs_its_tag(errors):
    message = errors(
        "plugin: trainstack.cluster.ec2_cluster\nregions: [us-east-1]\ncluster_kinds: [tagged]\n"
    )
    assert "tagged_cluster_tag: required" in message


def test_bad_choice_is_named(errors):
    assert "cluster_kinds" in errors(ALL_KINDS.replace("tagged]", "slurm]"))


@pytest.fixture(scope="module")
def big_region():
    """1,100 ParallelCluster nodes, one reservation each, on a moto server of their own.

    moto pages describe_instances by reservation (MaxResults counts reservations there, instances on AWS), so
    one instance per reservation makes moto page exactly as AWS would: 1,000 then 100 with the default
    page_size of 1000.
    """
    server = start_moto()
    try:
        ec2 = server.client("ec2", "eu-west-1")
        ami = moto_fleet.image_id(ec2)
        for index in range(1100):
            tags = {"parallelcluster:cluster-name": "wide", "parallelcluster:node-type": "Compute"}
            tags["parallelcluster:queue-name"] = f"q{index % 2}"
            moto_fleet.run(ec2, ami, 1, "c5.large", tags)
        yield server
    finally:
        server.stop()


def test_pagination_past_1000_instances(big_region, make_runner):
    runner = make_runner(big_region.url)
    # A long read_timeout: moto on a busy shared machine may take longer than the default for 1,000 nodes.
    body = (
        "plugin: trainstack.cluster.ec2_cluster\nregions: [eu-west-1]\nendpoint_url: @ENDPOINT@\n"
        "read_timeout: 600\n"
    )
    done = runner.run(runner.write(body), "--list", "-vvv")
    assert done.returncode == 0, done.stderr
    assert "eu-west-1: describe_instances pages=2" in done.stdout + done.stderr
    listing = plain(json.loads(done.stdout[done.stdout.index("\n{") :]))
    assert len(listing["_meta"]["hostvars"]) == 1100
    assert len(hosts(listing, "cluster_wide_queue_q0")) == len(hosts(listing, "cluster_wide_queue_q1")) == 550
