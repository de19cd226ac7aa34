"""Local mirror of the fabric roles' downloads for the lab: real release sources, else named stand-ins.

Why: the EFA installer and GitHub (aws-ofi-nccl, nccl-tests, pyxis, enroot) are unreachable from this
network, yet the roles must download through the artifact layer with a sha256 check. This helper lays out a
mirror as `make mirror` would (`<artifact name>/<upstream file name>`) and serves it over HTTP on the lab
bridge. The release sources the lab builds (REAL_SOURCES) come from the upstream directory (`git archive` of
each tag, see its README.md), served under the file name of the URL the stack names, once the stack's lock
(stacks/locks/<id>.lock.json) records them; their sha256 must be the one that lock records, so the roles fetch
them exactly as an image build would. Only the artifacts with no public source here (the EFA installer,
the PCS agent) are stand-ins, packed from the files in scripts/mirror_standins (each says it is one; read
as data, never imported or run here). The mirror's lock file records both (`standin` says which).
Stand-in archives are byte-reproducible (fixed mtimes and owners), so the lock is stable. A source the stack
pins but neither the lock nor the upstream directory holds (an older stack's release) is not served: a role
that asks for it fails at its download.

    python scripts/fabric_mirror.py up --dir DIR [--stack S.yml --upstream UP]
        [--bind 10.77.0.1 --port 8671]
    python scripts/fabric_mirror.py down --dir DIR

`make fabric-mirror-up` and `make fabric-mirror-down` run it; tests import it as `scripts.fabric_mirror`.

The upstream directory: --upstream, else $TRAINSTACK_UPSTREAM_DIR, else ../shared/upstream beside the
repository.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The stand-ins the lab's mirror serves in place of the downloads with no public source here: their files are
# packed as data, never imported or run here (a foundation test also runs the EFA one directly).
STANDINS = REPO / "scripts" / "mirror_standins"
EPOCH = 1_700_000_000  # fixed mtime: reproducible archives
UPSTREAM_ENV = "TRAINSTACK_UPSTREAM_DIR"
# Served from the upstream directory (real release sources) once the stack's lock records them: the lab builds
# these (the fabric and fabric_build scenarios, the enroot lab test).
REAL_SOURCES = frozenset({"enroot-src", "pyxis-src", "aws-ofi-nccl-src", "nccl-tests-src"})


def default_upstream() -> Path:
    """The release sources to mirror: $TRAINSTACK_UPSTREAM_DIR, else the repository's ../shared/upstream."""
    return Path(os.environ.get(UPSTREAM_ENV) or REPO.parent / "shared" / "upstream")


def current_stack_file() -> Path:
    """The stack stacks/current names: the one the roles install by default."""
    return REPO / "stacks" / f"{(REPO / 'stacks' / 'current').read_text().strip()}.yml"


def _file_name(url: str) -> str:
    return urllib.parse.unquote(url.rsplit("/", 1)[-1])


