#!/usr/bin/env python3
"""Benchmark: the ec2_cluster inventory at 5,000 and 50,000 instances, its floor and amazon.aws.aws_ec2.

One moto server (bench/inventory/moto_server_indexed.py, in its own process) is populated once with the
fleet of bench.inventory.fleet: three regions, clusters of the ParallelCluster, PCS and tagged kinds, one
VPC per region with a subnet per zone, and a tenth of the instances belonging to no cluster. The first size
is measured, the fleet is grown to the next size on the same server, and so on. At each size, in this order:

- floor: the bare paginated describe_instances of every region with the plugin's own filters, one thread
  per region as the plugin reads them, timed in this process (no interpreter start, no inventory work);
- ours, `--rounds` times: the floor again, then `ansible-inventory --list` with an empty cache (cold),
  cached `--list` and cached `ansible all --list-hosts`; the cold run is judged against the floor of its
  own round, by wall time and by CPU spent (ours and moto's), which a shared machine's load does not move;
- aws_ec2 with comparable groups and the same cache plugin: cold `--list`, and at sizes up to
  `--aws-ec2-cached-max` also the cached `--list` and `--list-hosts`, `--aws-ec2-rounds` times.

Every inventory process runs under /usr/bin/time for its own peak RSS and CPU time, and every listing is
checked for the full host and cluster count before its time is kept. Nothing here asserts a speed.

    python -m bench.inventory.scale [--sizes 5000 50000 --out bench/results/inventory_50k.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.inventory import fleet
from bench.inventory.run import versions
from bench.support import moto_fleet
from bench.support.lab import REPO
from bench.support.moto import MotoServer, start_moto

SERVER = Path(__file__).with_name("moto_server_indexed.py")
TIME = "/usr/bin/time"  # GNU time: -f %M is the peak RSS in KiB of the command alone
TAG_KEYS = ("parallelcluster:cluster-name", "aws:pcs:cluster-id", fleet.TAGGED_CLUSTER_TAG)
FILTERS = [
    {"Name": "tag-key", "Values": list(TAG_KEYS)},
    {"Name": "instance-state-name", "Values": ["pending", "running"]},
]
TARGETS = {
    "cold_list_over_floor_max": 1.1,
    "cached_list_seconds_max": 1.0,
    "cached_list_hosts_seconds_max": 1.0,
    "at_instances": 5000,
}
PLUGINS = {"ec2_cluster": "trainstack.cluster.ec2_cluster", "aws_ec2": "amazon.aws.aws_ec2"}
SUBNETS = {"a": "10.0.0.0/18", "b": "10.0.64.0/18", "c": "10.0.128.0/18"}


@dataclass
class Child:
    """One finished inventory process: wall seconds, CPU seconds (user + system), peak RSS in MiB, output.

    CPU seconds are kept beside wall time because on a shared machine the wall time includes waiting for a
    core; the CPU time is what the process itself spent.
    """

    seconds: float
    cpu_seconds: float
    rss_mib: float
    stdout: str


def run_child(argv: Sequence[str], env: dict[str, str], timeout: float) -> Child | None:
    """Run argv under /usr/bin/time for its own peak RSS and CPU time; None when it outlived `timeout`.

    Why /usr/bin/time and not wait4 here: Linux carries a process's peak RSS across fork and exec, so a
    child forked from this process (which holds the floor's answers) would report at least this process's
    size. /usr/bin/time is small, and the command it starts inherits only that. A failure stops the
    benchmark, since its time would mean nothing.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as usage:
        command = [TIME, "-f", "%M %U %S", "-o", usage.name, *argv]
        started = time.monotonic()
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None
        elapsed = time.monotonic() - started
        if process.returncode != 0:
            text = err.decode(errors="replace")
            raise RuntimeError(f"{' '.join(argv)} failed ({process.returncode}):\n{text[-4000:]}")
        kib, user, system = usage.read().split()[-3:]
    return Child(elapsed, float(user) + float(system), int(kib) / 1024, out.decode())


def make_subnets(server: MotoServer) -> dict[str, str]:
    """One VPC per region with a /18 subnet per zone: room for 16,000 addresses each, handed out in order
    (without a subnet moto draws addresses at random and some host names would collide)."""
    subnets = {}
    for region in fleet.REGIONS:
        ec2 = server.client("ec2", region)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for letter, cidr in SUBNETS.items():
            zone = f"{region}{letter}"
            answer = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)
            subnets[zone] = answer["Subnet"]["SubnetId"]
    return subnets


