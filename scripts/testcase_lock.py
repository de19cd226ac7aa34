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

    .venv/bin/python scripts/testcase_lock.py testcases/pytorch/ddp/testcase.yml   # or: make testcase-locks
"""

from __future__ import annotations

import argparse
import json
import os
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdist_wheels import SOURCE_BUILDS, build

REPO = Path(__file__).resolve().parents[1]
LOCK_NAME = "requirements.lock"
MAKE_COMMAND = "make testcase-locks"

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


def lock_path(manifest: Path) -> Path:
    """Where a manifest's lock lives: beside it, so the launcher stages it with the payload."""
    return manifest.parent / LOCK_NAME


def lab_platforms() -> list[str]:
    """The manylinux tags a glibc-2.36 x86_64 node accepts, newest first.

    pip 23's ``--platform`` takes each tag literally (it does not widen ``manylinux_2_36`` to older glibc
    versions), so the list is spelled out, legacy aliases included.
    """
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(LAB_GLIBC_MINOR, 4, -1)]
    for alias, minor in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)):
        tags.insert(tags.index(f"manylinux_2_{minor}_x86_64") + 1, f"{alias}_x86_64")
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
        f"# Made by scripts/testcase_lock.py ({MAKE_COMMAND}): change the manifest's pins, then run that.",
    ]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifests", type=Path, nargs="+", help="testcases/<framework>/<name>/testcase.yml")
    parser.add_argument(
        "--published-index",
        default=PUBLISHED_INDEX,
        help="PEP 691 index whose wheels of each locked version are hashed too ('': only the chosen file)",
    )
    parser.add_argument("--check", action="store_true", help="change nothing; fail when a lock is stale")
    args = parser.parse_args(argv)
    missing = [str(m) for m in args.manifests if not m.is_file()]
    if missing:
        sys.exit(f"testcase_lock: no manifest at {', '.join(missing)}")
    if args.check:
        problems = [p for manifest in args.manifests for p in lock_problems(manifest)]
        print("\n".join(problems) or "testcase_lock: every lock holds its manifest's pins")
        return 1 if problems else 0
    for manifest in args.manifests:
        reqs = manifest_requirements(manifest)
        pins = resolve(reqs, args.published_index or None)
        lock_path(manifest).write_text(render(manifest, reqs, pins, args.published_index or None))
        print(f"{lock_path(manifest)}: {len(pins)} packages, {sum(len(p.hashes) for p in pins)} hashes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
