"""trainstack.cluster.ecr_repositories, run in process against a real moto server: the registry's login goes
into the containers auth file and into no module result.

A password in a result ends up in registered variables, callbacks and `-v` output unless every task that
touches it remembers no_log; the module writes it where buildah reads it and returns where it went. The last
test reads every module's RETURN documentation: none of them documents a password, token or secret.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.files import registry_auth
from ansible_collections.trainstack.cluster.plugins.modules import ecr_repositories

from tests.support import REPO, MotoServer, start_moto

ACCOUNT = "123456789012"
REGION = "us-west-2"
HOST = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str], moto: MotoServer):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        base = {"region": REGION, "endpoint_url": moto.url, "access_key": "testing", "secret_key": "testing"}
        with patch_module_args({**base, **args}), pytest.raises(SystemExit):
            ecr_repositories.main()
        return json.loads(capsys.readouterr().out)

    return run


def _secrets(moto: MotoServer) -> list[str]:
    """What must appear in no result: the authorization token, its password, and the auth file's entry."""
    data = moto.client("ecr", REGION).get_authorization_token()["authorizationData"][0]
    token = data["authorizationToken"]
    password = base64.b64decode(token).decode().split(":", 1)[1]
    return [token, password, registry_auth.entry("AWS", password)["auth"]]


@pytest.mark.moto
def test_the_login_goes_to_the_auth_file_and_into_no_result(run_module, moto, tmp_path: Path) -> None:
    auth_file = tmp_path / "containers" / "auth.json"
    auth_file.parent.mkdir()
    auth_file.write_text(json.dumps({"auths": {"other.example": {"auth": "b3RoZXI6eA=="}}}))
    names = ["ml/trainstack/base"]

    checked = run_module(names=names, auth_file=str(auth_file), _ansible_check_mode=True)
    assert checked["auth_file_changed"] is True
    assert "AWS" not in auth_file.read_text()  # check mode wrote nothing

    made = run_module(names=names, auth_file=str(auth_file))
    assert not made.get("failed"), made
    assert (made["registry"], made["auth_file"], made["auth_file_changed"]) == (HOST, str(auth_file), True)
    token, password, entry = _secrets(moto)
    auths = json.loads(auth_file.read_text())["auths"]
    assert auths == {"other.example": {"auth": "b3RoZXI6eA=="}, HOST: {"auth": entry}}
    assert auth_file.stat().st_mode & 0o777 == 0o600

    again = run_module(names=names, auth_file=str(auth_file))
    assert (again["changed"], again["auth_file_changed"]) == (False, False)
    without = run_module(names=names)
    assert "registry" not in without and "auth_file" not in without

    for result in (checked, made, again, without):
        text = json.dumps(result)
        for secret in (token, password, entry):
            assert secret not in text, f"a result holds a credential: {sorted(result)}"


def test_an_auth_file_that_is_not_one_is_refused_and_kept(run_module, tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.json"
    auth_file.write_text("not json")
    res = run_module(names=[], auth_file=str(auth_file))
    assert res["failed"] and res["msg"].startswith("auth_file: cannot write the registry's login:")
    assert "not JSON" in res["msg"] and auth_file.read_text() == "not json"


def _documented_returns() -> Iterator[tuple[str, str]]:
    """(module, dotted key) of every value any module documents in RETURN."""
    for path in sorted((REPO / "plugins" / "modules").glob("*.py")):
        found = re.search(r'^RETURN = r?"""(.*?)"""', path.read_text(), re.S | re.M)
        stack = [("", yaml.safe_load(found.group(1)) or {})] if found else []
        while stack:
            prefix, keys = stack.pop()
            for key, doc in keys.items():
                yield path.stem, f"{prefix}{key}"
                if isinstance(doc, dict) and isinstance(doc.get("contains"), dict):
                    stack.append((f"{prefix}{key}.", doc["contains"]))


def test_no_module_returns_a_password_token_or_secret() -> None:
    secret = re.compile(r"(^|[._])(password|passwd|token|secret|credentials?|private_key)($|[._])", re.I)
    assert [f"{module}: {key}" for module, key in _documented_returns() if secret.search(key)] == []
