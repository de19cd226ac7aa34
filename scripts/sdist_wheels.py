"""Build wheels for the test cases' pins that PyPI publishes only as source distributions.

DeepSpeed (``deepspeed/zero3``) is on PyPI as an sdist only: pip would build it on every node at install
time, with network for its build requirements, and lab nodes install with ``--no-index``. Its wheel is built
here once, into the wheelhouse, in the environment its build needs (``DS_BUILD_OPS=0``: no C++/CUDA op is
compiled, DeepSpeed JIT-builds the ones a run uses). The build is reproducible, so the wheel's sha256 is a
fact a lock can pin: ``SOURCE_DATE_EPOCH`` fixes the archive's timestamps and ``PYTHONHASHSEED`` the order
DeepSpeed's ``setup.py`` lists its extras in (it builds them from a set).

    .venv/bin/python scripts/sdist_wheels.py --dest .cache/wheelhouse-slow testcases/*/*/testcase.yml
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

# Canonical name -> the environment its wheel is built in.
SOURCE_BUILDS: dict[str, dict[str, str]] = {"deepspeed": {"DS_BUILD_OPS": "0"}}
# 1980-01-01: the earliest timestamp a zip archive holds.
REPRODUCIBLE = {"SOURCE_DATE_EPOCH": "315532800", "PYTHONHASHSEED": "0"}


def source_pins(manifests: list[Path]) -> list[str]:
    """The manifests' pins that :data:`SOURCE_BUILDS` names, once each."""
    pins = set()
    for manifest in manifests:
        for req in yaml.safe_load(manifest.read_text()).get("requirements") or []:
            if canonicalize_name(Requirement(req).name) in SOURCE_BUILDS:
                pins.add(req)
    return sorted(pins)


def name_and_version(requirement: str) -> tuple[str, Version]:
    """``name==version``, or the path of an sdist (``name-version.tar.gz``)."""
    if requirement.endswith((".tar.gz", ".zip")):
        name, version = parse_sdist_filename(Path(requirement).name)
        return str(name), version
    parsed = Requirement(requirement)
    specs = list(parsed.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        raise ValueError(f"sdist_wheels: {requirement!r} must pin one version with '=='")
    return str(canonicalize_name(parsed.name)), Version(specs[0].version)


def existing_wheel(dest: Path, name: str, version: Version) -> Path | None:
    """A wheel of ``name`` at ``version`` already in ``dest`` (the build is then skipped: idempotent)."""
    for wheel in sorted(dest.glob("*.whl")):
        wheel_name, wheel_version, _build, _tags = parse_wheel_filename(wheel.name)
        if wheel_name == name and wheel_version == version:
            return wheel
    return None


def build(requirement: str, dest: Path, env: Mapping[str, str], isolation: bool = True) -> Path:
    """Download ``requirement``'s sdist and build its wheel into ``dest``, unless one is there already.

    ``isolation=False`` builds with this interpreter's setuptools (pip's default fetches the build
    requirements into an isolated environment, which needs the index).
    """
    name, version = name_and_version(requirement)
    found = existing_wheel(dest, name, version)
    if found is not None:
        return found
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="sdist-wheel-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [*pip, "download", "-q", "--no-deps", "--no-binary=:all:", "-d", str(work / "src"), requirement],
            check=True,
        )
        (sdist,) = (work / "src").iterdir()
        argv = [*pip, "wheel", "-q", "--no-deps", "-w", str(work / "out"), str(sdist)]
        if not isolation:
            argv.insert(4, "--no-build-isolation")
        subprocess.run(argv, check=True, env={**os.environ, **REPRODUCIBLE, **env})
        (wheel,) = (work / "out").glob("*.whl")
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.move(str(wheel), dest / wheel.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True, help="the wheelhouse the wheels go to")
    parser.add_argument("manifests", type=Path, nargs="+")
    args = parser.parse_args(argv)
    for requirement in source_pins(args.manifests):
        name, _version = name_and_version(requirement)
        print(f"sdist_wheels: {build(requirement, args.dest, SOURCE_BUILDS[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
