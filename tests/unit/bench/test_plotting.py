"""bench/support/plotting.py: the benchmarks draw with matplotlib's Agg backend when it is installed, and
without it still finish, their JSON saying why no PNG was drawn.

Python's own way to make a module unimportable (``None`` in ``sys.modules``) stands for a host without
matplotlib, so that path is tested wherever matplotlib is installed too; the drawing path needs matplotlib
and is skipped without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import container_build, data_checkpoint, data_prepare, fp8_parity
from bench.support.plotting import pyplot_or_reason

HALTED = "import of matplotlib halted; None in sys.modules"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib (and its pyplot) cannot be imported, as on a host that lacks it."""
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("no_matplotlib")
def test_without_matplotlib_the_reason_is_the_import_error() -> None:
    assert pyplot_or_reason() == (None, HALTED)


@pytest.mark.usefixtures("no_matplotlib")
@pytest.mark.parametrize(
    "draw",
    [
        lambda target: data_checkpoint.plot({}, {}, target),
        lambda target: data_prepare.plot({"rows": {}}, target),
        lambda target: fp8_parity.plot({}, {}, target),
    ],
    ids=["data_checkpoint", "data_prepare", "fp8_parity"],
)
def test_without_matplotlib_a_benchmark_says_why_its_png_is_missing(draw, tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    assert draw(target) == f"not drawn: {HALTED}"
    assert not target.exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_without_matplotlib_the_container_build_plot_is_skipped(tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    assert container_build.plot({}, target) is None
    assert not target.exists()


def test_with_matplotlib_pyplot_draws_headless_with_agg(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("pdf")  # another non-interactive backend: the helper must switch to Agg itself
    plt, reason = pyplot_or_reason()
    assert reason is None and plt is not None
    assert plt.get_backend().lower() == "agg"
    document = {
        "rows": {"floor": {"tokens_per_s": 2.0e6}, "prepare_w1": {"tokens_per_s_per_core": 1.5e6}},
        "corpus_tokens": 1_000_000,
        "vocab_size": 500,
    }
    assert data_prepare.plot(document, tmp_path / "prepare.png") == "prepare.png"
    assert (tmp_path / "prepare.png").read_bytes().startswith(b"\x89PNG")
