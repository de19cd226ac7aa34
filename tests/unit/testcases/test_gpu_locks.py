"""Every test case has a hash-pinned lock per GPU target of the current stack (requirements.<target>.lock),
or testcases/gpu_targets.yml says why it cannot, and each lock fits the stack: torch at the stack's version
(its CUDA build, the stack's wheel among the hashes), every CUDA wheel built for the stack's CUDA major, the
CUDA runtime of the stack's line, nvidia-nccl at the stack's NCCL, every line pinned and hashed.

Nothing here reaches the network: the locks and manifests in the tree are read with the lock script's own
parser (scripts/testcase_lock.py), and the checks are shown to fail on made-up closures.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.unit.testcases.test_locks import MANIFESTS, ROOT, script

testcase_lock = script("testcase_lock")
STACK = testcase_lock.current_stack()
LINE = testcase_lock.cuda_line(STACK)
TABLE = testcase_lock.gpu_table()
# The images' GPU targets (the stack's scope without its lab OS) and the CUDA containers' (gpu_targets.yml).
IMAGE_TARGETS = testcase_lock.gpu_targets(STACK)
CONTAINER_TARGETS = testcase_lock.container_targets(STACK, TABLE)
TARGETS = IMAGE_TARGETS + CONTAINER_TARGETS
PAIRS = [(manifest, target) for manifest in MANIFESTS for target in TARGETS]
HASH = "0" * 64


def pair_id(value: object) -> str:
    if isinstance(value, Path):
        return testcase_lock.case_id(value)
    return getattr(value, "name", str(value))


def pin_name(req: str) -> str:
    return str(canonicalize_name(Requirement(req).name))


def test_the_gpu_targets_are_the_stacks_image_platforms() -> None:
    scope = STACK["scope"]
    image_os = [os_id for os_id in scope["os"] if os_id not in scope.get("lab_os", [])]
    assert [t.name for t in IMAGE_TARGETS] == [f"gpu-{o}-{a}" for o in image_os for a in scope["arch"]]
    assert "debian-12" not in {t.os for t in IMAGE_TARGETS}
    assert IMAGE_TARGETS, "the current stack scopes no image OS"


def test_the_cuda_containers_have_a_gpu_target_on_debian_12() -> None:
    """The CUDA container images are Debian 12 (the lab's OS) with torch's CUDA build: their own GPU target,
    named as a launch names a GPU node's, with Debian 12's CPython 3.11 and glibc 2.36."""
    assert [(t.name, t.python, t.glibc_minor) for t in CONTAINER_TARGETS] == [
        ("gpu-debian-12-x86_64", "3.11", 36)
    ]


def test_a_container_target_outside_the_stacks_scope_is_refused() -> None:
    for entry in ({"os": "rhel-9", "arch": "x86_64"}, {"os": "debian-12", "arch": "riscv64"}):
        with pytest.raises(SystemExit, match="does not scope"):
            testcase_lock.container_targets(STACK, {**TABLE, "containers": [entry]})


@pytest.mark.parametrize("target", TARGETS, ids=pair_id)
def test_a_targets_python_is_the_one_the_images_pytorch_runs(target) -> None:
    """roles/pytorch makes the virtualenv with the OS's Python; the stack has a torch wheel for its tag."""
    vars_file = ROOT / "roles" / "pytorch" / "vars" / f"{target.os.replace('amzn-', 'amazon-')}.yml"
    text = vars_file.read_text()
    interpreter = yaml.safe_load(text)["__pytorch_os_python"]
    named = re.findall(r"[Pp]ython ?(3\.\d+)", text if interpreter.endswith("python3") else interpreter)
    assert target.python in named, f"{vars_file}: {interpreter}, {named}"
    urls = [w["url"] for w in LINE.torch_wheels if w["arch"] == target.arch]
    assert any(f"-{target.abi}-{target.abi}-" in url for url in urls), f"no {target.abi} torch in the stack"


def test_lock_names() -> None:
    assert testcase_lock.lock_name("lab") == "requirements.lock"
    assert testcase_lock.lock_name() == "requirements.lock"
    assert testcase_lock.lock_name("gpu-ubuntu-24.04-x86_64") == "requirements.gpu-ubuntu-24.04-x86_64.lock"
    for bad in ("", "../x", "gpu/x", "gpu-x.lock", "GPU"):
        with pytest.raises(ValueError):
            testcase_lock.lock_name(bad)
    manifest = MANIFESTS[0]
    assert testcase_lock.lock_path(manifest, TARGETS[0].name).parent == manifest.parent


@pytest.mark.parametrize(("manifest", "target"), PAIRS, ids=pair_id)
def test_every_case_has_a_gpu_lock_that_fits_the_stack(manifest: Path, target) -> None:
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, TABLE) == []


