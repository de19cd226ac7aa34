#!/usr/bin/env python3
"""Benchmark: trainstack.cluster.ec2_cluster against amazon.aws.aws_ec2 on a 5,000-instance moto fleet.

Both plugins read the same moto server in the same run, configured for comparable groups (cluster, node
role, queue, instance type, availability zone) and the same jsonfile cache. Rounds interleave the two
plugins so that drift of the machine hits both alike. Timings go to JSON; nothing here asserts a speed.

Stand-in: moto in server mode plays EC2. Its server costs about 3 ms per instance returned, which both
plugins pay on the cold path; the bare paginated describe_instances time is recorded for that reason.

    python -m bench.inventory.run [--clusters 50 --compute 99 --rounds 3 --out bench/results/inventory.json]

(`make bench-inventory`). The moto server and the fleet's builders are the ones the inventory tests use
(bench/support).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.support import moto_fleet
from bench.support.lab import REPO
from bench.support.moto import MotoServer, start_moto

REGIONS = ("us-east-1", "us-west-2")
QUEUES = (("train", "p5", "p5.48xlarge"), ("eval", "p4d", "p4d.24xlarge"), ("cpu", "c5", "c5.24xlarge"))
ZONES = ("a", "b", "c")
TARGETS = {"cold_list_ratio_max": 0.5, "cached_list_ratio_max": 0.2, "cached_list_hosts_seconds_max": 3.0}


def build_fleet(server: MotoServer, clusters: int, compute: int) -> dict[str, Any]:
    """`clusters` ParallelClusters split over the regions: 1 head + `compute` nodes in 3 queues each.

    Each queue is one run_instances call, the way ParallelCluster launches a compute resource's batch, so
    the fleet has 4 reservations per cluster.
    """
    per_queue = [compute // len(QUEUES) + (1 if i < compute % len(QUEUES) else 0) for i in range(len(QUEUES))]
    started = time.monotonic()
    clients = {region: server.client("ec2", region) for region in REGIONS}
    amis = {region: moto_fleet.image_id(client) for region, client in clients.items()}
    for index in range(clusters):
        region = REGIONS[index % len(REGIONS)]
        ec2, ami = clients[region], amis[region]
        zone = f"{region}{ZONES[index % len(ZONES)]}"
        queues = {queue: (resource, itype, per_queue[i]) for i, (queue, resource, itype) in enumerate(QUEUES)}
        moto_fleet.parallelcluster(ec2, ami, f"train-{index:03d}", queues, head_type="c5.4xlarge", zone=zone)
    return {
        "clusters": clusters,
        "nodes_per_cluster": 1 + compute,
        "instances": clusters * (1 + compute),
        "regions": list(REGIONS),
        "reservations_per_cluster": 1 + len(QUEUES),
        "queues": [q[0] for q in QUEUES],
        "build_seconds": round(time.monotonic() - started, 1),
    }


def bare_describe(server: MotoServer) -> dict[str, Any]:
    """What moto alone costs: the same filtered, paginated describe_instances, no inventory work at all.

    Also counts distinct private DNS names: moto draws private IPs at random, and a collision inside a
    region (about one run in five at 2,500 per region) leaves both plugins one host short, by design.
    """
    started = time.monotonic()
    count = 0
    names: set[str] = set()
    filters = [
        {"Name": "tag-key", "Values": ["parallelcluster:cluster-name"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    for region in REGIONS:
        paginator = server.client("ec2", region).get_paginator("describe_instances")
        for page in paginator.paginate(Filters=filters, PaginationConfig={"PageSize": 1000}):
            for reservation in page["Reservations"]:
                count += len(reservation["Instances"])
                names.update(instance["PrivateDnsName"] for instance in reservation["Instances"])
    return {"seconds": round(time.monotonic() - started, 2), "instances": count, "distinct_hosts": len(names)}


def write_configs(work: Path, url: str) -> dict[str, Path]:
    """Both inventory sources, with comparable groups and the same jsonfile cache settings."""
    ours = work / "bench.ec2_cluster.yml"
    ours.write_text(
        "\n".join(
            [
                "plugin: trainstack.cluster.ec2_cluster",
                f"regions: [{', '.join(REGIONS)}]",
                f"endpoint_url: {url}",
                "cluster_kinds: [parallelcluster]",
                "read_timeout: 900",
                "cache: true",
                "cache_plugin: ansible.builtin.jsonfile",
                f"cache_connection: {work / 'cache-ec2_cluster'}",
                "cache_timeout: 86400",
                "",
            ]
        )
    )
    theirs = work / "bench.aws_ec2.yml"
    tag = "tags['parallelcluster:{0}'] | default('none')"
    theirs.write_text(
        "\n".join(
            [
                "plugin: amazon.aws.aws_ec2",
                f"regions: [{', '.join(REGIONS)}]",
                f"endpoint_url: {url}",
                "filters:",
                "  tag-key: parallelcluster:cluster-name",
                "  instance-state-name: [pending, running]",
                "hostnames: [private-dns-name, private-ip-address, instance-id]",
                "compose:",
                "  ansible_host: private_ip_address",
                "keyed_groups:",
                f'  - key: "{tag.format("cluster-name")}"',
                "    prefix: cluster",
                f'  - key: "{tag.format("node-type")}"',
                "    prefix: role",
                f"  - key: \"{tag.format('cluster-name')} ~ '_queue_' ~ {tag.format('queue-name')}\"",
                "    prefix: cluster",
                "  - key: instance_type",
                "    prefix: type",
                "  - key: placement.availability_zone",
                "    prefix: az",
                "cache: true",
                "cache_plugin: ansible.builtin.jsonfile",
                f"cache_connection: {work / 'cache-aws_ec2'}",
                "cache_timeout: 86400",
                "",
            ]
        )
    )
    return {"ec2_cluster": ours, "aws_ec2": theirs}


def timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall time of one command; a failure stops the benchmark, since its timing would mean nothing."""
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return elapsed, done.stdout


