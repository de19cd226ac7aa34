"""A small real container image for enroot and pyxis on the lab: Debian's busybox-static with a shell.

Why not the project's base image: enroot converts every image it imports into a squashfs on the node, and the
base image (a Debian root filesystem with CUDA's user space) takes minutes to build, push and convert on the
lab's two shared cores. What these checks need is a real OCI image with a shell, pulled from a real registry:
Debian's busybox-static package (a static /bin/busybox and a link per applet), an /etc/os-release that names
this image (so a container's output cannot be mistaken for its host's) and root in /etc/passwd. Built with
buildah in a storage of its own (vfs, under ``--dir``), so it touches no other build's images.

    python tests/integration/fabric/probe_image.py push --registry http://10.77.0.1:8673/lab --dir DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path

REPOSITORY = "enroot-probe"
TAG = "busybox-1.35"
OS_RELEASE = 'NAME="trainstack enroot probe"\nID=trainstack-enroot-probe\nVERSION_ID="1"\n'
PASSWD = "root:x:0:0:root:/root:/bin/sh\n"
GROUP = "root:x:0:\n"
# Docker's image manifest (schema 2), not OCI's: enroot 4.1.2 first asks for the manifest without an Accept
# header (a HEAD request, to see whether the registry wants a token), and a distribution registry (Debian's
# docker-registry 2.8) answers that with 404 for an OCI manifest ("OCI manifest found, but accept header does
# not support OCI manifests"), which enroot takes as an error.
MANIFEST_FORMAT = "v2s2"


def _buildah(storage: Path, *args: str) -> str:
    """buildah in this helper's own vfs storage (no overlay, no other build's images or locks)."""
    cmd = [
        "buildah",
        "--root",
        str(storage / "root"),
        "--runroot",
        str(storage / "run"),
        "--storage-driver",
        "vfs",
        *args,
    ]
    # A standard input of its own: `buildah run` leaves the one it is given non-blocking, and an
    # ansible-playbook later in the same process would refuse to start on a shared one.
    return subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True
    ).stdout.strip()


def rootfs(directory: Path) -> Path:
    """The image's root filesystem: busybox-static as Debian ships it, one symlink per applet."""
    root = directory / "rootfs"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    subprocess.run(["apt-get", "download", "busybox-static"], cwd=directory, capture_output=True, check=True)
    deb = max(directory.glob("busybox-static_*.deb"), key=lambda path: path.stat().st_mtime)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    busybox = root / "bin" / "busybox"
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    for applet in applets.split():
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    for name in ("etc", "root", "tmp", "proc", "sys", "dev", "run", "var"):
        (root / name).mkdir(exist_ok=True)
    (root / "etc" / "os-release").write_text(OS_RELEASE)
    (root / "etc" / "passwd").write_text(PASSWD)
    (root / "etc" / "group").write_text(GROUP)
    return root


def push(registry: str, directory: Path) -> dict[str, str]:
    """Build the image and push it to ``registry`` (``http[s]://host:port/namespace``); returns its names.

    ``enroot`` is the reference enroot and pyxis take (``host:port#namespace/name:tag``).
    """
    url = urllib.parse.urlsplit(registry)
    storage = directory / "storage"
    image = f"localhost/{REPOSITORY}:{TAG}"
    container = _buildah(storage, "from", "scratch")
    try:
        _buildah(storage, "copy", container, f"{rootfs(directory)}/", "/")
        _buildah(storage, "config", "--cmd", "/bin/sh", "--env", "PATH=/bin", container)
        _buildah(storage, "commit", "--rm", container, image)
    except subprocess.CalledProcessError:
        _buildah(storage, "rm", container)
        raise
    path = f"{url.path.strip('/')}/{REPOSITORY}:{TAG}".lstrip("/")
    tls = ["--tls-verify=false"] if url.scheme == "http" else []
    _buildah(storage, "push", "--format", MANIFEST_FORMAT, *tls, image, f"docker://{url.netloc}/{path}")
    return {"image": f"{url.netloc}/{path}", "enroot": f"{url.netloc}#{path}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["push"])
    parser.add_argument("--registry", required=True, help="http[s]://host:port/namespace")
    parser.add_argument("--dir", type=Path, required=True, help="work and buildah storage directory")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(push(args.registry, args.dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
