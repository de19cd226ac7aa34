"""Resolve a test case's pinned requirements into a hash-pinned lock beside its manifest.

A manifest pins only what the test case imports (``torch==2.13.0``); pip would pick the rest of the closure
on the day a virtualenv is built, from whatever index it reaches. The lock (``requirements.lock``, pip's
``--require-hashes`` format) fixes every package of the closure and the sha256 of the files allowed for it,
so the wheelhouse downloads exactly those files and the launcher's virtualenv installs exactly them.

The closure is resolved by pip itself (``pip install --dry-run --report``: its JSON report names every
package and the hash of the file it chose) for the lab's nodes: CPython 3.11 on Linux x86_64 with glibc 2.36
(Debian 12, the local image), and the CPU build of torch (``+cpu``), the one the lab's wheelhouse holds. For
every package, the wheels PyPI publishes for the same version (other Pythons, other platforms) are hashed
too, from PyPI's simple index (PEP 691): that costs one request per package and vouches for nothing pip would
not check again. The closure stays the lab's: another platform may need packages the lock does not hold.

The GPU targets get their own locks beside it (``requirements.<target>.lock``, :func:`lock_name`): one per
OS and architecture the current stack builds images for (``scope.os`` without its ``lab_os``, times
``scope.arch``), resolved by ``uv pip compile`` for that platform (``--python-platform``, the Python the
image's PyTorch virtualenv runs; nothing installed) with PyPI's CUDA build of torch, and checked against the
stack (torch's version and wheel, the CUDA major of the ``nvidia-*`` wheels, the NCCL pin) before they are
written. testcases/gpu_targets.yml says where a GPU lock departs from the manifest and which pairs have none.

    .venv/bin/python scripts/testcase_lock.py testcases/pytorch/ddp/testcase.yml   # or: make testcase-locks
    .venv/bin/python scripts/testcase_lock.py --targets gpu testcases/*/*/testcase.yml   # GPU targets only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / ".cache" / "collections"))

# The naming rule of the locks is the launch's (module_utils/launch/locks.py): the launch picks, and an image
# build bakes, the file this script writes, by the same name.
from ansible_collections.trainstack.cluster.plugins.module_utils.launch.locks import (  # noqa: E402
    LAB_TARGET,
    MAKE_COMMAND,
    gpu_target,
    lock_name,
)
from sdist_wheels import SOURCE_BUILDS, build, existing_wheel, name_and_version  # noqa: E402

# The lab's nodes (the local image is Debian 12): the interpreter and C library wheels must fit.
LAB_PYTHON = "3.11"
LAB_ABI = "cp311"
LAB_GLIBC_MINOR = 36
LAB_MARKERS = {"python_version": LAB_PYTHON, "sys_platform": "linux", "platform_machine": "x86_64"}
# Packages whose CPU build is a local version of the published one: the lab has no GPU, and PyPI's Linux
# torch is the CUDA build with gigabytes of NVIDIA wheels.
CPU_BUILDS = frozenset({"torch"})
CPU_LABEL = "cpu"
PUBLISHED_INDEX = "https://pypi.org/simple"

GPU_TABLE = REPO / "testcases" / "gpu_targets.yml"
STACKS = REPO / "stacks"
# Per image OS: the Python its PyTorch virtualenv is made with (roles/pytorch/vars/<os>.yml; Amazon Linux
# 2023's python3.11 package, not its 3.9 system python3) and the glibc minor version it ships.
OS_PLATFORMS: dict[str, tuple[str, int]] = {
    "ubuntu-24.04": ("3.12", 39),
    "ubuntu-22.04": ("3.10", 35),
    "amzn-2023": ("3.11", 34),
    # The CUDA container images' OS (playbooks/build_container.yml): Debian 12's python3.
    "debian-12": ("3.11", 36),
}
# Package names that carry a CUDA major: nvidia-nccl-cu13, nvidia-cudnn-cu13, jax-cuda13-plugin, ...
_CUDA_NAME_RE = re.compile(r"(?:-cu|-cuda)(\d+)(?:-|$)")


@dataclass(frozen=True)
class Pin:
    """One package of the resolved closure: its canonical name, exact version and allowed file hashes."""

    name: str
    version: str
    hashes: tuple[str, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        """The package as pip's requirements-file lines, one ``--hash`` per continuation line."""
        head = f"{self.name}=={self.version}"
        if not self.hashes:
            return [head]
        return [f"{head} \\"] + [
            f"    --hash=sha256:{digest}" + (" \\" if i < len(self.hashes) - 1 else "")
            for i, digest in enumerate(self.hashes)
        ]


