"""matplotlib for a benchmark's PNG, when it is there.

Why optional: a benchmark's result is its JSON; the PNG beside it is a view of the same numbers. A host
without matplotlib (the test host, a cluster node) still measures, and the JSON says why no PNG was drawn.
The Agg backend draws to files without a display, as every benchmark here runs headless.
"""

from __future__ import annotations

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
