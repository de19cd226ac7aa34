"""GPU tests: skipped where no CUDA device is present (the shared library comes from pytest's pythonpath)."""

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        item.add_marker(skip)