def lock_path(manifest: Path, target: str = LAB_TARGET) -> Path:
    """Where a manifest's lock for ``target`` lives: beside it, so the launcher stages it with the payload."""
    return manifest.parent / lock_name(target)


@dataclass(frozen=True)
class Target:
    """A GPU platform of the current stack's images: OS, architecture, its virtualenv's Python, glibc."""

    name: str
    os: str
    arch: str
    python: str
    glibc_minor: int

    @property
    def platform(self) -> str:
        """uv's ``--python-platform`` for the target (it accepts wheels of this glibc and older)."""
        return f"{self.arch}-manylinux_2_{self.glibc_minor}"

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")


@dataclass(frozen=True)
class CudaLine:
    """What the stack pins for PyTorch's CUDA build: torch's version, CUDA runtime (major.minor), NCCL."""

    torch: str
    cuda_runtime: str
    nccl: str
    torch_wheels: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def cuda_major(self) -> int:
        return int(self.cuda_runtime.split(".")[0])


def current_stack(stacks: Path = STACKS) -> dict[str, Any]:
    """The stack ``stacks/current`` names."""
    stack_id = (stacks / "current").read_text().strip()
    return yaml.safe_load((stacks / f"{stack_id}.yml").read_text())


def gpu_targets(stack: dict[str, Any]) -> list[Target]:
    """One target per OS (without the lab's) and architecture of the stack's scope, in the scope's order."""
    scope = stack["scope"]
    lab = set(scope.get("lab_os") or [])
    targets = []
    for os_id in scope["os"]:
        if os_id in lab:
            continue
        if os_id not in OS_PLATFORMS:
            sys.exit(
                f"testcase_lock: {stack['id']} scopes OS {os_id}; add its Python and glibc to OS_PLATFORMS"
            )
        python, glibc = OS_PLATFORMS[os_id]
        for arch in scope["arch"]:
            targets.append(Target(gpu_target(os_id, arch), os_id, arch, python, glibc))
    return targets


def container_targets(stack: dict[str, Any], table: dict[str, Any]) -> list[Target]:
    """The GPU targets of the CUDA container images (gpu_targets.yml ``containers``): an OS the stack scopes
    (the lab's OS included: the container carries torch's CUDA build there, the lab's nodes do not) on an
    architecture of its scope, named by the launch's rule (``gpu-<os>-<arch>``)."""
    scope = stack["scope"]
    targets = []
    for entry in table.get("containers") or []:
        os_id, arch = str(entry["os"]), str(entry["arch"])
        if os_id not in scope["os"] or arch not in scope["arch"] or os_id not in OS_PLATFORMS:
            sys.exit(
                f"testcase_lock: gpu_targets.yml containers names {os_id}/{arch}, which {stack['id']} "
                f"does not scope (os {scope['os']}, arch {scope['arch']}) or OS_PLATFORMS lacks"
            )
        python, glibc = OS_PLATFORMS[os_id]
        targets.append(Target(gpu_target(os_id, arch), os_id, arch, python, glibc))
    return targets


def cuda_line(stack: dict[str, Any]) -> CudaLine:
    """The stack's PyTorch CUDA line; refuses one whose NCCL pin is not the stack's NCCL (rules.yml's
    pytorch-nccl-pin) or whose NCCL build is for another CUDA major (nccl-cuda-major)."""
    pytorch, nccl = stack["components"]["pytorch"], stack["components"]["nccl"]
    line = CudaLine(
        str(pytorch["version"]),
        str(pytorch["cuda_runtime"]),
        str(pytorch["nccl_pin"]),
        tuple(pytorch.get("artifacts") or []),
    )
    if line.nccl != str(nccl["version"]) or int(nccl.get("cuda_major", line.cuda_major)) != line.cuda_major:
        sys.exit(
            f"testcase_lock: {stack['id']}'s pytorch (NCCL {line.nccl}, CUDA {line.cuda_runtime}) and nccl "
            f"(NCCL {nccl['version']}, CUDA major {nccl.get('cuda_major')}) disagree"
        )
    return line


