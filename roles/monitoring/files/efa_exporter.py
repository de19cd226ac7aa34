#!/usr/bin/env python3
"""Prometheus exporter for EFA device counters, read from sysfs on every scrape.

Why our own: node_exporter's infiniband collector reads ``ports/*/counters`` (the IB spec counters), which EFA
does not populate; EFA's driver publishes its counters under ``ports/*/hw_counters`` instead (tx/rx bytes,
RDMA read/write bytes, retransmits, unresponsive remotes...). Standard library only, so that it runs on any
image. The role runs it from a timer that writes node_exporter's textfile (``--textfile``), so it opens no
port of its own; it can also serve HTTP (``--address``, loopback by default) for a one-off look. ``--sysfs``
points it at a fixture tree in tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = "efa_"
# hw_counters that are levels, not running totals (lifespan: the counters' own sampling period, in ms).
GAUGES = frozenset({"lifespan"})


def read_counters(sysfs: Path) -> Iterator[tuple[str, str, str, int]]:
    """(device, port, counter, value) for each integer under class/infiniband/*/ports/*/hw_counters."""
    root = sysfs / "class" / "infiniband"
    for device in sorted(root.glob("*")) if root.is_dir() else []:
        for port in sorted((device / "ports").glob("*")):
            counters = port / "hw_counters"
            for item in sorted(counters.glob("*")) if counters.is_dir() else []:
                try:
                    value = int(item.read_text(encoding="ascii").strip())
                except (OSError, ValueError):
                    continue  # unreadable or non-numeric entries (e.g. a directory) are not metrics
                yield device.name, port.name, item.name, value


def metric_name(counter: str) -> str:
    """Prometheus naming: counters end in _total, gauges do not."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in counter)
    return f"{PREFIX}{safe}" if counter in GAUGES else f"{PREFIX}{safe}_total"


def render(sysfs: Path) -> str:
    """The exposition text: one HELP/TYPE block per metric name, then every device/port sample."""
    samples: dict[str, list[str]] = {}
    devices = set()
    for device, port, counter, value in read_counters(sysfs):
        devices.add(device)
        name = metric_name(counter)
        samples.setdefault(name, []).append(f'{name}{{device="{device}",port="{port}"}} {value}')
    lines = [
        "# HELP efa_devices EFA devices with hw_counters visible to the exporter.",
        "# TYPE efa_devices gauge",
        f"efa_devices {len(devices)}",
    ]
    for name in sorted(samples):
        kind = "gauge" if name[len(PREFIX) :] in GAUGES else "counter"
        lines += [
            f"# HELP {name} EFA hw_counter {name[len(PREFIX) :]}.",
            f"# TYPE {name} {kind}",
            *samples[name],
        ]
    return "\n".join(lines) + "\n"


def write_textfile(sysfs: Path, target: Path) -> None:
    """Atomic replace, as node_exporter's textfile collector requires (it may read at any moment)."""
    with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, encoding="utf-8") as handle:
        handle.write(render(sysfs))
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, target)


def serve(sysfs: Path, address: str, port: int) -> None:
    """HTTP exporter: /metrics renders on every scrape, so values are never stale."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = render(sysfs).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    ThreadingHTTPServer((address, port), Handler).serve_forever()


def main(argv: list[str] | None = None) -> int:
    """Serve, or write the textfile once (or every --interval seconds)."""
    parser = argparse.ArgumentParser(description="EFA hw_counters exporter")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"))
    parser.add_argument("--address", default="127.0.0.1", help="listen address (loopback unless given)")
    parser.add_argument("--port", type=int, default=9716)
    parser.add_argument("--textfile", type=Path, help="write node_exporter textfile instead of serving HTTP")
    parser.add_argument("--interval", type=float, default=0, help="with --textfile: rewrite every N seconds")
    args = parser.parse_args(argv)
    if args.textfile:
        while True:
            write_textfile(args.sysfs, args.textfile)
            if args.interval <= 0:
                return 0
            time.sleep(args.interval)
    serve(args.sysfs, args.address, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