def build(server: MotoServer, batches: Sequence[fleet.Batch], subnets: dict[str, str]) -> float:
    """RunInstances per batch, one region's calls after another's; returns the seconds it took."""
    started = time.monotonic()
    clients = {region: server.client("ec2", region) for region in fleet.REGIONS}
    amis = {region: moto_fleet.image_id(client) for region, client in clients.items()}
    for batch in batches:
        kwargs: dict[str, Any] = {}
        if batch.tags:
            kwargs["TagSpecifications"] = moto_fleet.tag_spec(dict(batch.tags))
        clients[batch.region].run_instances(
            ImageId=amis[batch.region],
            MinCount=batch.count,
            MaxCount=batch.count,
            InstanceType=batch.instance_type,
            SubnetId=subnets[batch.zone],
            **kwargs,
        )
    return time.monotonic() - started


def server_cpu(server: MotoServer) -> float:
    """CPU seconds the moto server process has used so far (utime + stime from /proc)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor(server: MotoServer) -> dict[str, Any]:
    """The least any inventory must do: every region's filtered, paginated describe_instances, in parallel.

    Also counts distinct private DNS names, the host names both inventories use.
    """
    clients = {region: server.client("ec2", region) for region in fleet.REGIONS}

    def region_read(region: str) -> tuple[int, int, set[str]]:
        pages = count = 0
        names: set[str] = set()
        paginator = clients[region].get_paginator("describe_instances")
        for page in paginator.paginate(Filters=FILTERS, PaginationConfig={"PageSize": 1000}):
            pages += 1
            for reservation in page["Reservations"]:
                count += len(reservation["Instances"])
                names.update(instance["PrivateDnsName"] for instance in reservation["Instances"])
        return pages, count, names

    started, moto_cpu, own_cpu = time.monotonic(), server_cpu(server), time.process_time()
    with ThreadPoolExecutor(len(fleet.REGIONS)) as pool:
        answers = list(pool.map(region_read, fleet.REGIONS))
    seconds = time.monotonic() - started
    moto_cpu, own_cpu = server_cpu(server) - moto_cpu, time.process_time() - own_cpu
    names = set().union(*(a[2] for a in answers))
    return {
        "seconds": round(seconds, 2),
        "client_cpu": round(own_cpu, 2),
        "moto_cpu": round(moto_cpu, 2),
        "instances": sum(a[1] for a in answers),
        "pages": sum(a[0] for a in answers),
        "distinct_hosts": len(names),
    }


def ours_config(work: Path, url: str) -> Path:
    """Every EC2-backed kind, the defaults otherwise, and a jsonfile cache."""
    path = work / "scale.ec2_cluster.yml"
    lines = [
        "plugin: trainstack.cluster.ec2_cluster",
        f"regions: [{', '.join(fleet.REGIONS)}]",
        f"endpoint_url: {url}",
        "cluster_kinds: [parallelcluster, pcs, tagged]",
        # moto has no PCS API: reading the PCS clusters' tags would only fail after its retries.
        "pcs_cluster_tags: false",
        f"tagged_cluster_tag: {fleet.TAGGED_CLUSTER_TAG}",
        f"tagged_role_tag: {fleet.TAGGED_ROLE_TAG}",
        f"tagged_queue_tag: {fleet.TAGGED_QUEUE_TAG}",
        "read_timeout: 900",
        "cache: true",
        "cache_plugin: ansible.builtin.jsonfile",
        f"cache_connection: {work / 'cache-ec2_cluster'}",
        "cache_timeout: 86400",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def aws_ec2_config(work: Path, url: str) -> Path:
    """aws_ec2 set up for the same hosts and comparable groups: cluster, role, cluster queue, type, zone."""
    name = " or ".join(f"tags.get('{key}')" for key in TAG_KEYS) + " or 'none'"
    role = "tags.get('parallelcluster:node-type') or tags.get('training-role') or 'compute'"
    queue = (
        "tags.get('parallelcluster:queue-name') or tags.get('aws:pcs:compute-node-group-id')"
        f" or tags.get('{fleet.TAGGED_QUEUE_TAG}') or 'none'"
    )
    path = work / "scale.aws_ec2.yml"
    lines = [
        "plugin: amazon.aws.aws_ec2",
        f"regions: [{', '.join(fleet.REGIONS)}]",
        f"endpoint_url: {url}",
        "filters:",
        f"  tag-key: [{', '.join(repr(key) for key in TAG_KEYS)}]",
        "  instance-state-name: [pending, running]",
        "hostnames: [private-dns-name, private-ip-address, instance-id]",
        "compose:",
        "  ansible_host: private_ip_address",
        "keyed_groups:",
        f'  - key: "{name}"',
        "    prefix: cluster",
        f'  - key: "{role}"',
        "    prefix: role",
        f"  - key: \"({name}) ~ '_queue_' ~ ({queue})\"",
        "    prefix: cluster",
        "  - key: instance_type",
        "    prefix: type",
        "  - key: placement.availability_zone",
        "    prefix: az",
        "cache: true",
        "cache_plugin: ansible.builtin.jsonfile",
        f"cache_connection: {work / 'cache-aws_ec2'}",
        "cache_timeout: 86400",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def check_listing(name: str, listing: str, hosts: int, clusters: int) -> dict[str, int]:
    """Prove the timed output is a full, comparably grouped inventory and not an empty or partial one."""
    data = json.loads(listing)
    found = len(data["_meta"]["hostvars"])
    groups = [g for g in data if g.startswith("cluster_train_") and "_queue_" not in g]
    groups = [g for g in groups if not g.endswith(("_head", "_compute", "_login"))]
    if found != hosts or len(groups) != clusters:
        raise RuntimeError(f"{name}: {found} hosts, {len(groups)} cluster groups; want {hosts}, {clusters}")
    return {"hosts": found, "groups": len(data) - 1, "cluster_groups": len(groups)}


def listed_hosts(output: str) -> int:
    """`ansible all --list-hosts` begins with `  hosts (N):`."""
    return int(output.splitlines()[0].split("(")[1].split(")")[0])


def measure(
    config: Path,
    cache: Path,
    env: dict[str, str],
    expect: tuple[int, int],
    cached: bool,
    timeout: float,
    server: MotoServer,
) -> dict[str, Any]:
    """Cold --list with an empty cache; then, if asked, cached --list and cached --list-hosts."""
    shutil.rmtree(cache, ignore_errors=True)
    inventory = [str(moto_fleet.VENV_BIN / "ansible-inventory"), "-i", str(config), "--list"]
    moto_before = server_cpu(server)
    cold = run_child(inventory, env, timeout)
    if cold is None:
        return {"cold_list": None, "timed_out_after": timeout}
    result: dict[str, Any] = {
        "cold_list": cold.seconds,
        "cold_list_moto_cpu": server_cpu(server) - moto_before,
        "cold_list_cpu": cold.cpu_seconds,
        "cold_list_rss_mib": cold.rss_mib,
        "shape": check_listing(config.name, cold.stdout, *expect),
    }
    if not cached:
        return result
    if not cache.is_dir() or not any(cache.iterdir()):
        raise RuntimeError(f"{config.name}: the cold run wrote no cache under {cache}")
    warm = run_child(inventory, env, timeout)
    if warm is None:
        return {**result, "cached_list": None, "timed_out_after": timeout}
    check_listing(config.name, warm.stdout, *expect)
    hosts_argv = [str(moto_fleet.VENV_BIN / "ansible"), "all", "-i", str(config), "--list-hosts"]
    listing = run_child(hosts_argv, env, timeout)
    if listing is None:
        return {**result, "cached_list": warm.seconds, "cached_list_hosts": None, "timed_out_after": timeout}
    if listed_hosts(listing.stdout) != expect[0]:
        raise RuntimeError(f"{config.name}: --list-hosts gave {listed_hosts(listing.stdout)} hosts")
    return {
        **result,
        "cached_list": warm.seconds,
        "cached_list_cpu": warm.cpu_seconds,
        "cached_list_rss_mib": warm.rss_mib,
        "cached_list_hosts": listing.seconds,
        "cached_list_hosts_cpu": listing.cpu_seconds,
        "cached_list_hosts_rss_mib": listing.rss_mib,
    }


def medians(rounds: list[dict[str, Any]]) -> dict[str, float | None]:
    """Median of every numeric measure over the rounds that have it."""
    keys = [k for k, v in rounds[0].items() if v is None or isinstance(v, (int, float))] if rounds else []
    keys = [k for k in keys if k != "timed_out_after"]
    out: dict[str, float | None] = {}
    for key in keys:
        values = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
        out[key] = round(statistics.median(values), 3) if values else None
    return out


def paired(rounds: list[dict[str, Any]], bare: dict[str, Any]) -> dict[str, float | None]:
    """Ours' cold --list against the floor read just before it, per round, then the median.

    `wall` is cold wall / floor wall. `work` is (ours' CPU + moto's CPU during ours) / (floor client CPU +
    moto's CPU during the floor): on a shared machine wall times taken minutes apart see different loads,
    and only this ratio is free of that. A round without a floor of its own is paired with `bare`.
    """
    walls, works = [], []
    for result in rounds:
        cold, floor_ = result.get("cold_list"), result.get("floor") or bare
        if cold is None:
            continue
        walls.append(cold / floor_["seconds"])
        if "cold_list_cpu" in result and "cold_list_moto_cpu" in result:
            spent = result["cold_list_cpu"] + result["cold_list_moto_cpu"]
            works.append(spent / (floor_["client_cpu"] + floor_["moto_cpu"]))
    return {
        "wall": round(statistics.median(walls), 3) if walls else None,
        "work": round(statistics.median(works), 3) if works else None,
    }


def judge(
    size: int, ratios: dict[str, float | None], ours: dict[str, float | None]
) -> dict[str, bool | None]:
    """The targets: cold --list against the floor (wall and work ratio) at every size; the cached ones at
    TARGETS' size."""
    limit = TARGETS["cold_list_over_floor_max"]
    met: dict[str, bool | None] = {
        f"cold_list_over_floor_{kind}": None if ratios[kind] is None else ratios[kind] <= limit
        for kind in ("wall", "work")
    }
    if size == TARGETS["at_instances"]:
        for key in ("cached_list", "cached_list_hosts"):
            value = ours.get(key)
            met[f"{key}_seconds"] = None if value is None else value <= TARGETS[f"{key}_seconds_max"]
    return met


def size_entry(size: int, shape: dict[str, Any], bare: dict[str, Any], runs: dict[str, list]) -> dict:
    """One size's record: the fleet, the floor, every run, the medians and the targets met or not."""
    summary = {name: medians(rounds) for name, rounds in runs.items() if rounds}
    ours = summary.get("ec2_cluster", {})
    ratios = paired(runs.get("ec2_cluster", []), bare)
    return {
        "instances": size,
        "fleet": shape,
        "floor_describe_instances": bare,
        "runs": runs,
        "medians": summary,
        "cold_list_over_floor": ratios,
        "met": judge(size, ratios, ours),
    }


def write(out: Path, argv: Sequence[str], sizes: list[dict[str, Any]], complete: bool) -> None:
    """The result file, rewritten after every measurement so that a cut-off run keeps what it measured."""
    report = {
        "benchmark": "inventory at scale: trainstack.cluster.ec2_cluster vs its describe_instances floor "
        "and amazon.aws.aws_ec2 (moto server)",
        "command": " ".join(["python", "-m", "bench.inventory.scale", *argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "complete": complete,
        "versions": versions(),
        "load_average": list(os.getloadavg()),
        "moto_server": SERVER.name,
        "targets": TARGETS,
        "sizes": sizes,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of ours at the targets' size")
    parser.add_argument("--large-rounds", type=int, default=1, help="rounds of ours at larger sizes")
    parser.add_argument("--aws-ec2-rounds", type=int, default=1)
    parser.add_argument(
        "--aws-ec2-cached-max", type=int, default=5000, help="largest size with aws_ec2 cached"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="cut-off of one inventory run, s")
    parser.add_argument("--skip-aws-ec2", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "inventory_50k.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = Path(tempfile.mkdtemp(prefix="bench-inventory-scale-"))
    server = start_moto(log=work / "moto.log", server=SERVER)
    env = moto_fleet.clean_aws_env(dict(moto_fleet.KEYS))
    sizes: list[dict[str, Any]] = []
    batches: list[fleet.Batch] = []
    try:
        subnets = make_subnets(server)
        configs = {"ec2_cluster": ours_config(work, server.url), "aws_ec2": aws_ec2_config(work, server.url)}
        for size in sorted(args.sizes):
            clusters_so_far = int(fleet.summary(batches)["clusters"]) if batches else 0
            more = fleet.plan(size - sum(b.count for b in batches), first_cluster=clusters_so_far)
            build_seconds = build(server, more, subnets)
            batches += more
            shape = {**fleet.summary(batches), "build_seconds": round(build_seconds, 1)}
            print(f"fleet {size}: {shape}", flush=True)
            bare = floor(server)
            print(f"floor {size}: {bare}", flush=True)
            expect = (bare["distinct_hosts"], int(shape["clusters"]))
            runs: dict[str, list[dict[str, Any]]] = {"ec2_cluster": [], "aws_ec2": []}
            wanted = {
                "ec2_cluster": args.rounds if size <= TARGETS["at_instances"] else args.large_rounds,
                "aws_ec2": 0 if args.skip_aws_ec2 else args.aws_ec2_rounds,
            }
            # Ours first in every round, then aws_ec2 (the slowest) once its rounds are due, so that a run
            # cut short still holds the figures of ours.
            for index in range(max(wanted.values())):
                for name, config in configs.items():
                    if index >= wanted[name]:
                        continue
                    cached = name == "ec2_cluster" or size <= args.aws_ec2_cached_max
                    # Only the plugin under measurement is enabled, as in a user's configuration: with
                    # aws_ec2 enabled too, every run would also import boto3 for it (about 0.5 s of CPU).
                    own_env = {**env, "ANSIBLE_INVENTORY_ENABLED": PLUGINS[name]}
                    cache = work / f"cache-{name}"
                    # Ours is paired with a floor read just before it, so both see about the same load.
                    own_floor = floor(server) if name == "ec2_cluster" else None
                    result = measure(config, cache, own_env, expect, cached, args.timeout, server)
                    if own_floor is not None:
                        result["floor"] = own_floor
                    result["load_average"] = list(os.getloadavg())
                    runs[name].append(result)
                    print(f"{size} round {index + 1} {name}: {result}", flush=True)
                    write(args.out, sys.argv[1:], [*sizes, size_entry(size, shape, bare, runs)], False)
            sizes.append(size_entry(size, shape, bare, runs))
    finally:
        server.stop()
    write(args.out, sys.argv[1:], sizes, True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