def gpu_table(path: Path = GPU_TABLE) -> dict[str, Any]:
    """testcases/gpu_targets.yml: extras, replaced pins and unresolvable pairs of the GPU targets."""
    body = yaml.safe_load(path.read_text()) if path.is_file() else {}
    return {
        "extras": body.get("extras") or {},
        "replaced_pins": body.get("replaced_pins") or {},
        "unresolvable": body.get("unresolvable") or [],
        "containers": body.get("containers") or [],
    }


def case_id(manifest: Path) -> str:
    """``framework/name`` of a manifest at testcases/<framework>/<name>/testcase.yml."""
    return f"{manifest.parent.parent.name}/{manifest.parent.name}"


def unresolvable_entry(table: dict[str, Any], case: str, target: str) -> dict[str, Any] | None:
    """The table's entry that says ``case`` has no lock for ``target``, or None."""
    return next((e for e in table["unresolvable"] if case in e["cases"] and target in e["targets"]), None)


def unresolvable_reason(table: dict[str, Any], case: str, target: str) -> str | None:
    """Why the table says ``case`` has no lock for ``target``, or None."""
    entry = unresolvable_entry(table, case, target)
    return " ".join(str(entry["reason"]).split()) if entry else None


def gpu_inputs(reqs: list[str], case: str, table: dict[str, Any]) -> list[str]:
    """The manifest's pins as a GPU target resolves them: the table's extras added, its replacements made."""
    extras = table["extras"].get(case, {})
    replaced = table["replaced_pins"].get(case, {})
    out = []
    for req in reqs:
        parsed = Requirement(req)
        name = canonicalize_name(parsed.name)
        version = next(iter(parsed.specifier)).version
        if name in replaced:
            version = str(replaced[name]["version"])
        names = sorted({*parsed.extras, *extras.get(name, [])})
        out.append(f"{parsed.name}{'[' + ','.join(names) + ']' if names else ''}=={version}")
    return out


def expected_versions(reqs: list[str], case: str, table: dict[str, Any]) -> dict[str, str]:
    """Name -> version a GPU lock must hold for each of the manifest's pins."""
    return {
        str(canonicalize_name(Requirement(req).name)): next(iter(Requirement(req).specifier)).version
        for req in gpu_inputs(reqs, case, table)
    }


def lab_platforms() -> list[str]:
    """The manylinux tags a glibc-2.36 x86_64 node accepts, newest first.

    pip 23's ``--platform`` takes each tag literally (it does not widen ``manylinux_2_36`` to older glibc
    versions), so the list is spelled out, legacy aliases included.
    """
    return manylinux_tags("x86_64", LAB_GLIBC_MINOR)


def manylinux_tags(arch: str, glibc_minor: int) -> list[str]:
    """The manylinux platform tags a node of ``arch`` with glibc 2.``glibc_minor`` accepts, newest first,
    legacy aliases included (aarch64 has manylinux2014 only)."""
    oldest = 5 if arch == "x86_64" else 17
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, oldest - 1, -1)]
    aliases = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
    for alias, minor in aliases if arch == "x86_64" else aliases[:1]:
        tags.insert(tags.index(f"manylinux_2_{minor}_{arch}") + 1, f"{alias}_{arch}")
    return tags


def lab_target_args() -> list[str]:
    """pip options that pick wheels for the lab's nodes whatever machine runs pip (wheels only)."""
    args = ["--only-binary=:all:", "--python-version", LAB_PYTHON, "--implementation", "cp", "--abi", LAB_ABI]
    for tag in lab_platforms():
        args += ["--platform", tag]
    return args


def index_args() -> list[str]:
    """An extra index for torch's CPU build where pip's own configuration does not find one."""
    extra = os.environ.get("TRAINSTACK_TORCH_INDEX")
    return ["--extra-index-url", extra] if extra else []


def manifest_requirements(manifest: Path) -> list[str]:
    """The manifest's top-level pins; each must be ``name==version`` (the lock is resolved from them)."""
    body = yaml.safe_load(manifest.read_text())
    reqs = body.get("requirements") or []
    for req in reqs:
        spec = Requirement(req).specifier
        if len(spec) != 1 or next(iter(spec)).operator != "==":
            sys.exit(
                f"{manifest}: requirements entry '{req}' must pin one version with '==' (rule: exact pins)"
            )
    return reqs


