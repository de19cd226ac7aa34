"""A TCP relay that misbehaves on purpose, for testing that package fetches survive a flaky proxy.

It sits in front of the lab's package proxy and gives connections, in turn, one of three fates: relayed
until a number of response bytes and then cut (what an overloaded mirror or gateway does to a keep-alive
connection); dropped, the request read and the connection closed without an answer; or relayed in full. The
rotation is fixed, not random, so a run is reproducible and a client that needs three connections meets every
fate.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

FATES = ("cut", "drop", "relay")


@dataclass
class FaultProxy:
    """Listen on `listen`, relay to `upstream`; cut connections after `cut_after` response bytes."""

    listen: tuple[str, int]
    upstream: tuple[str, int]
    cut_after: int = 256 * 1024
    counts: Counter[str] = field(default_factory=Counter)
    _server: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Bind and serve in a daemon thread (the test process owns the proxy's lifetime)."""
        server = socket.create_server(self.listen, reuse_port=False)
        server.settimeout(0.5)
        self._server = server
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def stop(self) -> None:
        """Stop accepting; relays in flight end when either side closes."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def _next_fate(self) -> str:
        with self._lock:
            fate = FATES[sum(self.counts.values()) % len(FATES)]
            self.counts[fate] += 1
        return fate

    def _accept_loop(self) -> None:
        while self._server is not None:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, self._next_fate()), daemon=True).start()

    def _serve(self, client: socket.socket, fate: str) -> None:
        with client:
            if fate == "drop":
                client.settimeout(10)
                with contextlib.suppress(OSError):
                    client.recv(65536)  # the request, then hang up without an answer
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                return
            with upstream:
                limit = self.cut_after if fate == "cut" else None
                threading.Thread(target=_pump, args=(client, upstream, None), daemon=True).start()
                _pump(upstream, client, limit)


def _pump(src: socket.socket, dst: socket.socket, limit: int | None) -> None:
    """Copy src to dst until EOF, or until `limit` bytes have passed; then shut both down."""
    sent = 0
    try:
        while limit is None or sent < limit:
            chunk = src.recv(65536 if limit is None else min(65536, limit - sent))
            if not chunk:
                break
            dst.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
