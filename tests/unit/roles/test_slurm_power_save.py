"""Slurm's power saving and health check as the lab's elastic nodes configure it, rendered from the roles'
data.

The lab's inventory (roles/lab/templates/hosts.yml.j2) carries the Slurm settings for its elastic nodes;
the slurm role renders them into slurm.conf: CLOUD node lines with what each node has (no host backs them
when the file is written), the power programs, only the elastic partition powered down, and slurmd's
health check. A lab without elastic nodes renders none of it: the static lab is as it was."""

from __future__ import annotations

import yaml

from tests.support.roles import (
    assert_task_failure,
    render_role_template,
    role_data_templar,
    role_task,
    template_value,
)

STATIC = [
    {"name": "ts-head", "ip": "10.77.0.11", "group": "head"},
    {"name": "ts-compute1", "ip": "10.77.0.12", "group": "compute"},
]
ELASTIC = [
    {"name": "ts-elastic1", "ip": "10.77.0.51", "group": "elastic"},
    {"name": "ts-elastic2", "ip": "10.77.0.52", "group": "elastic"},
]


def lab_inventory(elastic: int) -> dict:
    templar = role_data_templar(
        "lab", lab_elastic_nodes=elastic, __lab_nodes=STATIC, __lab_elastic_nodes=ELASTIC[:elastic]
    )
    return yaml.safe_load(render_role_template(templar, "lab", "hosts.yml.j2"))


def slurm_conf(inventory_vars: dict) -> list[str]:
    """slurm.conf's lines for the inventory's Slurm variables (static node lines left out: need facts)."""
    templar = role_data_templar(
        "slurm",
        os_vars="debian-12",
        **inventory_vars,
        __slurm_controller="ts-head",
        __slurm_use_cgroups=False,
        __slurm_any_gpus=False,
    )
    settings = template_value(templar, "__slurm_conf")
    lines = template_value(templar, "__slurm_cloud_lines")
    conf = role_data_templar("slurm", __conf_header="test", __conf_settings=settings, __conf_lines=lines)
    return render_role_template(conf, "slurm", "generic.conf.j2").splitlines()


def test_elastic_nodes_are_cloud_nodes_with_power_programs_and_a_health_check() -> None:
    inventory = lab_inventory(2)
    lines = slurm_conf(inventory["all"]["vars"])
    assert (
        "NodeName=ts-elastic1 NodeAddr=10.77.0.51 NodeHostname=ts-elastic1 CPUs=1 RealMemory=1024 State=CLOUD"
    ) in lines
    assert (
        "NodeName=ts-elastic2 NodeAddr=10.77.0.52 NodeHostname=ts-elastic2 CPUs=1 RealMemory=1024 State=CLOUD"
        in lines
    )
    for line in (
        "ResumeProgram=/usr/local/libexec/trainstack-lab-resume",
        "SuspendProgram=/usr/local/libexec/trainstack-lab-suspend",
        "SuspendExcParts=compute",
        "SlurmctldParameters=idle_on_node_suspend",
        "PrivateData=cloud",
        "HealthCheckProgram=/usr/local/sbin/trainstack-node-health-check",
        "HealthCheckInterval=15",
    ):
        assert line in lines, line
    partitions = {p["name"]: p for p in inventory["all"]["vars"]["slurm_partitions"]}
    assert partitions["elastic"]["nodes"] == ["ts-elastic1", "ts-elastic2"]
    assert partitions["compute"]["default"] is True
    elastic = inventory["all"]["children"]["elastic"]
    assert elastic["vars"]["slurm_slurmd_options"] == "-b"
    assert elastic["vars"]["node_health_power_down_failed"] is True
    assert sorted(elastic["hosts"]) == ["ts-elastic1", "ts-elastic2"]


def test_a_lab_without_elastic_nodes_renders_none_of_it() -> None:
    inventory = lab_inventory(0)
    assert "elastic" not in inventory["all"]["children"]
    lines = slurm_conf(inventory["all"]["vars"])
    assert not [
        line for line in lines if line.split("=")[0] in {"ResumeProgram", "HealthCheckProgram", "NodeName"}
    ]


def test_a_partition_naming_an_undefined_cloud_node_is_refused() -> None:
    task = role_task("slurm", "validate.yml", "Check partitions, controller and GPUs")
    base = {
        "groups": {"all": ["ts-head"], "head": ["ts-head"], "compute": []},
        "slurm_cloud_nodes": [{"NodeName": "ts-elastic1", "CPUs": 1, "RealMemory": 1024}],
        "__slurm_controllers": ["ts-head"],
    }
    partitions = [{"name": "elastic", "groups": [], "nodes": ["ts-elastic1", "ts-elastic9"]}]
    templar = role_data_templar(
        "slurm",
        **base,
        slurm_partitions=partitions,
        __slurm_partition_hosts={"elastic": partitions[0]["nodes"]},
    )
    message = assert_task_failure(templar, task)
    assert (
        message is not None
        and "Partition nodes that are not in slurm_cloud_nodes: ['ts-elastic9']" in message
    )
    partitions[0]["nodes"] = ["ts-elastic1"]
    no_cpus = {**base, "slurm_cloud_nodes": [{"NodeName": "ts-elastic1", "RealMemory": 1024}]}
    templar = role_data_templar(
        "slurm", **no_cpus, slurm_partitions=partitions, __slurm_partition_hosts={"elastic": ["ts-elastic1"]}
    )
    message = assert_task_failure(templar, task)
    assert message is not None and "need NodeName, CPUs and RealMemory: ['ts-elastic1']" in message
    good = role_data_templar(
        "slurm", **base, slurm_partitions=partitions, __slurm_partition_hosts={"elastic": ["ts-elastic1"]}
    )
    assert assert_task_failure(good, task) is None
