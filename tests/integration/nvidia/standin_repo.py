"""Build the signed local apt repositories that stand in for NVIDIA's vendor repositories in the lab.

Why: NVIDIA's CUDA repository (toolkit, DCGM) and its libnvidia-container repository cannot be reached from
this project's network. The roles' repository code (key download, signed-by source, index refresh, pinned
installs, holds) is only tested for real if apt talks to a real, signed repository with the same package names
and version schemes. The packages inside are STAND-INS: built here with dpkg-deb, version suffix `~standin`,
description "trainstack stand-in", carrying small scripts in place of NVIDIA's binaries (no GPU code). Tests
that use them say so. NCCL is not stood in: libnccl2/libnccl-dev here are a repackaging of the stack's real
nvidia-nccl-cuXX wheel (fetched and checksummed through the project's artifact code), the same libnccl.so.2
and headers NVIDIA's packages carry, so the nccl role's repository path can be checked with ncclGetVersion.

Usage: standin_repo.py OUT_DIR [--stack FILE --cache DIR]
  (writes OUT_DIR/{cuda,container-toolkit}/ flat repositories, OUT_DIR/key.asc and its fingerprint in
  OUT_DIR/key.fingerprint)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[3]
STANDIN_NOTE = "trainstack stand-in: no NVIDIA binary here (lab tests only)"


@dataclass(frozen=True)
class StandinPackage:
    """One stand-in .deb: files are {path: (mode, content)}; `version` keeps NVIDIA's scheme plus ~standin."""

    name: str
    version: str
    files: dict[str, tuple[int, str | bytes]] = field(default_factory=dict)
    depends: str = ""
    description: str = STANDIN_NOTE
    links: dict[str, str] = field(default_factory=dict)


def _script(text: str) -> tuple[int, str]:
    return 0o755, f"#!/bin/sh\n# {STANDIN_NOTE}\n{text}\n"


def _cuda_toolkit(release: str) -> StandinPackage:
    major, minor = release.split(".")
    root = f"usr/local/cuda-{release}"
    return StandinPackage(
        name=f"cuda-toolkit-{major}-{minor}",
        version=f"{release}.0-1~standin",
        files={
            f"{root}/version.json": (
                0o644,
                f'{{"cuda": {{"name": "CUDA SDK", "version": "{release}.0"}}}}\n',
            ),
            f"{root}/bin/nvcc": _script(
                f'echo "nvcc: NVIDIA (R) Cuda compiler driver (stand-in)"\n'
                f'echo "Cuda compilation tools, release {release}, V{release}.0"'
            ),
            f"{root}/lib64/README.standin": (0o644, STANDIN_NOTE + "\n"),
        },
    )


def cuda_packages() -> list[StandinPackage]:
    """Packages of the CUDA repository the roles install: two toolkits (side by side) and DCGM 4."""
    hostengine_unit = (
        "[Unit]\nDescription=NVIDIA DCGM host engine (stand-in)\n\n[Service]\n"
        "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    return [
        _cuda_toolkit("13.2"),
        _cuda_toolkit("12.9"),
        StandinPackage(
            name="datacenter-gpu-manager-4-cuda13",
            version="1:4.7.0-1~standin",
            files={
                "usr/bin/nv-hostengine": _script('echo "nv-hostengine needs a GPU" >&2; exit 1'),
                "usr/bin/dcgmi": _script('echo "Version : 4.7.0"'),
                "lib/systemd/system/nvidia-dcgm.service": (0o644, hostengine_unit),
            },
        ),
        StandinPackage(
            name="datacenter-gpu-manager-exporter",
            version="4.7.0-1~standin",
            files={
                "usr/bin/dcgm-exporter": _script('echo "dcgm-exporter needs DCGM and a GPU" >&2; exit 1'),
                "etc/dcgm-exporter/default-counters.csv": (
                    0o644,
                    "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization.\n",
                ),
            },
        ),
    ]


def toolkit_packages(version: str = "1.20.1") -> list[StandinPackage]:
    """The container toolkit's four packages, pinned together by the role."""
    deb_version = f"{version}-1~standin"
    return [
        StandinPackage(
            name="nvidia-container-toolkit",
            version=deb_version,
            depends=(
                f"nvidia-container-toolkit-base (= {deb_version}), "
                f"libnvidia-container-tools (= {deb_version})"
            ),
            files={
                "usr/bin/nvidia-ctk": _script(
                    f'echo "NVIDIA Container Toolkit CLI version {version} (stand-in)"'
                )
            },
        ),
        StandinPackage(
            name="nvidia-container-toolkit-base",
            version=deb_version,
            files={"usr/bin/nvidia-container-runtime": _script('echo "runc wrapper stand-in" >&2; exit 1')},
        ),
        StandinPackage(
            name="libnvidia-container-tools",
            version=deb_version,
            depends=f"libnvidia-container1 (= {deb_version})",
            files={"usr/bin/nvidia-container-cli": _script('echo "version: ' + version + '"')},
        ),
        StandinPackage(
            name="libnvidia-container1",
            version=deb_version,
            files={"usr/share/doc/libnvidia-container1/README.standin": (0o644, STANDIN_NOTE + "\n")},
        ),
    ]