def resolver_inputs(reqs: list[str]) -> list[str]:
    """The pins as pip resolves them: CPU_BUILDS get their ``+cpu`` local version, so nothing else fits."""
    out = []
    for req in reqs:
        parsed = Requirement(req)
        pinned = Version(next(iter(parsed.specifier)).version)
        if canonicalize_name(parsed.name) in CPU_BUILDS and pinned.local is None:
            extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
            req = f"{parsed.name}{extras}=={pinned}+{CPU_LABEL}"
        out.append(req)
    return out


def pip_report(reqs: list[str], workdir: Path, find_links: Path | None = None) -> dict[str, Any]:
    """pip's resolution of ``reqs`` for the lab's nodes: its JSON installation report (nothing installed).

    ``find_links`` holds wheels built here from source-only pins (DeepSpeed): the index has none to offer.
    """
    report = workdir / "report.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--retries", "10"]
    # --target: pip 23 allows --platform/--python-version only with it; the dry run writes nothing there.
    argv += ["--report", str(report), "--target", str(workdir / "target"), *lab_target_args(), *index_args()]
    if find_links is not None:
        argv += ["--find-links", str(find_links)]
    subprocess.run([*argv, *reqs], check=True)
    return json.loads(report.read_text())


def check_markers(report: dict[str, Any]) -> None:
    """Refuse a resolution whose environment markers were not the lab's.

    pip evaluates dependencies' markers (``; python_version < "3.12"``, ``; sys_platform == "linux"``) with
    the interpreter that runs it, whatever ``--python-version`` says, so only a Linux x86_64 CPython 3.11
    resolves the lab's closure.
    """
    env = report.get("environment", {})
    wrong = {key: env.get(key) for key, want in LAB_MARKERS.items() if env.get(key) != want}
    if wrong:
        sys.exit(
            f"testcase_lock: pip ran with markers {wrong}; the lab's are {LAB_MARKERS}. "
            "Run it with a Linux x86_64 CPython 3.11 (the repository's .venv)."
        )