def check_listing(name: str, listing: str, instances: int, clusters: int) -> dict[str, int]:
    """Prove the timed output is a full, comparably grouped inventory and not an empty or partial one."""
    data = json.loads(listing)
    hosts = len(data["_meta"]["hostvars"])
    cluster_groups = [g for g in data if g.startswith("cluster_train_") and "_queue_" not in g]
    cluster_groups = [g for g in cluster_groups if not g.endswith(("_head", "_compute", "_login"))]
    if hosts != instances or len(cluster_groups) != clusters:
        raise RuntimeError(
            f"{name}: {hosts} hosts, {len(cluster_groups)} cluster groups; want {instances}, {clusters}"
        )
    return {"hosts": hosts, "groups": len(data) - 1, "cluster_groups": len(cluster_groups)}


def one_round(config: Path, cache: Path, env: dict[str, str], expect: tuple[int, int]) -> dict[str, Any]:
    """Cold --list (empty cache), then cached --list, then cached `ansible all --list-hosts`."""
    shutil.rmtree(cache, ignore_errors=True)
    bin_dir = moto_fleet.VENV_BIN
    cold, listing = timed([str(bin_dir / "ansible-inventory"), "-i", str(config), "--list"], env)
    shape = check_listing(config.name, listing, *expect)
    if not cache.is_dir() or not any(cache.iterdir()):
        raise RuntimeError(f"{config.name}: the cold run wrote no cache under {cache}")
    cached, listing = timed([str(bin_dir / "ansible-inventory"), "-i", str(config), "--list"], env)
    check_listing(config.name, listing, *expect)
    hosts_seconds, hosts_out = timed(
        [str(bin_dir / "ansible"), "all", "-i", str(config), "--list-hosts"], env
    )
    listed = int(hosts_out.splitlines()[0].split("(")[1].split(")")[0])
    if listed != expect[0]:
        raise RuntimeError(f"{config.name}: --list-hosts gave {listed} hosts")
    return {"cold_list": cold, "cached_list": cached, "cached_list_hosts": hosts_seconds, "shape": shape}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per plugin and measure, the ratios ours/theirs, and each target met or not."""
    measures = ("cold_list", "cached_list", "cached_list_hosts")
    medians = {
        plugin: {m: round(statistics.median(r[m] for r in rounds), 2) for m in measures}
        for plugin, rounds in runs.items()
    }
    ours, theirs = medians["ec2_cluster"], medians["aws_ec2"]
    ratios = {m: round(ours[m] / theirs[m], 3) for m in measures}
    met = {
        "cold_list_ratio": ratios["cold_list"] <= TARGETS["cold_list_ratio_max"],
        "cached_list_ratio": ratios["cached_list"] <= TARGETS["cached_list_ratio_max"],
        "cached_list_hosts_seconds": ours["cached_list_hosts"] <= TARGETS["cached_list_hosts_seconds_max"],
    }
    return {"medians_seconds": medians, "ratios_ours_over_aws_ec2": ratios, "targets": TARGETS, "met": met}


def versions() -> dict[str, str]:
    """Enough context to compare a result file with another machine's."""
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "ansible-core": version("ansible-core"),
        "amazon.aws": json.loads(
            (
                REPO / ".venv/lib/python3.11/site-packages/ansible_collections/amazon/aws/MANIFEST.json"
            ).read_text()
        )["collection_info"]["version"],
        "moto": version("moto"),
        "boto3": version("boto3"),
        "cpus": str(len(__import__("os").sched_getaffinity(0))),
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        "machine": platform.machine(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--compute", type=int, default=99, help="compute nodes per cluster")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "inventory.json")
    args = parser.parse_args()
    # SIGTERM (make interrupted, a kill) must still stop the moto server through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
    server = start_moto(log=work / "moto.log")
    try:
        fleet = build_fleet(server, args.clusters, args.compute)
        print(f"fleet: {fleet}", flush=True)
        bare = bare_describe(server)
        print(f"bare describe_instances: {bare}", flush=True)
        configs = write_configs(work, server.url)
        env = moto_fleet.clean_aws_env({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
        expect = (bare["distinct_hosts"], fleet["clusters"])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
        for index in range(args.rounds):
            for name, config in configs.items():
                result = one_round(config, work / f"cache-{name}", env, expect)
                runs[name].append(result)
                timings = {k: round(v, 2) for k, v in result.items() if k != "shape"}
                print(f"round {index + 1} {name}: {timings}", flush=True)
    finally:
        server.stop()
    report = {
        "benchmark": "inventory: trainstack.cluster.ec2_cluster vs amazon.aws.aws_ec2 (moto server)",
        "command": " ".join(["python", "-m", "bench.inventory.run", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
        "fleet": fleet,
        "bare_describe_instances": bare,
        "runs": {
            name: [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rounds]
            for name, rounds in runs.items()
        },
        **summarise(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps({k: report[k] for k in ("medians_seconds", "ratios_ours_over_aws_ec2", "met")}, indent=2)
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
