"""What a test case's GPU lock gives a GPU machine as wheels, and what it leaves to the machine.

A GPU machine for measurements may have no network, and has its own CUDA torch, NCCL and JAX. The proof of a
framework test case on it runs the case's GPU lock (``testcases/<case>/requirements.<target>.lock``) as
closely as that allows: every package of the lock is installed from a wheel at the lock's exact version and
hash, except the CUDA stack the machine provides (torch, Triton, the NVIDIA and CUDA wheels, and JAX, whose
compiled runtime pins it) and any wheel too large to carry. Which is which is decided here, once, and
written down: ``download`` (on a machine with PyPI) fetches the wheels and writes ``carry-<target>.json``
beside them; ``pins`` (on the GPU machine) prints what to install for one case; ``record`` (on the GPU
machine, with the case's path) writes for every lock pin the version that the run found and where it came
from, so that a result says how far it is from the lock.

    python3 -m bench.gpu.lock_carry download --dest .whl pytorch/fsdp megatron/gpt
    python3 -m bench.gpu.lock_carry pins --wheels .whl megatron/gpt
    PYTHONPATH=... python3 -m bench.gpu.lock_carry record --wheels .whl megatron/gpt --out found.json

Standard library only (the GPU machine's Python has neither the collection nor Ansible).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTCASES = ROOT / "testcases"
# The measured machines: x86_64 with CPython 3.12, the GPU target whose interpreter matches.
DEFAULT_TARGET = "gpu-ubuntu-24.04-x86_64"
# Wheels larger than this stay the machine's, so that what is copied to it stays small (about 40 MB).
DEFAULT_MAX_MB = 5.0
# The CUDA stack and the compiled frameworks built against it: the machine's own builds are what run there.
MACHINE_STACK = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|jax|jaxlib|jax-cuda\d+-(plugin|pjrt))$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")
TARGET_LINE = re.compile(r"CPython (\d+)\.(\d+) \(cp\d+\), Linux (\w+) \(glibc (\d+)\.(\d+)\)")
# What measure.sh runs the launch with, at the controller's pin (requirements.txt), with its dependencies.
TOOLS = ("ansible-core",)
REQUIREMENTS = ROOT / "requirements.txt"
# Where the wheels of packages that PyPI has as source only are built (make wheelhouse-slow).
LOCAL_WHEELS = ROOT / ".cache" / "wheelhouse-slow"


class CarryError(ValueError):
    """A lock is missing or does not say its interpreter and platform; the message names the file."""


@dataclass(frozen=True)
class Pin:
    """One locked package: its normalised name, exact version and every hash the lock allows."""

    name: str
    version: str
    hashes: tuple[str, ...]

    @property
    def requirement(self) -> str:
        """The pin as a ``--require-hashes`` line."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash={h}" for h in self.hashes)])


def normalise(name: str) -> str:
    """PEP 503's name form, the form both pip and importlib.metadata accept."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_path(case: str, target: str) -> Path:
    """The case's lock for the target; refuses a case or target that has none."""
    path = TESTCASES / case / f"requirements.{target}.lock"
    if not path.is_file():
        raise CarryError(f"{path} does not exist: no {target} lock for {case} (make testcase-locks)")
    return path


def parse_lock(text: str) -> list[Pin]:
    """The lock's pins, each with the hashes on its continuation lines."""
    pins: list[Pin] = []
    for entry in re.split(r"\n(?=\S)", text):
        match = PIN.match(entry)
        if match:
            pins.append(Pin(normalise(match[1]), match[2], tuple(HASH.findall(entry))))
    return pins


def platform_of(text: str) -> tuple[str, list[str]]:
    """The lock's Python version and the manylinux tags its glibc accepts, newest first (from its header)."""
    match = TARGET_LINE.search(text)
    if not match:
        raise CarryError("the lock's header does not name its CPython, architecture and glibc")
    major, minor, arch, glibc_major, glibc_minor = match.groups()
    tags = [f"manylinux_{glibc_major}_{m}_{arch}" for m in range(int(glibc_minor), 4, -1)]
    return f"{major}.{minor}", [*tags, f"manylinux2014_{arch}", "any"]


def machine_keeps(pin: Pin) -> bool:
    """Whether the pin is part of the CUDA stack the machine provides (never carried)."""
    return bool(MACHINE_STACK.match(pin.name))


def wheel_for(pin: Pin, wheels: Path) -> Path | None:
    """The downloaded wheel of the pin in the directory, if any."""
    stem = re.sub(r"-", "_", pin.name)
    for path in sorted(wheels.glob("*.whl")):
        name, version = path.name.split("-")[:2]
        if normalise(name) == normalise(stem) and version == pin.version:
            return path
    return None


