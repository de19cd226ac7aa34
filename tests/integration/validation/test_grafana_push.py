"""The monitoring role pushes its Grafana dashboards once, leaves them alone on a second run, puts back one
that was changed in Grafana, and fails on a bad token without printing it. Grafana is a named stand-in here
(standin_grafana.py: Grafana's dashboard API on loopback); the role, Ansible and the dashboards are real."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support import REPO, VENV_BIN, run

from .standin_grafana import GrafanaStandIn

TOKEN = "glsa_trainstack_test_token_0123456789"
DASHBOARDS = sorted((REPO / "roles" / "monitoring" / "files" / "dashboards").glob("*.json"))
PLAY = Path(__file__).with_name("grafana_push.yml")


def push(url: str, token: str = TOKEN, *, check: bool = True):
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            str(PLAY),
            "-e",
            f"monitoring_grafana_url={url}",
            "-e",
            f"monitoring_grafana_token={token}",
            "-e",
            "monitoring_grafana_folder_uid=trainstack",
        ],
        check=check,
    )


def changed(output: str) -> int:
    return int(re.search(r"localhost\s*:.*changed=(\d+)", output).group(1))


def test_push_once_then_nothing_then_repair():
    with GrafanaStandIn(TOKEN, {"trainstack"}) as grafana:
        first = push(grafana.url)
        assert grafana.posts() == len(DASHBOARDS) == 4
        for path in DASHBOARDS:
            ours = json.loads(path.read_text())
            held = grafana.dashboards[ours["uid"]]
            assert held["meta"]["folderUid"] == "trainstack"
            assert {k: v for k, v in held["dashboard"].items() if k not in ("id", "version")} == {
                k: v for k, v in ours.items() if k not in ("id", "version")
            }
        assert changed(first.stdout) == 1

        second = push(grafana.url)
        assert grafana.posts() == 4, "a second run must not write again"
        assert changed(second.stdout) == 0

        grafana.dashboards["trainstack-gpu"]["dashboard"]["title"] = "edited by hand"
        third = push(grafana.url)
        assert grafana.posts() == 5
        assert grafana.requests[-1] == ("POST", "/api/dashboards/db")
        assert grafana.dashboards["trainstack-gpu"]["dashboard"]["title"] != "edited by hand"
        assert grafana.dashboards["trainstack-gpu"]["dashboard"]["version"] == 2
        assert changed(third.stdout) == 1
        assert TOKEN not in first.stdout + second.stdout + third.stdout


def test_bad_token_fails_clearly_and_is_not_printed():
    with GrafanaStandIn(TOKEN, {"trainstack"}) as grafana:
        proc = push(grafana.url, token="not-the-token", check=False)
        assert proc.returncode != 0
        assert "answered [401, 401, 401, 401]" in proc.stdout
        assert "not-the-token" not in proc.stdout + proc.stderr
        assert grafana.posts() == 0 and grafana.dashboards == {}


def test_unknown_folder_is_reported_per_dashboard():
    with GrafanaStandIn(TOKEN, set()) as grafana:
        proc = push(grafana.url, check=False)
        assert proc.returncode != 0
        assert "refused ['trainstack-efa.json: 400'" in proc.stdout
        assert "folder uid trainstack" in proc.stdout