def test_no_lock_is_for_a_target_the_stack_does_not_have() -> None:
    names = {testcase_lock.lock_name(t.name) for t in TARGETS} | {"requirements.lock"}
    stray = [p for m in MANIFESTS for p in m.parent.glob("requirements*.lock") if p.name not in names]
    assert stray == []


def test_the_exceptions_table_names_real_cases_targets_and_pins() -> None:
    cases = {testcase_lock.case_id(m): m for m in MANIFESTS}
    targets = {t.name for t in TARGETS}
    for entry in TABLE["unresolvable"]:
        assert set(entry["cases"]) <= set(cases) and set(entry["targets"]) <= targets, entry
        assert entry["reason"].strip() and entry["evidence"].strip()
    for case, pins in TABLE["replaced_pins"].items():
        pinned = {pin_name(r) for r in testcase_lock.manifest_requirements(cases[case])}
        assert set(pins) <= pinned, (case, pins)
        assert all(entry["reason"].strip() and entry["version"] for entry in pins.values())
    for case, extras in TABLE["extras"].items():
        pinned = {pin_name(r) for r in testcase_lock.manifest_requirements(cases[case])}
        assert set(extras) <= pinned, (case, extras)


def test_jax_locks_hold_its_cuda_plugin_for_the_stacks_cuda_major() -> None:
    manifest = ROOT / "testcases" / "jax" / "llama" / "testcase.yml"
    for target in TARGETS:
        lock = testcase_lock.lock_path(manifest, target.name)
        if lock.is_file():
            names = testcase_lock.read_lock(lock)
            assert {f"jax-cuda{LINE.cuda_major}-plugin", f"jax-cuda{LINE.cuda_major}-pjrt"} <= set(names)


def test_a_source_built_pin_has_the_lab_locks_wheel_and_says_so() -> None:
    """DeepSpeed is source-only on PyPI: every lock pins the one pure-Python wheel the wheelhouse builds."""
    manifest = ROOT / "testcases" / "deepspeed" / "zero3" / "testcase.yml"
    lab = testcase_lock.read_lock(testcase_lock.lock_path(manifest))["deepspeed"]
    for target in TARGETS:
        lock = testcase_lock.lock_path(manifest, target.name)
        if lock.is_file():
            assert testcase_lock.read_lock(lock)["deepspeed"] == lab
            assert f"deepspeed=={lab[0]}: PyPI has its source only" in lock.read_text()


def closure(**changes: tuple[str, list[str]] | None) -> dict[str, tuple[str, list[str]]]:
    """A GPU closure that fits the stack, with ``changes`` (None removes a package)."""
    torch_hashes = [w["sha256"] for w in LINE.torch_wheels if w.get("sha256")]
    entries = {
        "torch": (LINE.torch, torch_hashes),
        "numpy": ("2.4.6", [HASH]),
        f"nvidia-nccl-cu{LINE.cuda_major}": (LINE.nccl, [HASH]),
        "nvidia-cuda-runtime": (f"{LINE.cuda_runtime}.96", [HASH]),
        f"nvidia-cudnn-cu{LINE.cuda_major}": ("9.20.0.48", [HASH]),
    }
    for name, entry in changes.items():
        name = name.replace("_", "-")
        if entry is None:
            entries.pop(name, None)
        else:
            entries[name] = entry
    return entries


EXPECTED = {"torch": LINE.torch, "numpy": "2.4.6"}