def download(cases: list[str], target: str, dest: Path, max_mb: float) -> dict[str, dict[str, list[str]]]:
    """Fetch each case's carried wheels (hash-checked) into dest; the manifest of carried and kept pins."""
    dest.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict[str, list[str]]] = {}
    for case in cases:
        text = lock_path(case, target).read_text(encoding="utf-8")
        python, tags = platform_of(text)
        wanted = [pin for pin in parse_lock(text) if not machine_keeps(pin)]
        requirements = dest / f"carry-{case.replace('/', '_')}.txt"
        requirements.write_text("".join(pin.requirement + "\n" for pin in wanted), encoding="utf-8")
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:"]
        command += ["--python-version", python, "--implementation", "cp", "--require-hashes", "-d", str(dest)]
        command += [arg for tag in tags for arg in ("--platform", tag)]
        command += ["--find-links", str(LOCAL_WHEELS), "-r", str(requirements)]
        subprocess.run(command, check=True)
        carried, kept = [], []
        for pin in parse_lock(text):
            wheel = None if machine_keeps(pin) else wheel_for(pin, dest)
            small = wheel is not None and wheel.stat().st_size <= max_mb * 2**20
            (carried if small else kept).append(f"{pin.name}=={pin.version}")
        manifest[case] = {"carried": carried, "machine": kept}
    return manifest


def tool_pins() -> list[str]:
    """The controller's pins of TOOLS, read from requirements.txt (the one place they are written)."""
    pins = []
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line.strip())
        if match and normalise(match[1]) in TOOLS:
            pins.append(f"{normalise(match[1])}=={match[2]}")
    return pins


def download_tools(target: str, dest: Path) -> list[str]:
    """The tools' wheels and their dependencies for the target's platform; the files written."""
    python, tags = platform_of(lock_path("pytorch/fsdp", target).read_text(encoding="utf-8"))
    before = {path.name for path in dest.glob("*.whl")}
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "-d", str(dest)]
    command += ["--python-version", python, "--implementation", "cp"]
    command += [arg for tag in tags for arg in ("--platform", tag)]
    subprocess.run([*command, *tool_pins()], check=True)
    return sorted({path.name for path in dest.glob("*.whl")} - before)


def prune(dest: Path, manifest: dict[str, dict[str, list[str]]], keep: list[str]) -> None:
    """Remove the wheels no case carries (those over the size limit) and no tool needs, so that only what is
    used travels."""
    carried = {pin for entry in manifest.values() for pin in entry["carried"]}
    for path in dest.glob("*.whl"):
        name, version = path.name.split("-")[:2]
        if f"{normalise(name)}=={version}" not in carried and path.name not in keep:
            path.unlink()


def found_version(name: str) -> str | None:
    """The version of the distribution this Python imports, or None when it has none."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def record(case: str, target: str, manifest: dict[str, dict[str, list[str]]]) -> dict[str, object]:
    """Every lock pin beside the version this Python finds and where it came from."""
    carried = set(manifest.get(case, {}).get("carried", []))
    rows = []
    for pin in parse_lock(lock_path(case, target).read_text(encoding="utf-8")):
        pinned = f"{pin.name}=={pin.version}"
        found = found_version(pin.name)
        rows.append(
            {
                "package": pin.name,
                "lock": pin.version,
                "found": found,
                "source": "carried" if pinned in carried else "machine",
                "matches": found is not None and found.split("+")[0] == pin.version.split("+")[0],
            }
        )
    differ = [row["package"] for row in rows if not row["matches"] and row["found"] is not None]
    missing = [row["package"] for row in rows if row["found"] is None]
    return {"case": case, "target": target, "packages": rows, "differ": differ, "missing": missing}


def main(argv: list[str] | None = None) -> int:
    """The three commands; a bad case or target exits 2 with the reason."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("download")
    fetch.add_argument("--dest", type=Path, default=ROOT / ".whl")
    fetch.add_argument("--max-mb", type=float, default=DEFAULT_MAX_MB)
    for command in (fetch, commands.add_parser("pins"), commands.add_parser("record")):
        command.add_argument("--target", default=DEFAULT_TARGET)
        command.add_argument("cases" if command is fetch else "case", nargs="+" if command is fetch else None)
        if command is not fetch:
            command.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    commands.choices["record"].add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "download":
            manifest = download(args.cases, args.target, args.dest, args.max_mb)
            tools = download_tools(args.target, args.dest)
            prune(args.dest, manifest, keep=tools)
            (args.dest / f"carry-{args.target}.json").write_text(json.dumps(manifest, indent=2) + "\n")
            return 0
        manifest = json.loads((args.wheels / f"carry-{args.target}.json").read_text(encoding="utf-8"))
        if args.command == "pins":
            print("\n".join(manifest[args.case]["carried"]))
            return 0
        args.out.write_text(json.dumps(record(args.case, args.target, manifest), indent=2) + "\n")
        return 0
    except KeyError as error:
        print(f"lock_carry: {error} has no entry in the carry manifest; download it first", file=sys.stderr)
        return 2
    except (CarryError, FileNotFoundError) as error:
        print(f"lock_carry: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