def _artifact_fetch() -> ModuleType:
    """The project's downloader (module_utils/artifact/artifact_fetch.py), loaded by path: stdlib only."""
    path = REPO / "plugins" / "module_utils" / "artifact" / "artifact_fetch.py"
    spec = importlib.util.spec_from_file_location("artifact_fetch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def nccl_packages(stack_file: Path, cache: Path) -> list[StandinPackage]:
    """libnccl2 / libnccl-dev repackaged from the stack's wheel (real library, NVIDIA's version scheme)."""
    nccl = yaml.safe_load(stack_file.read_text())["components"]["nccl"]
    wheel = next(a for a in nccl["artifacts"] if a.get("arch", "x86_64") == "x86_64")
    fetch = _artifact_fetch()
    dest = cache / fetch.mirror_path(wheel["name"], wheel["url"])
    fetch.fetch(wheel["name"], wheel["url"], str(dest), sha256=wheel["sha256"], timeout=300)
    version = f"{nccl['version']}-1+cuda{nccl['cuda_major']}.0"
    note = f"trainstack repackaging of {wheel['name']} (real libnccl.so.2, lab tests only)"
    lib: dict[str, tuple[int, str | bytes]] = {}
    dev: dict[str, tuple[int, str | bytes]] = {}
    with zipfile.ZipFile(dest) as archive:
        for member in archive.namelist():
            if member.startswith("nvidia/nccl/lib/libnccl.so"):
                lib[f"usr/lib/x86_64-linux-gnu/{Path(member).name}"] = (0o644, archive.read(member))
            elif member.startswith("nvidia/nccl/include/") and not member.endswith("/"):
                dev[f"usr/include/{member.removeprefix('nvidia/nccl/include/')}"] = (
                    0o644,
                    archive.read(member),
                )
    return [
        StandinPackage(name="libnccl2", version=version, files=lib, description=note),
        StandinPackage(
            name="libnccl-dev",
            version=version,
            files=dev,
            depends=f"libnccl2 (= {version})",
            links={"usr/lib/x86_64-linux-gnu/libnccl.so": "libnccl.so.2"},
            description=note,
        ),
    ]


def build_deb(pkg: StandinPackage, out_dir: Path) -> Path:
    """dpkg-deb a package tree; the file name carries `standin` through the version."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, (mode, content) in pkg.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
            path.chmod(mode)
        for rel, target in pkg.links.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).symlink_to(target)
        (root / "DEBIAN").mkdir()
        control = [
            f"Package: {pkg.name}",
            f"Version: {pkg.version}",
            "Architecture: amd64",
            "Maintainer: trainstack tests <tests@trainstack.invalid>",
            f"Description: {pkg.description}",
        ]
        if pkg.depends:
            control.append(f"Depends: {pkg.depends}")
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if any(rel.endswith(".so.2") for rel in pkg.files):
            # What debhelper gives every shared-library package: refresh the linker cache on install.
            (root / "DEBIAN" / "triggers").write_text("activate-noawait ldconfig\n")
        target = out_dir / f"{pkg.name}_{pkg.version.split(':')[-1]}_amd64.deb"
        # No compression: the NCCL library is 236 MB and only travels through a local directory.
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Znone", "-b", str(root), str(target)],
            check=True,
            capture_output=True,
        )
        return target


def write_flat_repo(repo: Path, packages: list[StandinPackage], gnupghome: Path) -> None:
    """Flat repository (`deb URL /`, NVIDIA's layout) with a Release file signed by the stand-in key."""
    repo.mkdir(parents=True, exist_ok=True)
    for pkg in packages:
        build_deb(pkg, repo)
    index = subprocess.run(
        ["dpkg-scanpackages", "-m", "."], cwd=repo, check=True, capture_output=True, text=True
    )
    (repo / "Packages").write_text(index.stdout)
    (repo / "Packages.gz").write_bytes(gzip.compress(index.stdout.encode(), mtime=0))
    lines = [
        "Origin: trainstack stand-in",
        "Label: trainstack stand-in",
        f"Date: {formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    for args in (["--clearsign", "-o", "InRelease"], ["-abs", "-o", "Release.gpg"]):
        subprocess.run(
            ["gpg", "--batch", "--yes", *args, "Release"], cwd=repo, env=env, check=True, capture_output=True
        )


def make_key(gnupghome: Path, out: Path) -> None:
    """A throw-away signing key: apt verifies the stand-in repositories exactly as it verifies NVIDIA's."""
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "trainstack stand-in repository",
            "rsa3072",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    key = subprocess.run(["gpg", "--armor", "--export"], env=env, check=True, capture_output=True)
    out.write_bytes(key.stdout)
    # The roles install a repository key only when its fingerprint is pinned: the scenario pins this one.
    colons = subprocess.run(
        ["gpg", "--with-colons", "--fingerprint"], env=env, check=True, capture_output=True, text=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    out.with_suffix(".fingerprint").write_text(fingerprint + "\n")


def build(out_dir: Path, extra_cuda: list[StandinPackage]) -> None:
    """(Re)build both repositories and the key from scratch, so a run never sees a stale index."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        gnupghome = Path(tmp) / "gnupg"
        make_key(gnupghome, out_dir / "key.asc")
        write_flat_repo(out_dir / "cuda", cuda_packages() + extra_cuda, gnupghome)
        write_flat_repo(out_dir / "container-toolkit", toolkit_packages(), gnupghome)
    for path in [out_dir, *out_dir.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o755 if path.is_dir() else 0o644)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stack", type=Path, help="stack file whose NCCL wheel is repackaged as libnccl2")
    parser.add_argument("--cache", type=Path, default=Path("/var/cache/trainstack/artifacts"))
    args = parser.parse_args()
    build(args.out_dir, nccl_packages(args.stack, args.cache) if args.stack else [])


if __name__ == "__main__":
    main()