def _tar_gz(entries: dict[str, tuple[bytes, int]]) -> bytes:
    """A .tar.gz of {path: (content, mode)} with fixed metadata, so equal inputs give equal bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(entries):
            data, mode = entries[path]
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, EPOCH
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=EPOCH) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _tree(src: Path, top: str, version: str) -> dict[str, tuple[bytes, int]]:
    """Every file under a stand-in directory, placed under `top/`, with @VERSION@ filled in."""
    entries = {}
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        data = path.read_bytes().replace(b"@VERSION@", version.encode())
        entries[f"{top}/{path.relative_to(src)}"] = (data, 0o755 if os.access(path, os.X_OK) else 0o644)
    return entries


def _builders(components: dict) -> dict[str, Callable[[dict], bytes]]:
    """Stand-in bytes per artifact name of the stack: the downloads with no public source here (the EFA
    installer, the PCS agent)."""

    def version(name: str) -> str:
        return str(components[name]["version"])

    return {
        "aws-efa-installer": lambda a: _tar_gz(
            _tree(STANDINS / "efa_installer", "aws-efa-installer", version("efa_installer"))
        ),
        "aws-pcs-agent": lambda a: _tar_gz(
            _tree(STANDINS / "pcs_agent", "aws-pcs-agent", version("pcs_agent"))
        ),
    }


def _stack_lock(stack_file: Path, stack_id: str) -> dict:
    """The committed lock of the stack (stacks/locks/<id>.lock.json), or an empty one."""
    path = stack_file.parent / "locks" / f"{stack_id}.lock.json"
    return json.loads(path.read_text())["artifacts"] if path.is_file() else {}


def _real_source(art: dict, upstream: Path, locked: dict | None) -> bytes:
    """The release source for one artifact, refused unless the stack's lock vouches for exactly these bytes.

    Why refuse: the lock is what every build trusts; a mirror that served other bytes would only move the
    failure to the node, with a less clear message."""
    path = upstream / _file_name(art["url"])
    if not path.is_file():
        raise SystemExit(
            f"mirror: {art['name']}: {path} is missing (the upstream directory is --upstream, "
            f"${UPSTREAM_ENV} or ../shared/upstream beside the repository)"
        )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if not locked or locked.get("url") != art["url"] or locked.get("sha256") != digest:
        raise SystemExit(
            f"mirror: {art['name']}: {path} has sha256 {digest}, the stack's lock records "
            f"{(locked or {}).get('sha256')} for {art['url']}"
        )
    return data


def build(stack_file: Path, directory: Path, upstream: Path | None = None) -> dict:
    """Write the mirror's files into `directory` at their mirror paths and return its lock (also written)."""
    stack = yaml.safe_load(stack_file.read_text())
    components = stack["components"]
    builders = _builders(components)
    upstream = upstream or default_upstream()
    committed = _stack_lock(stack_file, stack["id"])
    lock: dict = {"format": 1, "stack": stack["id"], "artifacts": {}}
    for comp in components.values():
        for art in comp.get("artifacts") or []:
            # A real source once the stack locks it; a stand-in only where there is no public source.
            real = art["name"] in REAL_SOURCES and art["name"] in committed
            if real:
                data = _real_source(art, upstream, committed.get(art["name"]))
            elif art["name"] in builders:
                data = builders[art["name"]](art)
            else:
                continue
            target = directory / art["name"] / _file_name(art["url"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            lock["artifacts"][art["name"]] = {
                "url": art["url"],
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "standin": not real,
            }
    (directory / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return lock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def serve(directory: Path, bind: str, port: int) -> int:
    """Start (or keep) a detached HTTP server for `directory`; its pid is kept in `directory/.server.pid`."""
    pidfile = directory / ".server.pid"
    if pidfile.exists() and _alive(int(pidfile.read_text())):
        return int(pidfile.read_text())
    log = open(directory / ".server.log", "ab")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", bind, "--directory", str(directory), str(port)],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pidfile.write_text(str(proc.pid))
    url = f"http://{bind}:{port}/lock.json"
    for _attempt in range(50):
        try:
            with urllib.request.urlopen(url, timeout=1):
                return proc.pid
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"mirror: server on {bind}:{port} did not answer (see {directory}/.server.log)")


def stop(directory: Path) -> None:
    """Stop the server this helper started for `directory` (by its recorded pid only)."""
    pidfile = directory / ".server.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
    pidfile.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "up", "down"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--stack", type=Path, default=current_stack_file())
    parser.add_argument("--upstream", type=Path, default=None, help="release sources (default: see above)")
    parser.add_argument("--bind", default="10.77.0.1")
    parser.add_argument("--port", type=int, default=8671)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.action == "down":
        stop(args.dir)
        return 0
    lock = build(args.stack, args.dir, args.upstream)
    if args.action == "up":
        pid = serve(args.dir, args.bind, args.port)
        url = f"http://{args.bind}:{args.port}"
        print(json.dumps({"url": url, "pid": pid, "artifacts": sorted(lock["artifacts"])}))
    else:
        print(json.dumps(lock, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