def problems(**changes) -> list[str]:
    return testcase_lock.gpu_entry_problems(closure(**changes), EXPECTED, TARGETS[0], LINE)


def test_a_closure_that_fits_the_stack_has_no_problem() -> None:
    assert problems() == []


def test_the_check_names_what_does_not_fit_the_stack() -> None:
    major, other = LINE.cuda_major, LINE.cuda_major - 1
    target = TARGETS[0]
    wheel = next(
        w["sha256"] for w in LINE.torch_wheels if w["arch"] == target.arch and target.abi in w["url"]
    )
    assert problems(torch=(f"{LINE.torch}+cpu", [HASH])) == [
        f"torch=={LINE.torch}+cpu but the manifest pins torch=={LINE.torch}",
        f"torch is {LINE.torch}+cpu, the stack's is {LINE.torch} (CUDA build)",
        f"torch's hashes lack the stack's {target.abi} {target.arch} wheel ({wheel})",
    ]
    assert problems(**{f"nvidia_nccl_cu{major}": ("2.27.5", [HASH])}) == [
        f"nvidia-nccl-cu{major}==2.27.5, the stack pins NCCL {LINE.nccl} (rule pytorch-nccl-pin)"
    ]
    assert problems(**{f"nvidia_cublas_cu{other}": ("12.9.1.4", [HASH])}) == [
        f"nvidia-cublas-cu{other} is built for CUDA {other}, the stack's CUDA major is {major}"
    ]
    assert problems(nvidia_cuda_runtime=("13.9.1", [HASH])) == [
        f"nvidia-cuda-runtime==13.9.1 is not the stack's CUDA runtime {LINE.cuda_runtime}"
    ]
    assert problems(**{f"nvidia_nccl_cu{major}": None}) == [
        f"nvidia-nccl-cu{major} is missing: is this torch's CUDA build?"
    ]
    assert problems(numpy=("2.4.5", [HASH]), filelock=("4.3.1", [])) == [
        "filelock has no --hash",
        "numpy==2.4.5 but the manifest pins numpy==2.4.6",
    ]
    assert problems(numpy=None) == ["numpy==2.4.6 (the manifest's pin) is missing"]


def test_a_broken_lock_file_in_a_case_fails_the_check(tmp_path: Path) -> None:
    """The same check on files: a lock edited to another NCCL, and a lock where the table says none is."""
    case = tmp_path / "testcases" / "demo" / "case"
    case.mkdir(parents=True)
    manifest = case / "testcase.yml"
    manifest.write_text(yaml.safe_dump({"requirements": ["torch==2.13.0"]}))
    target = TARGETS[0]
    real = testcase_lock.lock_path(ROOT / "testcases" / "pytorch" / "ddp" / "testcase.yml", target.name)
    lock = testcase_lock.lock_path(manifest, target.name)
    lock.write_text(real.read_text())
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, TABLE) == []
    lock.write_text(
        real.read_text().replace(f"-cu{LINE.cuda_major}=={LINE.nccl}", f"-cu{LINE.cuda_major}==2.27.5")
    )
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, TABLE) == [
        f"{lock}: nvidia-nccl-cu{LINE.cuda_major}==2.27.5, the stack pins NCCL {LINE.nccl} "
        "(rule pytorch-nccl-pin)"
    ]
    table = {
        **TABLE,
        "unresolvable": [{"cases": ["demo/case"], "targets": [target.name], "reason": "no wheel"}],
    }
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, table) == [
        f"{lock} exists, but testcases/gpu_targets.yml says it cannot be made"
    ]
    lock.unlink()
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, table) == []
    assert testcase_lock.gpu_lock_problems(manifest, target, LINE, TABLE) == [
        f"{lock} is missing: make it with `make testcase-locks TARGETS={target.name}`"
    ]


