"""bench/inventory: the scale fleet's shape, the indexed moto server's answers, child timing and checks."""

from __future__ import annotations

import json
import sys

import pytest

from bench.inventory import fleet, moto_server_indexed, scale


def test_plan_is_exact_mixed_and_extends():
    """5,000 then 45,000 more is a 50,000 fleet of all three kinds in three regions, a tenth of it others."""
    small = fleet.plan(5000)
    more = fleet.plan(45000, first_cluster=int(fleet.summary(small)["clusters"]))
    whole = fleet.summary(small + more)
    assert whole["instances"] == 50000
    assert whole["other_instances"] == 5000
    assert set(whole["clusters_per_kind"]) == {"parallelcluster", "pcs", "tagged"}
    assert whole["regions"] == sorted(fleet.REGIONS)
    # The grown part starts new clusters rather than naming the first part's again.
    assert fleet.summary(small)["clusters"] + fleet.summary(more)["clusters"] == whole["clusters"]
    assert all(0 < b.count <= fleet.MAX_BATCH for b in small + more)


def test_cluster_batches_carry_the_service_tags():
    """A ParallelCluster has a head and three queues; PCS a login group; tagged fleets the chosen tags."""
    pc = dict(fleet.cluster_batches(0, 24)[0].tags)
    assert pc["parallelcluster:node-type"] == "HeadNode"
    pcs = fleet.cluster_batches(6, 24)
    assert [dict(b.tags)["aws:pcs:compute-node-group-id"] for b in pcs] == [
        "login",
        "gpu",
        "gpu-small",
        "cpu",
    ]
    tagged = fleet.cluster_batches(9, 24)
    assert dict(tagged[1].tags)[fleet.TAGGED_QUEUE_TAG] == "train"
    assert sum(b.count for b in tagged) == 24


@pytest.fixture
def backend(monkeypatch):
    """A real moto EC2 backend with tagged instances; the patch is undone after the test."""
    from moto import mock_aws
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import AmiBackend
    from moto.ec2.models.tags import TagBackend

    monkeypatch.setattr(TagBackend, "describe_tags", TagBackend.describe_tags)
    monkeypatch.setattr(AmiBackend, "describe_images", AmiBackend.describe_images)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with mock_aws():
        import boto3

        ec2 = boto3.client("ec2", region_name="us-east-1")
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        for tags in ({"a": "1", "b": "2"}, {"c": "3"}):
            ec2.run_instances(ImageId=ami, MinCount=3, MaxCount=3, TagSpecifications=fleet_tags(tags))
        yield ec2_backends["123456789012"]["us-east-1"], ami


def fleet_tags(tags: dict[str, str]) -> list[dict[str, object]]:
    return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def test_indexed_lookups_answer_as_moto_does(backend):
    """Every instance's tags, and the AMI by id, are the same before and after install()."""
    ec2, ami = backend
    ids = [i.id for r in ec2.all_reservations() for i in r.instances]
    questions = [{"resource-id": [i]} for i in ids] + [{"resource-id": ["i-*"]}, {"key": ["a"]}, None]
    before = [ec2.describe_tags(filters=q) for q in questions]
    images_before = [a.id for a in ec2.describe_images(filters={"image-id": ami})]
    moto_server_indexed.install()
    assert [ec2.describe_tags(filters=q) for q in questions] == before
    assert [a.id for a in ec2.describe_images(filters={"image-id": ami})] == images_before == [ami]
    assert ec2.describe_images(filters={"image-id": "ami-00000000"}) == []
    assert all(len(ec2.describe_tags(filters={"resource-id": [i]})) in (1, 2) for i in ids)


def test_literal_passes_patterns_to_moto():
    assert moto_server_indexed.literal(["i-123"]) == "i-123"
    assert moto_server_indexed.literal("ami-1") == "ami-1"
    assert moto_server_indexed.literal(["i-*"]) is None
    assert moto_server_indexed.literal(["i-1", "i-2"]) is None


def test_run_child_reads_the_child_peak_rss():
    """A child that holds about 200 MiB reports at least that, and spends CPU time writing it."""
    code = "b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('ok')"
    child = scale.run_child([sys.executable, "-c", code], {}, timeout=60)
    assert child is not None and child.stdout.strip() == "ok"
    assert 200 <= child.rss_mib < 400
    assert child.cpu_seconds > 0


def test_run_child_does_not_count_this_process_memory():
    """Linux carries peak RSS across fork and exec; a small child of a large process must still read small."""
    ballast = bytearray(300 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])
    child = scale.run_child([sys.executable, "-c", "print('ok')"], {}, timeout=60)
    assert child is not None and child.rss_mib < 100
    del ballast


def test_run_child_cut_off_and_failure():
    assert scale.run_child([sys.executable, "-c", "import time; time.sleep(30)"], {}, timeout=0.5) is None
    with pytest.raises(RuntimeError, match="failed \\(3\\)"):
        scale.run_child([sys.executable, "-c", "import sys; sys.exit(3)"], {}, timeout=60)


def test_check_listing_refuses_a_partial_inventory():
    listing = {
        "_meta": {"hostvars": {"h1": {}, "h2": {}}},
        "cluster_train_par_0000": {},
        "cluster_train_par_0000_head": {},
        "cluster_train_par_0000_queue_train": {},
    }
    assert scale.check_listing("x", json.dumps(listing), 2, 1)["cluster_groups"] == 1
    with pytest.raises(RuntimeError, match="1 hosts"):
        del listing["_meta"]["hostvars"]["h2"]
        scale.check_listing("x", json.dumps(listing), 2, 1)


