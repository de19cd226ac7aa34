#!/usr/bin/env python3
"""Plot bus bandwidth against message size from ``nccl/collectives`` summaries (one line per op and file).

Usage: ``python3 -m bench.nccl_plot OUT.png SUMMARY.json [SUMMARY.json ...]``. Needs matplotlib
(``pip install matplotlib``); kept apart from the test case so the test case itself needs nothing but torch.
``plot_comparison`` draws the nccl-tests vs test case document of ``nccl_tests_compare.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Read the summaries, draw busbw (GB/s) on a log2 size axis, save the PNG."""
    if len(argv) < 2:  # the usage needs no matplotlib
        print(__doc__, file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

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


def plot_comparison(document: dict, target: Path) -> None:
    """algbw and busbw against size for nccl-tests and the test case, one colour per collective.

    Why the algbw axis is clipped: on one rank NCCL skips in-place reductions, so those columns time an
    empty call and read millions of GB/s; the clip keeps the copies that were really made readable.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (alg, bus) = plt.subplots(1, 2, figsize=(13, 5.5))
    top = 0.0
    for index, (op, tests) in enumerate(document["nccl_tests"].items()):
        colour, case = f"C{index}", document["collectives"][op]["rows"]
        oop = [(r["size_bytes"], r["out_of_place"]) for r in tests["rows"] if r["size_bytes"]]
        inp = [(r["size_bytes"], r["in_place"]) for r in tests["rows"] if r["size_bytes"] and r["in_place"]]
        ours = [(r["size_bytes"], r["out_of_place"]) for r in case]
        top = max(top, *(side["algbw_gbps"] for _size, side in oop))
        for ax, key in ((alg, "algbw_gbps"), (bus, "busbw_gbps")):
            ax.plot(*_xy(oop, key), color=colour, marker=".", label=f"{op} nccl-tests out-of-place")
            ax.plot(*_xy(inp, key), color=colour, linestyle=":", label=f"{op} nccl-tests in-place")
            ax.plot(*_xy(ours, key), color=colour, linestyle="--", marker="x", label=f"{op} nccl/collectives")
    alg.set_yscale("log")
    alg.set_ylim(1e-3, top * 3)
    for ax, what in ((alg, "algorithm bandwidth (GB/s, log; clipped)"), (bus, "bus bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    bus.legend(fontsize=7, ncol=2)
    if document["gpus"] == 1:
        bus.set_title("one rank: every busbw factor ((n-1)/n, 2(n-1)/n) is 0", fontsize=9)
    fig.suptitle(
        f"nccl-tests {next(iter(document['nccl_tests'].values()))['version']} vs nccl/collectives, "
        f"{document['gpus']}x {document['gpu_model']}, NCCL {document['nccl_version']}"
    )
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def _xy(points: list[tuple[int, dict]], key: str) -> tuple[list[int], list[float]]:
    return [size for size, _side in points], [side[key] for _size, side in points]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
