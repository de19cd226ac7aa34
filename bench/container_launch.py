#!/usr/bin/env python3
"""pytorch/fsdp in the project's container image against the same run on the nodes' own virtualenv.

Why: users want to know what the container costs them: once, the import of the image on the cluster, and on
every step, whatever running under enroot/pyxis adds.
``tests/integration/launch/test_launch_container_lab.py`` launches both runs one after the other on the lab's
two compute nodes (same test case, seed, data and world size) and leaves their results directories; this
script reads them and writes, side by side, tokens/s, the spread of step times, every step's loss (the two
must agree) and the image's import time from the job log (``trainstack: container ready in N s``), as JSON
and a PNG.

Usage: ``python -m bench.container_launch --image-run DIR --nodes-run DIR --out bench/results/NAME`` (writes
NAME.json and NAME.png; matplotlib for the plot).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

METRIC_PREFIX = "TRAINSTACK_METRIC "
READY_RE = re.compile(r"^trainstack: container ready in (\d+) s", re.MULTILINE)
PINNED_RE = re.compile(r"^trainstack: container (\S+@sha256:[0-9a-f]{64}) from (\S+)", re.MULTILINE)


def read_run(directory: Path) -> dict[str, Any]:
    """One launch's summary, step records and what its job log says of the container."""
    summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
    log = (directory / "job.log").read_text(encoding="utf-8")
    lines = [line.split(METRIC_PREFIX, 1)[1] for line in log.splitlines() if METRIC_PREFIX in line]
    steps = [record for record in map(json.loads, lines) if "step" in record and "loss" in record]
    ready, pinned = READY_RE.search(log), PINNED_RE.search(log)
    times = [record["step_time_s"] for record in steps if record.get("step_time_s")]
    return {
        "run": str(directory),
        "world_size": summary["world_size"],
        "nodes": summary["nodes"],
        "steps": summary["steps"],
        "tokens_per_s": summary["tokens_per_s"],
        "step_time_s": {
            "median": statistics.median(times) if times else None,
            "min": min(times, default=None),
            "max": max(times, default=None),
            "all": times,
        },
        "losses": [record["loss"] for record in steps],
        "image": pinned.group(1) if pinned else None,
        "import_s": int(ready.group(1)) if ready else None,
    }


def compare(image: dict[str, Any], nodes: dict[str, Any]) -> dict[str, Any]:
    """The ratios of throughput and of median step time, and the largest relative loss difference of any
    step."""
    pairs = list(zip(image["losses"], nodes["losses"], strict=True))
    return {
        "tokens_per_s_image_over_nodes": image["tokens_per_s"] / nodes["tokens_per_s"],
        # The tiny case's steps take tens of milliseconds on a shared machine: the median resists the outliers
        # that move the mean-based tokens/s.
        "median_step_time_image_over_nodes": image["step_time_s"]["median"] / nodes["step_time_s"]["median"],
        "max_relative_loss_difference": max(abs(a - b) / abs(b) for a, b in pairs),
    }


def plot(document: dict[str, Any], target: Path) -> None:
    """Tokens/s of both runs, their step times, and both loss curves."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    runs = {"container image": document["image_run"], "nodes' virtualenv": document["nodes_run"]}
    fig, (rate, spread, loss) = plt.subplots(1, 3, figsize=(15, 4.8))
    rate.bar(list(runs), [run["tokens_per_s"] for run in runs.values()], color=["tab:blue", "tab:gray"])
    rate.set_ylabel("tokens/s (global, steady window)")
    rate.set_title(f"ratio {document['comparison']['tokens_per_s_image_over_nodes']:.3f}")
    spread.boxplot([run["step_time_s"]["all"] for run in runs.values()], tick_labels=list(runs))
    spread.set_ylabel("step time (s)")
    for label, run in runs.items():
        loss.plot(range(1, len(run["losses"]) + 1), run["losses"], marker=".", label=label)
    loss.set_xlabel("step")
    loss.set_ylabel("loss")
    worst = document["comparison"]["max_relative_loss_difference"]
    loss.set_title(f"largest relative difference {worst:.1e}")
    loss.legend()
    fig.suptitle(document["description"], fontsize=9)
    fig.tight_layout()
    fig.savefig(target, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-run", type=Path, required=True)
    parser.add_argument("--nodes-run", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="path without suffix: .json and .png")
    parser.add_argument("--host", default="", help="what the lab ran on, for the record")
    args = parser.parse_args(argv)
    image, nodes = read_run(args.image_run), read_run(args.nodes_run)
    document = {
        "description": "pytorch/fsdp (tiny) on the lab's two compute nodes: in the project's image "
        "(enroot/pyxis) and on the nodes' virtualenv, one after the other",
        "host": args.host,
        "image_run": image,
        "nodes_run": nodes,
        "comparison": compare(image, nodes),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    plot(document, args.out.with_suffix(".png"))
    print(json.dumps(document["comparison"] | {"import_s": image["import_s"]}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
