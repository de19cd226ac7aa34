"""Real downloads for the artifact tests: Debian packages with the sha256 Debian's signed index publishes
for them, and a local HTTP server standing in for a download host (on loopback, or on the lab bridge for lab
nodes to fetch from)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


def published_sha256(deb: Path) -> str | None:
    """The sha256 Debian's signed package index publishes for this .deb (apt-cache show), if any."""
    import urllib.parse

    name, version, _ = urllib.parse.unquote(deb.name).rsplit("_", 2)
    out = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", f"{name}={version}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return next((line.split()[1] for line in out.splitlines() if line.startswith("SHA256: ")), None)


def real_debian_debs(scratch: Path) -> list[tuple[Path, str | None]]:
    """Two real Debian packages with their published sha256: the download tests' real files.

    Taken from apt's cache when two there match their index entry, else fetched into ``scratch`` with
    `apt-get download` (Debian mirrors are reachable).
    """
    import hashlib

    found = []
    for deb in sorted(Path("/var/cache/apt/archives").glob("*.deb"), key=lambda p: p.stat().st_size)[:40]:
        digest = published_sha256(deb)
        if digest and hashlib.sha256(deb.read_bytes()).hexdigest() == digest:
            found.append((deb, digest))
        if len(found) == 2:
            return found
    subprocess.run(["apt-get", "download", "hello", "sl"], cwd=scratch, check=True, capture_output=True)
    return [(deb, published_sha256(deb)) for deb in sorted(scratch.glob("*.deb"))]


@contextlib.contextmanager
def serve_directory(root: Path, host: str = "127.0.0.1") -> Iterator[tuple[str, list[str]]]:
    """Serve ``root`` over HTTP (a stand-in download host); yields (base_url, requested paths).

    On loopback by default; ``host`` binds another address, such as the lab bridge's for lab nodes to fetch
    from.
    """
    import functools
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer((host, 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}", requests
    finally:
        server.shutdown()
