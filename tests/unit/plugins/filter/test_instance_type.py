"""Filters over the instance catalog, as roles and playbooks call them, and what the roles make of them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter import instance_type as filters

from tests.unit.roles.test_training_job_inputs import failed, render


def test_instance_type_is_the_merged_catalog_entry() -> None:
    entry = filters.instance_type("p6-b200.48xlarge")
    assert (entry["gpu_count"], entry["efa_interfaces"], entry["gpudirect_rdma"]) == (8, 8, True)
    assert entry["env"]["FI_PROVIDER"] == "efa" and entry["sources"]


def test_unknown_type_and_family_are_refused_with_the_known_names() -> None:
    with pytest.raises(AnsibleFilterError, match=r"'h200x1' is not in the catalog; known: .*local"):
        filters.instance_type("h200x1")
    with pytest.raises(AnsibleFilterError, match=r"instance family 'p9' is not in the catalog; known: g4dn"):
        filters.instance_family("p9")
    with pytest.raises(AnsibleFilterError, match=r"input must be 'types' or 'families'"):
        filters.instance_catalog_names("sizes")


def test_health_table_has_the_layout_node_health_reads() -> None:
    table = filters.instance_type_health(
        "local", {"gpu_count": 1, "gpu_model": "H200", "gpu_generation": "hopper", "gpu_arch": "sm_90"}
    )
    assert list(table["types"]) == ["local"] and table["types"]["local"]["gpu_count"] == 1
    assert set(table["defaults"]) == set(table["types"]["local"])
    assert filters.instance_type_health("p5.48xlarge")["types"]["p5.48xlarge"]["gdrcopy"] is True


def test_family_facts_drive_the_driver_choices() -> None:
    assert filters.instance_family("p6-b300")["gpu_generation"] == "blackwell"
    assert filters.instance_family("p6-b300")["nvswitch"] is True
    assert filters.instance_family("p6e-gb200")["nvswitch"] is False
    assert "p6-b300" in filters.instance_catalog_names("families")


def test_training_job_launch_fabric_comes_from_the_catalog() -> None:
    # p6-b200 was missing from the launch table; the socket rule was the one that disagreed with the stacks.
    fabric = render("{{ __training_job_plan.fabric }}", training_job_instance_type="p6-b200.48xlarge")
    assert (int(fabric["gpus"]), int(fabric["efa"])) == (8, 8)
    assert fabric["env"]["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert (
        render("{{ __training_job_plan.fabric.env }}", training_job_instance_type="lab")["GLOO_SOCKET_IFNAME"]
        == "eth0"
    )
    assert failed("input", training_job_instance_type="h200x1") == [
        "training_job_instance_type 'h200x1' is unknown; known: "
        + ", ".join(filters.instance_catalog_names("types"))
        + "."
    ]
