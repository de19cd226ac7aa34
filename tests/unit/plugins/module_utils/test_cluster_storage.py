"""Where a spec'd cluster keeps data and checkpoints (module_utils/cluster/storage.py, aws/cluster_tags.py).

The defaults are derived from real specs normalised by cluster_spec (the real catalog and stacks), so the
rules see what every renderer sees; the refusals go through cluster_spec.normalise, naming the key.
"""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import cluster_tags
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec, storage

from tests.support import REPO
from tests.unit.plugins.module_utils.cluster_specs import minimal_spec

pytestmark = pytest.mark.cluster


def spec(shared_storage: dict | None) -> dict:
    out = minimal_spec() if shared_storage is None else minimal_spec(shared_storage=shared_storage)
    return cluster_spec.normalise(out, "clusters/test.yml")


def refusal(shared_storage: dict) -> str:
    with pytest.raises(cluster_spec.ClusterSpecError) as err:
        spec(shared_storage)
    return str(err.value)


LINKED = {"storage_capacity_gib": 1200, "data_repository_path": "s3://example-training-data/datasets/"}


def test_a_linked_file_system_gives_its_linked_directory_and_a_checkpoint_root():
    assert storage.defaults(spec({"fsx_lustre": LINKED})) == {
        "data_dir": "/fsx/data",
        "checkpoint_dir": "/fsx/trainstack/checkpoints",
    }


def test_the_mount_and_the_linked_directory_come_from_the_spec():
    fsx = {**LINKED, "mount_dir": "/lustre", "data_repository_file_system_path": "/datasets/tokens/"}
    assert storage.defaults(spec({"fsx_lustre": fsx})) == {
        "data_dir": "/lustre/datasets/tokens",
        "checkpoint_dir": "/lustre/trainstack/checkpoints",
    }


def test_a_link_at_the_root_or_parallelclusters_import_path_is_the_mount_itself():
    root = spec({"fsx_lustre": {**LINKED, "data_repository_file_system_path": "/"}})
    assert storage.defaults(root)["data_dir"] == "/fsx"
    assert storage.defaults(spec({"fsx_lustre": LINKED}), import_at_root=True)["data_dir"] == "/fsx"


def test_an_unlinked_file_system_gives_checkpoints_only_and_no_storage_gives_nothing():
    assert storage.defaults(spec({"fsx_lustre": {"storage_capacity_gib": 1200}})) == {
        "checkpoint_dir": "/fsx/trainstack/checkpoints"
    }
    assert storage.defaults(spec(None)) == {}
    assert storage.tags(spec(None)) == {}


def test_explicit_directories_win_over_the_derived_ones():
    shared = {"fsx_lustre": LINKED, "data_dir": "/fsx/data/corpus-v2", "checkpoint_dir": "/fsx/ckpt"}
    assert storage.defaults(spec(shared)) == {
        "data_dir": "/fsx/data/corpus-v2",
        "checkpoint_dir": "/fsx/ckpt",
    }
    assert storage.defaults(spec({"efs_home": True, "data_dir": "/home/data"})) == {"data_dir": "/home/data"}


def test_the_tags_carry_the_defaults_and_read_back_the_same():
    found = storage.tags(spec({"fsx_lustre": LINKED}))
    assert found == {
        "trainstack:data-dir": "/fsx/data",
        "trainstack:checkpoint-dir": "/fsx/trainstack/checkpoints",
    }
    assert cluster_tags.storage_from_tags({**found, "trainstack:cluster": "x"}) == {
        "data_dir": "/fsx/data",
        "checkpoint_dir": "/fsx/trainstack/checkpoints",
    }


@pytest.mark.parametrize("value", ["relative", "/a/../etc", "/a b", "/$(id)", "/" + "a" * 300])
def test_a_tag_that_is_not_a_plain_absolute_path_is_not_read(value):
    assert cluster_tags.storage_from_tags({"trainstack:data-dir": value}) == {}


@pytest.mark.parametrize(
    ("shared", "fragment"),
    [
        (
            {"fsx_lustre": LINKED, "data_dir": "/scratch/data"},
            "shared_storage.data_dir: /scratch/data is not under a mount the spec declares, so the other "
            "nodes would not see it; declared: /fsx (shared_storage.fsx_lustre.mount_dir)",
        ),
        (
            {"fsx_lustre": LINKED, "checkpoint_dir": "/fsxother/ckpt"},
            "shared_storage.checkpoint_dir: /fsxother/ckpt is not under a mount",
        ),
        ({"data_dir": "/fsx/data"}, "shared_storage.data_dir: /fsx/data is not under a mount the spec"),
        ({"fsx_lustre": LINKED, "data_dir": "/fsx/../etc"}, "shared_storage.data_dir: must not hold a '..'"),
        (
            {"fsx_lustre": {"storage_capacity_gib": 1200, "data_repository_file_system_path": "/data"}},
            "shared_storage.fsx_lustre.data_repository_file_system_path: links nothing without "
            "data_repository_path",
        ),
        (
            {"fsx_lustre": {**LINKED, "data_repository_file_system_path": "data"}},
            "shared_storage.fsx_lustre.data_repository_file_system_path",
        ),
        ({"fsx_lustre": LINKED, "data_dir": "fsx/data"}, "shared_storage.data_dir"),
    ],
)
def test_a_storage_path_outside_the_rules_is_refused_naming_its_key(shared, fragment):
    message = refusal(shared)
    assert fragment in message and message.startswith("clusters/test.yml: ")


def test_the_example_specs_give_their_defaults():
    p4d = cluster_spec.load_file(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")
    assert storage.defaults(p4d) == {"data_dir": "/fsx/data", "checkpoint_dir": "/fsx/trainstack/checkpoints"}