def test_medians_and_targets():
    rounds = [{"cold_list": 10.0, "cached_list": 0.9}, {"cold_list": 12.0, "cached_list": 1.3}]
    rounds.append({"cold_list": 11.0})
    assert scale.medians(rounds) == {"cold_list": 11.0, "cached_list": 1.1}
    ratios = {"wall": 1.05, "work": 1.4}
    met = scale.judge(5000, ratios, {"cold_list": 11.0, "cached_list": 1.1, "cached_list_hosts": 0.5})
    assert met == {
        "cold_list_over_floor_wall": True,
        "cold_list_over_floor_work": False,
        "cached_list_seconds": False,
        "cached_list_hosts_seconds": True,
    }
    met = scale.judge(50000, {"wall": None, "work": 1.0}, {})
    assert met == {"cold_list_over_floor_wall": None, "cold_list_over_floor_work": True}
    assert scale.listed_hosts("  hosts (42):\n    a\n") == 42


def test_cold_runs_are_paired_with_their_own_floor():
    """Each round's cold run is set against the floor read just before it, not the first floor of the size."""
    first = {"seconds": 100.0, "client_cpu": 10.0, "moto_cpu": 30.0}
    rounds = [
        {
            "cold_list": 30.0,
            "cold_list_cpu": 12.0,
            "cold_list_moto_cpu": 30.0,
            "floor": {**first, "seconds": 25.0},
        },
        {
            "cold_list": 44.0,
            "cold_list_cpu": 14.0,
            "cold_list_moto_cpu": 30.0,
            "floor": {**first, "seconds": 40.0},
        },
        {"cold_list": None},
    ]
    assert scale.paired(rounds, first) == {"wall": 1.15, "work": 1.075}
    assert scale.paired([{"cold_list": 50.0}], first) == {"wall": 0.5, "work": None}


def test_plot_series_keeps_cut_off_runs_and_leaves_out_measures_not_taken():
    from bench.inventory import report

    document = {
        "sizes": [
            {
                "instances": 50000,
                "floor_describe_instances": {"seconds": 100.0},
                "runs": {
                    "ec2_cluster": [{"cold_list": 105.0, "cold_list_rss_mib": 900.0}],
                    "aws_ec2": [{"cold_list": None, "timed_out_after": 1200.0}],
                },
                "medians": {
                    "ec2_cluster": {"cold_list": 105.0, "cold_list_rss_mib": 900.0},
                    "aws_ec2": {"cold_list": None},
                },
            }
        ]
    }
    assert report.series(document) == {
        50000: [
            ("describe_instances floor", 100.0, None, False),
            ("ours cold --list", 105.0, 900.0, False),
            ("aws_ec2 cold --list", 1200.0, None, True),
        ]
    }


def test_table_rows_are_measures_and_columns_sizes():
    from bench.inventory import report

    entry = {
        "instances": 5000,
        "floor_describe_instances": {"seconds": 10.0, "client_cpu": 2.0, "moto_cpu": 7.0},
        "runs": {
            "ec2_cluster": [{"cold_list": 11.0}],
            "aws_ec2": [{"cold_list": None, "timed_out_after": 60.0}],
        },
        "medians": {
            "ec2_cluster": {"cold_list": 11.0, "cold_list_cpu": 3.0, "cold_list_rss_mib": 180.4},
            "aws_ec2": {"cold_list": None},
        },
    }
    lines = report.table({"sizes": [entry]}).splitlines()
    assert lines[0] == "| Measure (median) | 5,000 instances |"
    assert lines[2] == "| describe_instances floor: wall s (client CPU s, moto CPU s) | 10.00 (2.00, 7.00) |"
    cold = "| ours cold --list: wall s (CPU s, peak RSS) | 11.00 (3.00 CPU, 180 MiB); 1.10x floor wall |"
    assert lines[3] == cold
    assert lines[4] == "| ours cached --list: wall s (CPU s, peak RSS) | not run |"
    assert lines[6] == "| aws_ec2 cold --list: wall s (CPU s, peak RSS) | >= 60 (cut off) |"


def test_render_puts_the_table_between_the_markers_only():
    from bench.inventory import report

    document = {
        "sizes": [
            {
                "instances": 10,
                "floor_describe_instances": {"seconds": 1.0, "client_cpu": 0.5, "moto_cpu": 0.4},
                "runs": {},
                "medians": {},
            }
        ]
    }
    page = f"# P\n\nbefore\n\n{report.START}\nSTALE\n{report.END}\n\nafter\n"
    out = report.render(page, document, "x.json")
    assert out.startswith("# P\n\nbefore\n\n") and out.endswith("\n\nafter\n")
    assert "STALE" not in out and report.table(document) in out
    with pytest.raises(ValueError, match="exactly one"):
        report.render(page + report.START, document, "x.json")


def test_reference_page_shows_the_committed_result():
    """docs/inventory-scale.md's inventory table is bench/results/inventory_50k.json, rendered."""
    from pathlib import Path

    from bench.inventory import report

    root = Path(__file__).resolve().parents[3]
    document = json.loads((root / "bench" / "results" / "inventory_50k.json").read_text(encoding="utf-8"))
    page = (root / "docs" / "inventory-scale.md").read_text(encoding="utf-8")
    assert report.table(document) in page
