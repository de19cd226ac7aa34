"""Every test case's lock (requirements.lock) holds its manifest's pins, each with hashes, and the wheelhouse
downloads from the locks: a manifest without one is refused before anything is downloaded.

The locks are read with the same parser the lock script and the wheelhouse use (scripts/testcase_lock.py);
the problems are made with real files in a temporary catalog.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = sorted((ROOT / "testcases").glob("*/*/testcase.yml"))
HASH = "0" * 64


def script(name: str) -> ModuleType:
    """A module of scripts/ loaded from its file (the scripts are not a package; wheelhouse imports its
    sibling testcase_lock, so it is registered under its name)."""
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


testcase_lock = script("testcase_lock")


def write_case(
    tmp_path: Path, requirements: list[str], lock: str | None, wheelhouse: str = "default"
) -> Path:
    """A manifest (only the keys the lock tools read) and, unless ``lock`` is None, its lock."""
    case = tmp_path / "testcases" / "demo" / "case"
    case.mkdir(parents=True)
    manifest = case / "testcase.yml"
    manifest.write_text(yaml.safe_dump({"requirements": requirements, "wheelhouse": wheelhouse}))
    if lock is not None:
        (case / "requirements.lock").write_text(lock)
    return manifest


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: str(p.parent.relative_to(ROOT / "testcases")))
def test_every_manifest_has_a_lock_that_holds_its_pins(manifest: Path) -> None:
    assert testcase_lock.lock_problems(manifest) == []


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: str(p.parent.relative_to(ROOT / "testcases")))
def test_locks_hold_the_lab_torch_cpu_build_and_no_cuda_wheels(manifest: Path) -> None:
    entries = testcase_lock.read_lock(testcase_lock.lock_path(manifest))
    torch = entries.get("torch")
    assert torch is None or torch[0].endswith("+cpu")
    assert not [name for name in entries if name.startswith("nvidia-")]


def test_the_default_wheelhouse_locks_hold_what_make_test_downloaded_before() -> None:
    """make test's wheelhouse stage is timed: its locks add no package to torch's CPU closure and numpy."""
    wheelhouse = script("wheelhouse")
    names = {
        name for lock in wheelhouse.locks(MANIFESTS, "default") for name in testcase_lock.read_lock(lock)
    }
    before = {
        "filelock", "fsspec", "jinja2", "markupsafe", "mpmath", "networkx", "numpy", "setuptools", "sympy",
        "torch", "typing-extensions",
    }  # fmt: skip
    assert names == before, (
        f"make test's wheelhouse would also download {sorted(names - before)}: give the case "
        "`wheelhouse: slow`, or grow this list knowing that the stage is timed"
    )


def test_a_pin_the_lock_lacks_is_named(tmp_path: Path) -> None:
    lock = f"torch==2.13.0+cpu \\\n    --hash=sha256:{HASH}\n"
    manifest = write_case(tmp_path, ["numpy==2.4.6", "torch==2.13.0"], lock)
    problems = testcase_lock.lock_problems(manifest)
    assert problems == [
        f"{manifest.parent / 'requirements.lock'}: numpy==2.4.6 (the manifest's pin) is missing; "
        "run `make testcase-locks`"
    ]


def test_a_lock_of_another_version_is_named(tmp_path: Path) -> None:
    lock = f"torch==2.12.0+cpu \\\n    --hash=sha256:{HASH}\n"
    manifest = write_case(tmp_path, ["torch==2.13.0"], lock)
    assert testcase_lock.lock_problems(manifest) == [
        f"{manifest.parent / 'requirements.lock'}: torch==2.12.0+cpu but the manifest pins torch==2.13.0; "
        "run `make testcase-locks`"
    ]


def test_a_lock_line_without_a_hash_is_named(tmp_path: Path) -> None:
    lock = f"# header\ntorch==2.13.0+cpu \\\n    --hash=sha256:{HASH}\nfilelock==4.3.1\n"
    manifest = write_case(tmp_path, ["torch==2.13.0"], lock)
    assert testcase_lock.lock_problems(manifest) == [
        f"{manifest.parent / 'requirements.lock'}: filelock has no --hash"
    ]


def test_a_manifest_without_a_lock_is_named_with_the_command(tmp_path: Path) -> None:
    manifest = write_case(tmp_path, ["torch==2.13.0"], None)
    assert testcase_lock.lock_problems(manifest) == [
        f"{manifest.parent / 'requirements.lock'} is missing: make it with `make testcase-locks`"
    ]


def test_the_wheelhouse_refuses_a_manifest_without_a_lock_before_downloading(tmp_path: Path) -> None:
    wheelhouse = script("wheelhouse")
    manifest = write_case(tmp_path, ["torch==2.13.0"], None)
    with pytest.raises(SystemExit) as exc:
        wheelhouse.locks([manifest], "default")
    assert str(exc.value) == (
        f"wheelhouse: no lock {manifest.parent / 'requirements.lock'}: make it with `make testcase-locks`; "
        "nothing downloaded."
    )
    # A manifest of the other set is not this wheelhouse's business.
    assert wheelhouse.locks([manifest], "slow") == []


def test_the_lock_script_check_mode_fails_on_a_stale_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    manifest = write_case(tmp_path, ["torch==2.13.0"], f"torch==2.12.0+cpu --hash=sha256:{HASH}\n")
    before = (manifest.parent / "requirements.lock").read_text()
    assert testcase_lock.main(["--check", str(manifest)]) == 1
    assert "torch==2.12.0+cpu but the manifest pins torch==2.13.0" in capsys.readouterr().out
    assert (manifest.parent / "requirements.lock").read_text() == before


def test_the_resolver_asks_for_torch_cpu_build_for_the_lab() -> None:
    assert testcase_lock.resolver_inputs(["numpy==2.4.6", "torch==2.13.0", "torch==2.13.0+cpu"]) == [
        "numpy==2.4.6",
        "torch==2.13.0+cpu",
        "torch==2.13.0+cpu",
    ]
    platforms = testcase_lock.lab_platforms()
    assert platforms[0] == "manylinux_2_36_x86_64" and platforms[-1] == "manylinux1_x86_64"
    assert platforms.index("manylinux2014_x86_64") == platforms.index("manylinux_2_17_x86_64") + 1


def test_a_rendered_lock_reads_back_as_written(tmp_path: Path) -> None:
    pins = [
        testcase_lock.Pin("filelock", "4.3.1", (HASH,)),
        testcase_lock.Pin("torch", "2.13.0+cpu", ("a" * 64, "b" * 64)),
    ]
    manifest = write_case(tmp_path, ["torch==2.13.0"], None)
    text = testcase_lock.render(manifest, ["torch==2.13.0"], pins, None)
    (manifest.parent / "requirements.lock").write_text(text)
    assert testcase_lock.read_lock(manifest.parent / "requirements.lock") == {
        "filelock": ("4.3.1", [HASH]),
        "torch": ("2.13.0+cpu", ["a" * 64, "b" * 64]),
    }
    assert testcase_lock.lock_problems(manifest) == []


def test_a_manifest_pin_that_is_not_exact_is_refused(tmp_path: Path) -> None:
    manifest = write_case(tmp_path, ["torch>=2.13"], None)
    with pytest.raises(SystemExit, match=r"'torch>=2.13' must pin one version with '=='"):
        testcase_lock.manifest_requirements(manifest)


def test_one_file_with_two_digests_is_refused() -> None:
    chosen = ("numpy", "2.4.6", "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "a" * 64)
    published = {chosen[2]: "b" * 64, "numpy-2.4.6-cp312-cp312-win_amd64.whl": "c" * 64}
    with pytest.raises(SystemExit, match="cannot have two digests"):
        testcase_lock.pin_for(chosen, published)
    published[chosen[2]] = "a" * 64
    assert testcase_lock.pin_for(chosen, published).hashes == ("a" * 64, "c" * 64)
