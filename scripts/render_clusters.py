#!/usr/bin/env python3
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Check cluster specs and render each as a ParallelCluster 3 configuration (`make cluster-configs`).

Why a script beside the pcluster_config module: `make validate-pcluster` checks every example spec offline,
before any foundation exists, so it renders with a foundation file (`--foundation`, JSON or YAML) or, without
one, with SAMPLE_FOUNDATION: placeholder ids of the right form that name no real resource. The rendering is
the module's own (module_utils/cluster/pcluster_render.py).

Usage: render_clusters.py --out DIR [--foundation FILE] SPEC.yml...   writes DIR/<spec file stem>.yaml
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (  # noqa: E402
    ClusterSpecError,
    load_file,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcluster_render import (  # noqa: E402
    RenderError,
    render,
)

# Placeholders of the right form (no real resource): what the foundation playbook's outputs look like.
SAMPLE_FOUNDATION = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "bucket": "trainstack-example-cluster",
    "bundle_sha256": "0" * 64,
    "database": {
        "uri": "slurmdb.example.internal:3306",
        "user_name": "slurm",
        "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:slurmdb-AbCdEf",
    },
}
SAMPLE_AMI = "ami-0d0d0d0d0d0d0d0d0"


def main(argv: list[str] | None = None) -> int:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--foundation", type=Path, help="the foundation's outputs (JSON or YAML)")
    args = parser.parse_args(argv)
    foundation = yaml.safe_load(args.foundation.read_text()) if args.foundation else SAMPLE_FOUNDATION
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for path in args.specs:
        try:
            config = render(load_file(path), foundation, SAMPLE_AMI if not args.foundation else None)
        except (ClusterSpecError, RenderError) as exc:
            print(f"FAIL  {path}\n{exc}", file=sys.stderr)
            failed = True
            continue
        target = args.out / f"{path.stem}.yaml"
        target.write_text("---\n" + yaml.safe_dump(config, sort_keys=False))
        print(f"ok    {path} -> {target}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
