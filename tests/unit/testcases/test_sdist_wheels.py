"""scripts/sdist_wheels.py: a pin PyPI publishes only as source becomes a wheel in the wheelhouse, built in
the environment its build needs, byte for byte the same on a second build (so a lock can pin its hash), and
not built again when the wheelhouse holds it. The sdist is a real one, made by the test with setuptools; the
builds run pip itself, without build isolation (no index needed); two builds take about 40 s, hence slow.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tarfile
import textwrap
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = sorted((ROOT / "testcases").glob("*/*/testcase.yml"))


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sdist_wheels", ROOT / "scripts" / "sdist_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sdist_wheels = load_script()

# A project whose build reads a variable (as DeepSpeed's reads DS_BUILD_OPS) and whose metadata lists
# keywords from a set (as DeepSpeed's extras): the order changes with the hash seed unless it is fixed.
SETUP = textwrap.dedent(
    """
    import os
    from setuptools import setup
    os.makedirs("demo_pkg", exist_ok=True)
    with open("demo_pkg/__init__.py", "w") as fd:
        fd.write(f"BUILT_WITH = {os.environ.get('DEMO_BUILD_OPS')!r}\\n")
    words = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}
    setup(name="demo-sdist", version="1.0", packages=["demo_pkg"], keywords=list(words))
    """
)


@pytest.fixture
def sdist(tmp_path: Path) -> Path:
    """``demo_sdist-1.0.tar.gz``: a source distribution only (no wheel exists)."""
    src = tmp_path / "demo_sdist-1.0"
    src.mkdir()
    (src / "setup.py").write_text(SETUP)
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: demo-sdist\nVersion: 1.0\n")
    archive = tmp_path / "demo_sdist-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    return archive


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_source_only_pin_becomes_a_reproducible_wheel_built_once(sdist: Path, tmp_path: Path) -> None:
    first = sdist_wheels.build(str(sdist), tmp_path / "a", {"DEMO_BUILD_OPS": "0"}, isolation=False)
    assert first.name == "demo_sdist-1.0-py3-none-any.whl"
    with zipfile.ZipFile(first) as wheel:
        assert wheel.read("demo_pkg/__init__.py").decode() == "BUILT_WITH = '0'\n"
    assert [p.name for p in (tmp_path / "a").iterdir()] == [first.name]  # the wheel only, no sdist
    second = sdist_wheels.build(str(sdist), tmp_path / "b", {"DEMO_BUILD_OPS": "0"}, isolation=False)
    assert digest(first) == digest(second)  # timestamps and set order fixed: a lock can pin the hash
    stamp = first.stat().st_mtime_ns
    again = sdist_wheels.build(str(sdist), tmp_path / "a", {"DEMO_BUILD_OPS": "1"}, isolation=False)
    assert again == first and first.stat().st_mtime_ns == stamp  # already there: nothing built


def test_the_catalog_names_deepspeed_as_built_from_source() -> None:
    assert sdist_wheels.source_pins(MANIFESTS) == ["deepspeed==0.19.8"]
    assert sdist_wheels.SOURCE_BUILDS["deepspeed"] == {"DS_BUILD_OPS": "0"}
    assert sdist_wheels.name_and_version("deepspeed==0.19.8")[0] == "deepspeed"
    with pytest.raises(ValueError, match="must pin one version with '=='"):
        sdist_wheels.name_and_version("deepspeed>=0.19")


def test_the_wheelhouse_builds_only_its_sets_source_pins_and_keeps_a_built_wheel(tmp_path: Path) -> None:
    """scripts/wheelhouse.py's step before its download: the slow set holds DeepSpeed, the default none; a
    wheel already in the wheelhouse is what the build returns (nothing downloaded or built again)."""
    spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "scripts" / "wheelhouse.py")
    wheelhouse = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheelhouse)
    built = tmp_path / "deepspeed-0.19.8-py3-none-any.whl"
    built.write_bytes(b"built before")
    assert wheelhouse.source_wheels(MANIFESTS, "slow", tmp_path) == [built]
    assert wheelhouse.source_wheels(MANIFESTS, "default", tmp_path) == []
    assert built.read_bytes() == b"built before"
