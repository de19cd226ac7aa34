"""matplotlib for a benchmark's PNG, when it is there.

Why optional: a benchmark's result is its JSON; the PNG beside it is a view of the same numbers. A host
without matplotlib (the test host, a cluster node) still measures, and the JSON says why no PNG was drawn.
The Agg backend draws to files without a display, as every benchmark here runs headless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot_or_reason() -> tuple[Any | None, str | None]:
    """``(pyplot, None)`` with the Agg backend selected, or ``(None, why)`` when matplotlib cannot be
    imported (``why`` is the import error's message, for the JSON's ``not drawn: ...``)."""
    try:
        import matplotlib
    except ImportError as err:
        return None, str(err)
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot, None


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
    plt, reason = pyplot_or_reason()
    if plt is None:
        return f"not drawn: {reason}"
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
