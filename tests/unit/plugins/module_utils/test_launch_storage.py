"""The cluster's storage defaults in the launch plan (module_utils/launch/plan.py).

training_job_cluster_storage, which the ec2_cluster inventory reads from a spec'd cluster's tags, gives
``data`` and the checkpoint directory when the caller gave none; the caller's value wins; a test case
without a ``data`` argument gets nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as catalog,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import plan

from tests.unit.plugins.module_utils.test_launch_plan import CATALOG, manifest, request

STORAGE = {"data_dir": "/fsx/data", "checkpoint_dir": "/fsx/ckpt"}


def planned(testcase: str = "pytorch/fsdp", **overrides: Any) -> dict[str, Any]:
    req = request(testcase, **overrides)
    assert plan.input_problems(req, catalog().names()) == []
    return plan.launch_plan(req, manifest(testcase), CATALOG, {})


def test_the_clusters_directories_are_the_defaults():
    found = planned(training_job_cluster_storage=STORAGE, training_job_name="run1")
    assert found["arguments"]["data"] == "/fsx/data"
    assert "--data" in found["cli"] and found["cli"][found["cli"].index("--data") + 1] == "/fsx/data"
    assert found["checkpoints"] == "/fsx/ckpt/run1"


def test_an_explicit_value_wins():
    found = planned(
        training_job_cluster_storage=STORAGE,
        training_job_name="run1",
        training_job_args={"data": "synthetic", "checkpoint-dir": "/fsx/mine"},
    )
    assert (found["arguments"]["data"], found["checkpoints"]) == ("synthetic", "/fsx/mine")
    dropped = planned(training_job_cluster_storage=STORAGE, training_job_args={"data": None})
    assert "data" not in dropped["arguments"]


def test_a_test_case_without_a_data_argument_gets_none():
    found = planned("hf/finetune", training_job_cluster_storage=STORAGE, training_job_name="ft")
    assert "data" not in found["arguments"]
    assert found["checkpoints"] == "/fsx/ckpt/ft"


def test_without_a_cluster_the_plan_is_as_before():
    found = planned(training_job_name="run1")
    assert found["arguments"]["data"] == "synthetic"
    assert found["checkpoints"] == "/fsx/trainstack/checkpoints/run1"
    only_data = planned(training_job_cluster_storage={"data_dir": "/lustre/d"}, training_job_name="run1")
    assert only_data["checkpoints"] == "/fsx/trainstack/checkpoints/run1"


@pytest.mark.parametrize(
    ("storage", "fragment"),
    [
        (
            {"data": "/fsx/data"},
            "training_job_cluster_storage has 'data', not one of data_dir, checkpoint_dir.",
        ),
        (
            {"data_dir": "fsx/data"},
            "training_job_cluster_storage data_dir 'fsx/data' must be an absolute path",
        ),
        ({"checkpoint_dir": "/fsx/../x"}, "checkpoint_dir '/fsx/../x' must not hold a '..' segment."),
        ("/fsx", "training_job_cluster_storage must be a mapping"),
    ],
)
def test_a_bad_storage_mapping_is_refused_naming_the_variable(storage, fragment):
    problems = " ".join(plan.input_problems(request(training_job_cluster_storage=storage), catalog().names()))
    assert fragment in problems


def test_the_launch_host_s_cluster_storage_fills_an_empty_request() -> None:
    """The role's default is empty; the plan takes the launch host's ``cluster_storage`` (the inventory's),
    and a value the caller gave is kept."""
    from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import with_cluster_storage

    storage = {"data_dir": "/fsx/data", "checkpoint_dir": "/fsx/trainstack/checkpoints"}
    given = {"data_dir": "/scratch/data"}
    empty = {"training_job_cluster_storage": {}}
    key = "training_job_cluster_storage"
    assert with_cluster_storage(empty, {"cluster_storage": storage})[key] == storage
    assert with_cluster_storage(empty, {})["training_job_cluster_storage"] == {}
    mine = {"training_job_cluster_storage": given}
    assert with_cluster_storage(mine, {"cluster_storage": storage})["training_job_cluster_storage"] == given


def test_a_launch_from_the_controller_takes_the_named_clusters_storage() -> None:
    """The kubernetes launcher runs on the controller (launch_host=localhost), no host of the cluster; with
    ``-e cluster=<name>`` the plan takes the storage the inventory gave that cluster's hosts (an EKS cluster's
    nodes). The launch host's own value wins; an unknown cluster, or none named, gives nothing."""
    from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import with_cluster_storage

    storage = {"data_dir": "/fsx/datasets", "checkpoint_dir": "/fsx/ckpt"}
    key = "training_job_cluster_storage"
    inventory = {
        "groups": {"cluster_train_eks": ["10.0.0.5", "10.0.0.6"], "all": ["10.0.0.5", "10.0.0.6"]},
        "hostvars": {"10.0.0.5": {"cluster_storage": storage}, "10.0.0.6": {"cluster_storage": storage}},
    }
    empty = {key: {}}
    assert with_cluster_storage(empty, {**inventory, "cluster": "train-eks"})[key] == storage
    assert with_cluster_storage(empty, {**inventory, "cluster": "other"})[key] == {}
    assert with_cluster_storage(empty, inventory)[key] == {}
    own = {"data_dir": "/home/data"}
    both = {**inventory, "cluster": "train-eks", "cluster_storage": own}
    assert with_cluster_storage(empty, both)[key] == own
