#!/usr/bin/env python3
"""Plot bus bandwidth against message size from ``nccl/collectives`` summaries (one line per op and file).

Usage: ``nccl_plot.py OUT.png SUMMARY.json [SUMMARY.json ...]``. Needs matplotlib (``pip install
matplotlib``); kept apart from the test case so the test case itself needs nothing but torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Read the summaries, draw busbw (GB/s) on a log2 size axis, save the PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    target, sources = Path(argv[0]), [Path(p) for p in argv[1:]]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for source in sources:
        summary = json.loads(source.read_text(encoding="utf-8"))
        label = f"{summary['world_size']}x {summary.get('gpu_model') or summary['device']}"
        for op in dict.fromkeys(row["op"] for row in summary["results"]):
            rows = [row for row in summary["results"] if row["op"] == op]
            ax.plot(
                [row["size_bytes"] for row in rows],
                [row["busbw_gbps"] for row in rows],
                marker=".",
                label=f"{op} ({label})",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("torch.distributed collectives, busbw (NCCL_NVLS_ENABLE=0)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