def test_gpu_inputs_add_the_tables_extras_and_replacements() -> None:
    table = {
        "extras": {"demo/case": {"jax": ["cuda13"]}},
        "replaced_pins": {"demo/case": {"triton": {"version": "3.7.1", "reason": "torch's"}}},
        "unresolvable": [],
    }
    reqs = ["jax==0.10.2", "torch==2.13.0", "triton==3.9.0"]
    assert testcase_lock.gpu_inputs(reqs, "demo/case", table) == [
        "jax[cuda13]==0.10.2",
        "torch==2.13.0",
        "triton==3.7.1",
    ]
    assert testcase_lock.expected_versions(reqs, "demo/case", table) == {
        "jax": "0.10.2", "torch": "2.13.0", "triton": "3.7.1"
    }  # fmt: skip
    assert testcase_lock.gpu_inputs(reqs, "other/case", table) == reqs


def test_targets_are_chosen_by_name() -> None:
    names = [t.name for t in TARGETS]
    assert testcase_lock.select_targets("all", TARGETS) == (True, TARGETS)
    assert testcase_lock.select_targets("gpu", TARGETS) == (False, TARGETS)
    assert testcase_lock.select_targets("lab", TARGETS) == (True, [])
    assert testcase_lock.select_targets(f"lab,{names[0]}", TARGETS) == (True, TARGETS[:1])
    with pytest.raises(SystemExit, match="unknown targets"):
        testcase_lock.select_targets("gpu-windows", TARGETS)


def test_check_mode_reads_every_target_without_the_network() -> None:
    argv = ["--check", "--targets", "all", *map(str, MANIFESTS)]
    assert testcase_lock.main(argv) == 0


def demo_case(tmp_path: Path) -> Path:
    case = tmp_path / "testcases" / "demo" / "case"
    case.mkdir(parents=True)
    manifest = case / "testcase.yml"
    manifest.write_text(yaml.safe_dump({"requirements": ["numpy==2.4.6", "torch==2.13.0"]}))
    return manifest


def make(manifest: Path, table: dict, monkeypatch: pytest.MonkeyPatch, outcome) -> str:
    """make_gpu_lock with the resolver replaced by ``outcome`` (a closure, or the stderr of a failure)."""

    def fake_resolve(inputs, target, index, preferences):
        if isinstance(outcome, str):
            raise testcase_lock.subprocess.CalledProcessError(1, ["uv"], stderr=outcome)
        pins = [testcase_lock.Pin(n, v, tuple(h)) for n, (v, h) in sorted(outcome.items())]
        return pins, [], "0.0.0"

    monkeypatch.setattr(testcase_lock, "resolve_gpu", fake_resolve)
    return testcase_lock.make_gpu_lock(manifest, TARGETS[0], LINE, table, "https://pypi.org/simple", "ts-x")


def test_a_lock_is_written_only_when_it_fits_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = demo_case(tmp_path)
    lock = testcase_lock.lock_path(manifest, TARGETS[0].name)
    with pytest.raises(SystemExit, match="does not fit the stack:\n  nvidia-nccl-cu"):
        make(
            manifest, TABLE, monkeypatch, closure(**{f"nvidia_nccl_cu{LINE.cuda_major}": ("2.27.5", [HASH])})
        )
    assert not lock.exists()
    assert make(manifest, TABLE, monkeypatch, closure()).startswith(f"{lock}: 5 packages, ")
    assert lock.read_text().startswith("# Hash-pinned closure of ")
    assert testcase_lock.gpu_lock_problems(manifest, TARGETS[0], LINE, TABLE) == []


def test_an_unresolvable_pair_must_fail_for_the_tables_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = demo_case(tmp_path)
    entry = {
        "cases": ["demo/case"],
        "targets": [TARGETS[0].name],
        "reason": "no cp310 numpy",
        "evidence": "numpy",
    }
    table = {**TABLE, "unresolvable": [entry]}
    with pytest.raises(SystemExit, match="has no solution on"):
        make(manifest, TABLE, monkeypatch, "Because numpy==2.4.6 has no usable wheels")
    assert make(manifest, table, monkeypatch, "Because numpy==2.4.6 has no usable wheels").endswith(
        ": none (no cp310 numpy)"
    )
    with pytest.raises(SystemExit, match="not for the reason"):
        make(manifest, table, monkeypatch, "Because torch==2.13.0 has no usable wheels")
    with pytest.raises(SystemExit, match="remove the pair from its unresolvable list"):
        make(manifest, table, monkeypatch, closure())
