"""The scale benchmark's result as a PNG and as the Markdown table docs/inventory-scale.md shows.

Usage: ``python -m bench.inventory.report bench/results/inventory_50k.json [--doc docs/inventory-scale.md]``
(writes the .png beside the JSON, which needs matplotlib, prints the table, and with --doc puts it between
the page's inventory-table markers). The figures are the medians the JSON holds; a run that was
cut off is drawn as its cut-off time, hatched, and written as `>= N (cut off)`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.inventory.scale import paired

# (plugin, measure, label) in drawing order; the floor comes from the size's own record.
BARS = (
    ("ec2_cluster", "cold_list", "ours cold --list"),
    ("ec2_cluster", "cached_list", "ours cached --list"),
    ("ec2_cluster", "cached_list_hosts", "ours cached --list-hosts"),
    ("aws_ec2", "cold_list", "aws_ec2 cold --list"),
    ("aws_ec2", "cached_list", "aws_ec2 cached --list"),
    ("aws_ec2", "cached_list_hosts", "aws_ec2 cached --list-hosts"),
)


def series(document: dict[str, Any]) -> dict[int, list[tuple[str, float, float | None, bool]]]:
    """Per size: (label, seconds, peak RSS MiB or None, cut off) for the floor and every measure taken.

    A measure whose only run was cut off is given its cut-off time and marked, so that the picture does
    not leave out the slowest case; a measure that was not taken at that size is left out.
    """
    out: dict[int, list[tuple[str, float, float | None, bool]]] = {}
    for entry in document["sizes"]:
        bars = [("describe_instances floor", entry["floor_describe_instances"]["seconds"], None, False)]
        for plugin, measure, label in BARS:
            runs = entry["runs"].get(plugin) or []
            median = (entry["medians"].get(plugin) or {}).get(measure)
            if median is not None:
                rss = (entry["medians"].get(plugin) or {}).get(f"{measure}_rss_mib")
                bars.append((label, median, rss, False))
                continue
            cut = [r["timed_out_after"] for r in runs if measure in r and r[measure] is None]
            if cut:
                bars.append((label, float(cut[0]), None, True))
        out[entry["instances"]] = bars
    return out


def _cell(value: float | None, cut: float | None = None, digits: int = 2) -> str:
    if value is None:
        return f">= {cut:.0f} (cut off)" if cut else "not run"
    return f"{value:.{digits}f}"


def _cut(entry: dict[str, Any], plugin: str, measure: str) -> float | None:
    runs = entry["runs"].get(plugin) or []
    cut = [r["timed_out_after"] for r in runs if measure in r and r[measure] is None]
    return float(cut[0]) if cut else None


def table(document: dict[str, Any]) -> str:
    """One row per measure, one column per fleet size: wall seconds (CPU seconds) and peak RSS."""
    entries = sorted(document["sizes"], key=lambda e: e["instances"])
    lines = [
        "| Measure (median) | " + " | ".join(f"{e['instances']:,} instances" for e in entries) + " |",
        "| --- |" + " --- |" * len(entries),
    ]
    floor = [e["floor_describe_instances"] for e in entries]
    lines.append(
        "| describe_instances floor: wall s (client CPU s, moto CPU s) | "
        + " | ".join(f"{f['seconds']:.2f} ({f['client_cpu']:.2f}, {f['moto_cpu']:.2f})" for f in floor)
        + " |"
    )
    for plugin, measure, label in BARS:
        cells = []
        for entry in entries:
            medians = entry["medians"].get(plugin) or {}
            if measure not in medians and _cut(entry, plugin, measure) is None:
                cells.append("not run")
                continue
            value = medians.get(measure)
            cell = _cell(value, _cut(entry, plugin, measure))
            if value is not None:
                cpu, rss = medians.get(f"{measure}_cpu"), medians.get(f"{measure}_rss_mib")
                cell += f" ({_cell(cpu)} CPU, {_cell(rss, digits=0)} MiB)"
                if measure == "cold_list" and plugin == "ec2_cluster":
                    ratio = paired(entry["runs"][plugin], entry["floor_describe_instances"])
                    cell += f"; {ratio['wall']:.2f}x floor wall"
                    cell += f", {ratio['work']:.2f}x floor work" if ratio["work"] is not None else ""
                elif measure == "cold_list":
                    cell += f"; {value / entry['floor_describe_instances']['seconds']:.2f}x floor wall"
            cells.append(cell)
        lines.append(f"| {label}: wall s (CPU s, peak RSS) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


START = "<!-- inventory-table:start -->"
END = "<!-- inventory-table:end -->"


def render(page: str, document: dict[str, Any], source: str) -> str:
    """The page with the table of `document` between its markers (exactly one pair)."""
    if page.count(START) != 1 or page.count(END) != 1:
        raise ValueError(f"the page needs exactly one {START} and one {END}")
    before, rest = page.split(START)
    after = rest.split(END)[1]
    note = f"<!-- Generated by bench/inventory/report.py from {source}: edit the JSON or the script. -->"
    return f"{before}{START}\n{note}\n\n{table(document)}{END}{after}"


def colour_of(label: str) -> str:
    """Grey for the floor, blue for ours, orange for aws_ec2."""
    return "tab:blue" if label.startswith("ours") else "tab:orange" if label.startswith("aws") else "tab:gray"


def plot(document: dict[str, Any], target: Path) -> None:
    """Two rows: seconds (log scale) and peak RSS, one column per fleet size."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    data = series(document)
    fig, axes = plt.subplots(2, len(data), figsize=(6.5 * len(data), 8.5), squeeze=False)
    for column, (size, bars) in enumerate(sorted(data.items())):
        labels = [b[0] for b in bars]
        colour = [colour_of(label) for label in labels]
        seconds, memory = axes[0][column], axes[1][column]
        drawn = seconds.barh(labels, [b[1] for b in bars], color=colour)
        for patch, (label, value, rss, cut) in zip(drawn, bars, strict=True):
            del label, rss
            if cut:
                patch.set_hatch("//")
            text = f" >= {value:.0f} s (cut off)" if cut else f" {value:.2f} s"
            seconds.text(value, patch.get_y() + patch.get_height() / 2, text, va="center", fontsize=8)
        seconds.set_xscale("log")
        seconds.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        seconds.xaxis.set_minor_formatter(NullFormatter())
        seconds.invert_yaxis()
        seconds.set_title(f"{size:,} instances: wall seconds (median)")
        with_rss = [(b[0], b[2]) for b in bars if b[2] is not None]
        rss_bars = memory.barh(
            [row[0] for row in with_rss],
            [row[1] for row in with_rss],
            color=[colour[labels.index(row[0])] for row in with_rss],
        )
        for patch, row in zip(rss_bars, with_rss, strict=True):
            value = row[1]
            memory.text(
                value, patch.get_y() + patch.get_height() / 2, f" {value:.0f}", va="center", fontsize=8
            )
        memory.invert_yaxis()
        memory.set_title(f"{size:,} instances: peak RSS of the process (MiB)")
    load = document["load_average"][0]
    fig.suptitle(f"{document['benchmark']}\n{document['when']}, load average at the end {load:.1f}")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--doc"):
        print(__doc__)
        return 2
    source = Path(argv[0])
    document = json.loads(source.read_text())
    print(table(document), end="")
    if len(argv) == 3:
        page = Path(argv[2])
        page.write_text(render(page.read_text(encoding="utf-8"), document, argv[0]), encoding="utf-8")
    plot(document, source.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
