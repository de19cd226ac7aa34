"""Stacked horizontal bars for benchmarks that split a time into phases, drawn only where matplotlib imports.

A benchmark's JSON is its result and must be written on a host without matplotlib (the project's virtualenv
does not carry it): ``stacked_bars`` then returns why nothing was drawn, for the JSON to say so, instead of
failing the run. ``PYTHONPATH`` may point at a separate install (``pip install --target DIR matplotlib``)."""

from __future__ import annotations

from pathlib import Path


def _starts(parts: dict[str, float]) -> dict[str, float]:
    """Where each phase begins: the sum of the phases before it."""
    starts, total = {}, 0.0
    for phase, seconds in parts.items():
        starts[phase] = total
        total += seconds
    return starts


def stacked_bars(
    bars: dict[str, dict[str, float]], target: Path, *, title: str, xlabel: str = "seconds"
) -> str:
    """One bar per entry of ``bars`` (label -> {phase: seconds}, in drawing order), phases stacked left to
    right with the same colour in every bar; returns the PNG's name, or "not drawn: <reason>"."""
    try:
        import matplotlib
    except ImportError as err:
        return f"not drawn: {err}"
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    phases = list(dict.fromkeys(phase for parts in bars.values() for phase in parts))
    colours = plt.get_cmap("tab20").colors
    fig, axis = plt.subplots(figsize=(11, 1.2 + 0.7 * len(bars) + 0.22 * len(phases)))
    labels = list(bars)
    starts = {label: _starts(bars[label]) for label in labels}
    for number, phase in enumerate(phases):
        widths = [bars[label].get(phase, 0.0) for label in labels]
        lefts = [starts[label].get(phase, 0.0) for label in labels]
        axis.barh(labels, widths, left=lefts, color=colours[number % len(colours)], label=phase, height=0.6)
    for row, label in enumerate(labels):
        total = sum(bars[label].values())
        axis.text(total, row, f" {total:.2f}", va="center", fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel(xlabel)
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    fig.tight_layout()
    fig.savefig(target, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return target.name
