"""Build the signed local apt repository that stands in for Amazon Linux 2023's, for the ECS agent's package.

Why: the ecs_agent role installs the stack's `ecs-init` at the pinned version from the system's own
repositories, configures it and enables its service. AL2023's repositories are unreachable from this network
and no Debian package holds the agent, so the lab node gets a repository of STAND-IN `ecs-init` packages
(version suffix `~standin`, description saying so, a script and a systemd unit in the places the real package
uses, no agent). apt reads it signed, as it reads a vendor's. It offers the pinned version and a newer one, so
that only the role's pin picks the installed one.

The repository's packages and signing are those of the NVIDIA stand-in repositories
(tests/integration/nvidia/standin_repo.py). The directory is rebuilt only when its inputs change (this file,
that one, the versions): `input.sha256` inside records them.

Usage (repository root on PYTHONPATH): ecs_init_standin.py OUT_DIR --version 1.101.0
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import shutil
import tempfile
from pathlib import Path

from tests.integration.nvidia import standin_repo
from tests.integration.nvidia.standin_repo import StandinPackage, make_key, write_flat_repo

NOTE = "trainstack stand-in for Amazon's ecs-init (lab tests only): starts no ECS agent"
# Where AL2023's ecs-init puts its program and unit; the unit as Amazon's reads the agent's configuration.
UNIT = """[Unit]
Description=Amazon Elastic Container Service - container agent (stand-in)
After=docker.service

[Service]
Type=simple
EnvironmentFile=-/etc/ecs/ecs.config
ExecStart=/usr/libexec/amazon-ecs-init start

[Install]
WantedBy=multi-user.target
"""


def ecs_init(version: str) -> StandinPackage:
    """One stand-in ecs-init; no maintainer scripts, so that enabling its service is the role's doing."""
    program = (
        f'#!/bin/sh\n# {NOTE}\necho "amazon-ecs-init {version} (stand-in): no ECS agent here" >&2\nexit 1\n'
    )
    return StandinPackage(
        name="ecs-init",
        version=f"{version}-1~standin",
        files={
            "usr/libexec/amazon-ecs-init": (0o755, program),
            "lib/systemd/system/ecs.service": (0o644, UNIT),
        },
        description=NOTE,
    )


def newer(version: str) -> str:
    """The next minor release: what an unpinned install would take instead."""
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def input_key(versions: list[str]) -> str:
    digest = hashlib.sha256()
    for source in (Path(__file__), Path(inspect.getfile(standin_repo))):
        digest.update(source.read_bytes())
    digest.update(" ".join(versions).encode())
    return digest.hexdigest()


def build(out_dir: Path, versions: list[str]) -> bool:
    """(Re)build the repository and its key unless it was built from the same inputs; True if built."""
    key = input_key(versions)
    stamp = out_dir / "input.sha256"
    if stamp.is_file() and stamp.read_text().strip() == key:
        return False
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        gnupghome = Path(tmp) / "gnupg"
        make_key(gnupghome, out_dir / "key.asc")
        write_flat_repo(out_dir / "al2023", [ecs_init(v) for v in versions], gnupghome)
    for path in [out_dir, *out_dir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    stamp.write_text(key + "\n")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--version", required=True, help="the stack's pin (MAJOR.MINOR.PATCH)")
    args = parser.parse_args()
    built = build(args.out_dir, [args.version, newer(args.version)])
    print("built" if built else "unchanged")


if __name__ == "__main__":
    main()