def chosen_files(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(name, version, file name, sha256) of each package pip chose; refuses a file without a hash."""
    out = []
    for item in report["install"]:
        meta, info = item["metadata"], item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        filename = urllib.parse.unquote(info["url"].rsplit("/", 1)[-1])
        if not digest:
            sys.exit(f"testcase_lock: pip reported no sha256 for {filename} ({info['url']})")
        out.append((canonicalize_name(meta["name"]), meta["version"], filename, digest))
    return out


def published_wheels(name: str, version: str, index: str) -> dict[str, str]:
    """File name -> sha256 of every wheel ``index`` (PEP 691 JSON) lists for ``name`` at ``version``.

    Empty where the index does not know the version (a local ``+cpu`` build, a wheel built here).
    """
    request = urllib.request.Request(
        f"{index.rstrip('/')}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            files = json.load(response).get("files", [])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise
    wanted = Version(version)
    out = {}
    for entry in files:
        digest = entry.get("hashes", {}).get("sha256")
        try:
            wheel_version = parse_wheel_filename(entry["filename"])[1]
        except InvalidWheelFilename:
            continue  # sdists and old formats: the wheelhouse takes wheels only
        if digest and wheel_version == wanted:
            out[entry["filename"]] = digest
    return out


def pin_for(chosen: tuple[str, str, str, str], published: dict[str, str]) -> Pin:
    """The lock entry: the chosen file's hash and the published ones; a file listed twice must agree."""
    name, version, filename, digest = chosen
    if published.get(filename, digest) != digest:
        sys.exit(
            f"testcase_lock: {filename}: pip's source gave sha256 {digest}, the published index "
            f"{published[filename]}. The same file cannot have two digests: check the mirror pip used."
        )
    return Pin(name, version, tuple(sorted({digest, *published.values()})))


def resolve(reqs: list[str], index: str | None) -> list[Pin]:
    """The hash-pinned closure of ``reqs`` for the lab, sorted by name.

    Pins PyPI has only as source are built first (reproducibly, scripts/sdist_wheels.py), so the lock holds
    the digest of the very wheel the wheelhouse builds.
    """
    with tempfile.TemporaryDirectory(prefix="testcase-lock-") as tmp:
        built = Path(tmp) / "built"
        for req in reqs:
            name = canonicalize_name(Requirement(req).name)
            if name in SOURCE_BUILDS:
                build(req, built, SOURCE_BUILDS[name])
        report = pip_report(resolver_inputs(reqs), Path(tmp), built if built.is_dir() else None)
    check_markers(report)
    pins = []
    for chosen in chosen_files(report):
        published = published_wheels(chosen[0], chosen[1], index) if index else {}
        pins.append(pin_for(chosen, published))
    return sorted(pins, key=lambda pin: pin.name)


def render(manifest: Path, reqs: list[str], pins: list[Pin], index: str | None) -> str:
    """The lock file's text: a header saying what it is for and how it was made, then the pins."""
    try:
        shown = manifest.resolve().relative_to(REPO)
    except ValueError:
        shown = manifest
    header = [
        f"# Hash-pinned closure of {shown}'s requirements: {' '.join(reqs)}.",
        f"# Resolved by pip for the lab's nodes: CPython {LAB_PYTHON}, Linux x86_64 "
        f"(glibc 2.{LAB_GLIBC_MINOR}), the CPU build of {', '.join(sorted(CPU_BUILDS))}.",
        (
            f"# Besides the file pip chose, the wheels {index} lists for the same version are hashed."
            if index
            else "# Only the file pip chose is hashed (made without the published index)."
        ),
    ]
    header += [
        f"# {req}: PyPI has its source only; the hash is the wheel's scripts/sdist_wheels.py builds "
        "(pure Python, reproducible): a wheelhouse holds it, no node builds it."
        for req in reqs
        if canonicalize_name(Requirement(req).name) in SOURCE_BUILDS
    ]
    header.append(
        f"# Made by scripts/testcase_lock.py ({MAKE_COMMAND}): change the manifest's pins, then run that."
    )
    body = [line for pin in pins for line in pin.lines()]
    return "\n".join(header + body) + "\n"


def read_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Name -> (version, sha256 digests) of a ``--require-hashes`` file (continuation lines joined)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    logical = path.read_text().replace("\\\n", " ")
    for raw in logical.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        req = Requirement(words[0])
        spec = next(iter(req.specifier)) if len(req.specifier) == 1 else None
        version = spec.version if spec is not None and spec.operator == "==" else ""
        hashes = [w.split(":", 1)[1] for w in words[1:] if w.startswith("--hash=sha256:")]
        entries[canonicalize_name(req.name)] = (version, hashes)
    return entries


def merge_locks(locks: list[Path], workdir: Path) -> list[Path]:
    """The locks merged into as few requirement files as agree on every version.

    One ``pip download`` per file: pip fetches each package's index page once per run, so one run over the
    merged closure of a wheelhouse costs what one lock does. A package locked at two versions goes to another
    file; a version's hashes are the union of the locks' (each vouches for its files).
    """
    groups: list[dict[str, tuple[str, set[str]]]] = []
    for lock in locks:
        entries = read_lock(lock)
        versions = {name: ver for name, (ver, _hashes) in entries.items()}
        fits = (g for g in groups if all(g.get(name, (ver,))[0] == ver for name, ver in versions.items()))
        group = next(fits, None)
        if group is None:
            group = {}
            groups.append(group)
        for name, (version, hashes) in entries.items():
            group.setdefault(name, (version, set()))[1].update(hashes)
    paths = []
    for index, group in enumerate(groups):
        pins = [Pin(name, ver, tuple(sorted(hashes))) for name, (ver, hashes) in sorted(group.items())]
        path = workdir / f"merged-{index}.txt"
        path.write_text("\n".join(line for pin in pins for line in pin.lines()) + "\n")
        paths.append(path)
    return paths


def lock_problems(manifest: Path) -> list[str]:
    """Why a manifest's lock does not hold its pins (missing lock, missing pin, other version, no hash)."""
    lock = lock_path(manifest)
    if not lock.is_file():
        return [f"{lock} is missing: make it with `{MAKE_COMMAND}`"]
    entries = read_lock(lock)
    problems = [f"{lock}: {name} has no --hash" for name, entry in entries.items() if not entry[1]]
    problems += [f"{lock}: {name} is not pinned with ==" for name, entry in entries.items() if not entry[0]]
    for req in manifest_requirements(manifest):
        parsed = Requirement(req)
        name = canonicalize_name(parsed.name)
        if name not in entries:
            problems.append(f"{lock}: {req} (the manifest's pin) is missing; run `{MAKE_COMMAND}`")
        elif entries[name][0] and not parsed.specifier.contains(Version(entries[name][0]), prereleases=True):
            problems.append(
                f"{lock}: {name}=={entries[name][0]} but the manifest pins {req}; run `{MAKE_COMMAND}`"
            )
    return problems


def uv_binary() -> str:
    """uv beside this interpreter (the repository's .venv), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if not found:
        sys.exit(
            "testcase_lock: the GPU targets are resolved with uv (requirements.txt installs it in .venv)"
        )
    return found


def source_wheels(reqs: list[str], dest: Path) -> list[str]:
    """Wheels of the pins PyPI has only as source, into ``dest`` (a copy of the slow wheelhouse's, else built
    here: the build is reproducible, so it is the same file). Returns the pins concerned."""
    pins = []
    for req in reqs:
        name = canonicalize_name(Requirement(req).name)
        if name not in SOURCE_BUILDS:
            continue
        pins.append(req)
        _name, version = name_and_version(req)
        cached = existing_wheel(REPO / ".cache" / "wheelhouse-slow", name, version)
        if cached is not None:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(cached, dest / cached.name)
        else:
            build(req, dest, SOURCE_BUILDS[name])
    return pins


def resolve_gpu(
    inputs: list[str], target: Target, index: str, preferences: list[Path]
) -> tuple[list[Pin], list[str], str]:
    """The hash-pinned closure of ``inputs`` for ``target`` (uv pip compile, nothing installed), the pins
    built from source, and uv's version.

    The first of ``preferences`` that exists (the target's lock, else the lab's) seeds uv's output file: uv
    keeps the versions it holds where they still fit, so a new resolution moves only what must move.
    Raises CalledProcessError (uv's message on stderr) when the pins have no solution on the target.
    """
    uv = uv_binary()
    with tempfile.TemporaryDirectory(prefix="testcase-lock-gpu-") as tmp:
        work = Path(tmp)
        built = work / "built"
        sources = source_wheels(inputs, built)
        (work / "requirements.in").write_text("\n".join(inputs) + "\n")
        out = work / "requirements.txt"
        seed = next((p for p in preferences if p.is_file()), None)
        if seed is not None:
            shutil.copy(seed, out)
        argv = [uv, "pip", "compile", str(work / "requirements.in"), "-o", str(out), "--quiet"]
        argv += ["--python-platform", target.platform, "--python-version", target.python]
        argv += ["--only-binary", ":all:", "--generate-hashes", "--no-header", "--no-annotate"]
        argv += ["--index-url", index]
        if sources:
            argv += ["--find-links", str(built)]
        subprocess.run(argv, check=True, capture_output=True, text=True)
        entries = read_lock(out)
    version = subprocess.run([uv, "--version"], check=True, capture_output=True, text=True).stdout.split()[1]
    pins = [Pin(name, ver, tuple(sorted(set(hashes)))) for name, (ver, hashes) in sorted(entries.items())]
    return pins, sources, version


def render_gpu(
    manifest: Path,
    target: Target,
    line: CudaLine,
    inputs: list[str],
    pins: list[Pin],
    notes: dict[str, Any],
) -> str:
    """A GPU lock's text: what it is for, where it departs from the manifest, how it was made, the pins."""
    try:
        shown = manifest.resolve().relative_to(REPO)
    except ValueError:
        shown = manifest
    header = [
        f"# Hash-pinned closure of {shown}'s requirements for the GPU target {target.name}: "
        f"{' '.join(inputs)}.",
        f"# Target: the {target.os} image ({notes['stack']}), CPython {target.python} ({target.abi}), Linux "
        f"{target.arch} (glibc 2.{target.glibc_minor}), PyPI's CUDA build of torch {line.torch} (CUDA "
        f"{line.cuda_runtime}, nvidia-nccl-cu{line.cuda_major} {line.nccl}).",
    ]
    for name, entry in sorted(notes["replaced"].items()):
        header.append(
            f"# {name}=={entry['version']} instead of the manifest's pin: "
            + " ".join(str(entry["reason"]).split())
        )
    for name, extras in sorted(notes["extras"].items()):
        header.append(
            f"# {name} with the extras [{','.join(extras)}]: its CUDA build (testcases/gpu_targets.yml)."
        )
    for req in notes["sources"]:
        header.append(
            f"# {req}: PyPI has its source only; the hash is the wheel's scripts/sdist_wheels.py builds "
            "(pure Python, reproducible), the lab lock's file: the wheelhouse builds it, no node does."
        )
    header += [
        f"# Resolved by uv {notes['uv']} pip compile --python-platform {target.platform} --python-version "
        f"{target.python} --only-binary :all: --generate-hashes, index {notes['index']}: every file the "
        "index lists for each locked version is hashed.",
        f"# Made by scripts/testcase_lock.py ({MAKE_COMMAND} TARGETS={target.name}): change the manifest's "
        "pins or testcases/gpu_targets.yml, then run that.",
    ]
    body = [text for pin in pins for text in pin.lines()]
    return "\n".join(header + body) + "\n"


def gpu_entry_problems(
    entries: dict[str, tuple[str, list[str]]], expected: dict[str, str], target: Target, line: CudaLine
) -> list[str]:
    """Why a GPU closure does not fit the stack: torch's version and wheel, the CUDA major of every CUDA
    wheel, the CUDA runtime line, the NCCL pin; every entry pinned and hashed; the manifest's pins held."""
    problems = [f"{name} has no --hash" for name, entry in entries.items() if not entry[1]]
    problems += [f"{name} is not pinned with ==" for name, entry in entries.items() if not entry[0]]
    for name, version in expected.items():
        if name not in entries:
            problems.append(f"{name}=={version} (the manifest's pin) is missing")
        elif Version(entries[name][0]) != Version(version):
            problems.append(f"{name}=={entries[name][0]} but the manifest pins {name}=={version}")
    torch = entries.get("torch")
    if "torch" in expected:
        if torch is None or torch[0] != line.torch:
            problems.append(
                f"torch is {torch[0] if torch else 'missing'}, the stack's is {line.torch} (CUDA build)"
            )
        wheel = next(
            (
                w
                for w in line.torch_wheels
                if w.get("arch") == target.arch and f"-{target.abi}-" in w.get("url", "")
            ),
            None,
        )
        if torch is not None and wheel and wheel.get("sha256") and wheel["sha256"] not in torch[1]:
            problems.append(
                f"torch's hashes lack the stack's {target.abi} {target.arch} wheel ({wheel['sha256']})"
            )
    for name, (version, _hashes) in entries.items():
        match = _CUDA_NAME_RE.search(name)
        if match and int(match.group(1)) != line.cuda_major:
            problems.append(
                f"{name} is built for CUDA {match.group(1)}, the stack's CUDA major is {line.cuda_major}"
            )
        if name in {"nvidia-cuda-runtime", f"nvidia-cuda-runtime-cu{line.cuda_major}"} and not (
            version == line.cuda_runtime or version.startswith(line.cuda_runtime + ".")
        ):
            problems.append(f"{name}=={version} is not the stack's CUDA runtime {line.cuda_runtime}")
        if name.startswith("nvidia-nccl-") and version != line.nccl:
            problems.append(f"{name}=={version}, the stack pins NCCL {line.nccl} (rule pytorch-nccl-pin)")
    if torch is not None and f"nvidia-nccl-cu{line.cuda_major}" not in entries:
        problems.append(f"nvidia-nccl-cu{line.cuda_major} is missing: is this torch's CUDA build?")
    return problems


def gpu_lock_problems(
    manifest: Path, target: Target, line: CudaLine, table: dict[str, Any] | None = None
) -> list[str]:
    """Why a manifest's lock for a GPU target is wrong, missing, or present where the table says none is."""
    table = gpu_table() if table is None else table
    lock = lock_path(manifest, target.name)
    reason = unresolvable_reason(table, case_id(manifest), target.name)
    if reason is not None:
        return (
            [f"{lock} exists, but testcases/gpu_targets.yml says it cannot be made"] if lock.is_file() else []
        )
    if not lock.is_file():
        return [f"{lock} is missing: make it with `{MAKE_COMMAND} TARGETS={target.name}`"]
    expected = expected_versions(manifest_requirements(manifest), case_id(manifest), table)
    return [f"{lock}: {p}" for p in gpu_entry_problems(read_lock(lock), expected, target, line)]


def make_gpu_lock(
    manifest: Path, target: Target, line: CudaLine, table: dict[str, Any], index: str, stack_id: str
) -> str:
    """Resolve, check and write one GPU lock (or confirm an unresolvable pair still is); a line to print."""
    case = case_id(manifest)
    reqs = manifest_requirements(manifest)
    inputs = gpu_inputs(reqs, case, table)
    lock = lock_path(manifest, target.name)
    reason = unresolvable_reason(table, case, target.name)
    try:
        pins, sources, uv_version = resolve_gpu(inputs, target, index, [lock, lock_path(manifest)])
    except subprocess.CalledProcessError as exc:
        if reason is None:
            sys.exit(
                f"testcase_lock: {case} has no solution on {target.name}:\n{exc.stderr.strip()}\n"
                "Fix the pins, or list the pair in testcases/gpu_targets.yml (unresolvable) with the reason."
            )
        evidence = str(unresolvable_entry(table, case, target.name).get("evidence") or "")
        if evidence not in " ".join(exc.stderr.split()):
            sys.exit(
                f"testcase_lock: {case} has no solution on {target.name}, but not for the reason "
                f"testcases/gpu_targets.yml gives (its evidence '{evidence}' is not in the message):\n"
                f"{exc.stderr.strip()}"
            )
        lock.unlink(missing_ok=True)
        return f"{lock}: none ({reason})"
    if reason is not None:
        sys.exit(
            f"testcase_lock: testcases/gpu_targets.yml says {case} cannot be resolved on {target.name}, "
            "but it is: remove the pair from its unresolvable list"
        )
    entries = {pin.name: (pin.version, list(pin.hashes)) for pin in pins}
    problems = gpu_entry_problems(entries, expected_versions(reqs, case, table), target, line)
    if problems:
        sys.exit(
            f"testcase_lock: {case} on {target.name} does not fit the stack:\n  " + "\n  ".join(problems)
        )
    notes = {
        "stack": stack_id,
        "uv": uv_version,
        "index": index,
        "sources": sources,
        "replaced": table["replaced_pins"].get(case, {}),
        "extras": table["extras"].get(case, {}),
    }
    lock.write_text(render_gpu(manifest, target, line, inputs, pins, notes))
    return f"{lock}: {len(pins)} packages, {sum(len(p.hashes) for p in pins)} hashes"


def select_targets(spec: str, gpu: list[Target]) -> tuple[bool, list[Target]]:
    """``all``, ``gpu``, ``lab`` or a comma-separated list of target names -> (lab?, GPU targets)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    by_name = {t.name: t for t in gpu}
    unknown = [n for n in names if n not in {"all", "gpu", LAB_TARGET, *by_name}]
    if unknown:
        sys.exit(f"testcase_lock: unknown targets {unknown}; the targets are {[LAB_TARGET, *by_name]}")
    lab = bool({"all", LAB_TARGET} & set(names))
    chosen = [t for t in gpu if {"all", "gpu", t.name} & set(names)]
    return lab, chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifests", type=Path, nargs="+", help="testcases/<framework>/<name>/testcase.yml")
    parser.add_argument(
        "--published-index",
        default=PUBLISHED_INDEX,
        help="PEP 691 index whose wheels of each locked version are hashed too ('': only the chosen file)",
    )
    parser.add_argument("--check", action="store_true", help="change nothing; fail when a lock is stale")
    parser.add_argument(
        "--targets",
        default="all",
        help="all (default), gpu, lab, or comma-separated target names such as gpu-ubuntu-24.04-x86_64",
    )
    args = parser.parse_args(argv)
    missing = [str(m) for m in args.manifests if not m.is_file()]
    if missing:
        sys.exit(f"testcase_lock: no manifest at {', '.join(missing)}")
    stack = current_stack()
    table = gpu_table()
    lab, targets = select_targets(args.targets, gpu_targets(stack) + container_targets(stack, table))
    line = cuda_line(stack) if targets else None
    if args.check:
        problems = [p for manifest in args.manifests for p in lock_problems(manifest)] if lab else []
        problems += [p for m in args.manifests for t in targets for p in gpu_lock_problems(m, t, line, table)]
        print("\n".join(problems) or "testcase_lock: every lock holds its manifest's pins")
        return 1 if problems else 0
    for manifest in args.manifests:
        for target in targets:
            print(
                make_gpu_lock(
                    manifest, target, line, table, args.published_index or PUBLISHED_INDEX, stack["id"]
                )
            )
        if not lab:
            continue
        reqs = manifest_requirements(manifest)
        pins = resolve(reqs, args.published_index or None)
        lock_path(manifest).write_text(render(manifest, reqs, pins, args.published_index or None))
        print(f"{lock_path(manifest)}: {len(pins)} packages, {sum(len(p.hashes) for p in pins)} hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
