"""GPU tests: skipped where no CUDA device is present; the test case's package is put on sys.path."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "testcases" / "pytorch" / "fsdp"))

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        item.add_marker(skip)
