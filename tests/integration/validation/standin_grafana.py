"""STAND-IN for Grafana's dashboard HTTP API, on loopback.

Grafana cannot run here (neither Debian nor PyPI packages it, and its downloads are unreachable), so the
monitoring role's push is tested against this server. It implements only the calls the role makes, as
Grafana documents them: GET /api/dashboards/uid/<uid> answers {dashboard, meta: {folderUid}} or 404, and
POST /api/dashboards/db stores the dashboard with the id and version Grafana assigns and answers {id, uid,
status, version}. A wrong bearer token gets 401, a folder uid it does not hold 400. It records every request.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class GrafanaStandIn:
    """A loopback server holding dashboards by uid, as one Grafana organisation would."""

    def __init__(self, token: str, folders: set[str]) -> None:
        self.token = token
        self.folders = folders | {""}  # "" is the root ("General") folder
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/"

    def __enter__(self) -> GrafanaStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def posts(self) -> int:
        return sum(1 for method, _ in self.requests if method == "POST")

    def _store(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        folder = body.get("folderUid") or ""
        if folder not in self.folders:
            return 400, {"message": "folder not found", "status": "not-found"}
        dashboard = dict(body["dashboard"])
        held = self.dashboards.get(dashboard["uid"])
        version = held["dashboard"]["version"] + 1 if held else 1
        dashboard.update(id=held["dashboard"]["id"] if held else len(self.dashboards) + 1, version=version)
        self.dashboards[dashboard["uid"]] = {"dashboard": dashboard, "meta": {"folderUid": folder}}
        return 200, {"id": dashboard["id"], "uid": dashboard["uid"], "status": "success", "version": version}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {stand_in.token}":
                    return True
                self._answer(401, {"message": "invalid API key"})
                return False

            def do_GET(self) -> None:
                stand_in.requests.append(("GET", self.path))
                if not self._authorised():
                    return
                uid = self.path.removeprefix("/api/dashboards/uid/")
                held = stand_in.dashboards.get(uid)
                self._answer(200, held) if held else self._answer(404, {"message": "Dashboard not found"})

            def do_POST(self) -> None:
                stand_in.requests.append(("POST", self.path))
                if not self._authorised():
                    return
                if self.path != "/api/dashboards/db":
                    self._answer(404, {"message": "not found"})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._answer(*stand_in._store(body))

            def log_message(self, *args: object) -> None:
                pass

        return Handler
