"""Every test case's GPU lock installs on its target: a dry run of `uv pip install --require-hashes
--only-binary :all:` for the target's platform and Python (nothing installed, PyPI's metadata), so each lock's
closure is whole (the installer asks for no package the lock lacks) and each pinned version has a wheel for
the target.

Needs PyPI. uv evaluates dependency markers for the target (pip's would be the running interpreter's), and its
dry run reads the wheels' metadata only: pip 23's dry run downloads every wheel it checks, gigabytes of CUDA
wheels per lock. DeepSpeed's wheel is the one the wheelhouse builds from its source distribution.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.testcases.test_locks import MANIFESTS, ROOT, script

pytestmark = pytest.mark.slow

testcase_lock = script("testcase_lock")
sdist_wheels = script("sdist_wheels")
TARGETS = testcase_lock.gpu_targets(testcase_lock.current_stack())
LOCKS = [
    (manifest, target)
    for manifest in MANIFESTS
    for target in TARGETS
    if testcase_lock.lock_path(manifest, target.name).is_file()
]


@pytest.fixture(scope="module")
def source_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheels built from source that the locks pin (the slow wheelhouse's copy, else built here)."""
    dest = tmp_path_factory.mktemp("built")
    testcase_lock.source_wheels(sdist_wheels.source_pins(MANIFESTS), dest)
    return dest


def test_every_gpu_target_has_locks() -> None:
    assert {target.name for _manifest, target in LOCKS} == {target.name for target in TARGETS}


@pytest.mark.parametrize(
    ("manifest", "target"),
    LOCKS,
    ids=[f"{testcase_lock.case_id(m)}-{t.name}" for m, t in LOCKS],
)
def test_the_gpu_lock_installs_on_its_target(
    manifest: Path, target, source_wheels: Path, tmp_path: Path
) -> None:
    lock = testcase_lock.lock_path(manifest, target.name)
    argv = [testcase_lock.uv_binary(), "pip", "install", "--dry-run", "--no-config", "--require-hashes"]
    argv += [
        "--only-binary",
        ":all:",
        "--python-platform",
        target.platform,
        "--python-version",
        target.python,
    ]
    argv += ["--index-url", testcase_lock.PUBLISHED_INDEX, "--find-links", str(source_wheels)]
    argv += ["--target", str(tmp_path / "target"), "-r", str(lock)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    would = {
        testcase_lock.canonicalize_name(line.split()[1].split("==")[0])
        for line in proc.stderr.splitlines()
        if line.startswith(" + ")
    }
    assert would == set(testcase_lock.read_lock(lock)), (
        "the dry run would install another set than the lock's"
    )
