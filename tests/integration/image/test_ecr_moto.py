"""Amazon ECR as the container build's registry, against a real moto server: build_container.yml reads the
account and region from an ECR URL, container_ecr.yml (the part of the build that runs before the push) makes
the repositories once (scan on push, AES-256, mutable tags) and writes the registry's login to buildah's auth
file without printing it. The push itself needs ECR's registry endpoint, which moto does not serve: it is not
tested here (docs/containers.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO, VENV_BIN, MotoServer, moto_aws_env, run, start_moto, trust_role_data

pytestmark = pytest.mark.moto

ACCOUNT = "123456789012"
REGION = "us-west-2"
HOST = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
NAMES = ["ml/trainstack/base", "ml/trainstack/pytorch"]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def ecr_play(moto: MotoServer, tmp_path: Path, *extra: str) -> Any:
    registry = {"url": f"https://{HOST}/ml", "scheme": "https", "host": HOST, "namespace": "ml"}
    registry["ecr"] = {"account": ACCOUNT, "region": REGION}
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-v",
            str(REPO / "playbooks" / "container_ecr.yml"),
            "-e",
            json.dumps(
                {
                    "container_registry": registry,
                    "container_ecr_repositories": NAMES,
                    "container_registry_auth_file": str(tmp_path / "auth.json"),
                    "ansible_python_interpreter": str(VENV_BIN / "python"),
                }
            ),
            *extra,
        ],
        env=moto_aws_env(moto.url),
    )


def recap_changed(output: str) -> int:
    return int(output.rsplit("localhost", 1)[1].split("changed=")[1].split()[0])


def test_repositories_are_made_once_and_the_login_is_not_logged(moto: MotoServer, tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text(json.dumps({"auths": {"other.example": {"auth": "b3RoZXI6eA=="}}}))
    first = ecr_play(moto, tmp_path)
    assert "ml/trainstack/base: created" in first.stdout and "ml/trainstack/pytorch: created" in first.stdout
    ecr = moto.client("ecr", REGION)
    repos = {r["repositoryName"]: r for r in ecr.describe_repositories()["repositories"]}
    assert sorted(repos) == NAMES
    for repo in repos.values():
        assert repo["imageScanningConfiguration"] == {"scanOnPush": True}
        assert repo["imageTagMutability"] == "MUTABLE"
        assert repo["encryptionConfiguration"]["encryptionType"] == "AES256"

    password = base64.b64decode(ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"])
    password_text = password.decode().split(":", 1)[1]
    auths = json.loads((tmp_path / "auth.json").read_text())["auths"]
    assert base64.b64decode(auths[HOST]["auth"]).decode() == f"AWS:{password_text}"
    assert auths["other.example"] == {"auth": "b3RoZXI6eA=="}
    assert (tmp_path / "auth.json").stat().st_mode & 0o777 == 0o600
    assert password_text not in first.stdout + first.stderr

    second = ecr_play(moto, tmp_path)
    assert "ml/trainstack/base: exists" in second.stdout
    assert recap_changed(second.stdout) == 0, second.stdout[-2000:]
    assert password_text not in second.stdout + second.stderr


def ecr_parts(url: str) -> dict[str, str]:
    """build_container.yml's reading of an ECR URL (its first play's vars, through Ansible's templar)."""
    playbook = REPO / "playbooks" / "build_container.yml"
    play = yaml.safe_load(playbook.read_text())[0]
    variables = {
        **trust_role_data(play["vars"]),
        "playbook_dir": str(playbook.parent),
        "container_registry_url": url,
    }
    return Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ __container_ecr_parts }}")
    )


def test_an_ecr_url_names_the_account_and_region() -> None:
    assert ecr_parts(f"https://{HOST}/ml") == {"account": ACCOUNT, "region": REGION}
    assert ecr_parts(f"https://{HOST}") == {"account": ACCOUNT, "region": REGION}
    assert ecr_parts("https://123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/ml")["region"] == "cn-north-1"
    assert ecr_parts("https://registry.example.com/ml") == {}
    assert ecr_parts(f"http://{HOST}/ml") == {}


def test_the_publish_play_reads_the_login_from_the_auth_file(tmp_path: Path) -> None:
    """The registry requests' credentials come from the auth file container_ecr.yml wrote (through uri's
    url_password, a no_log parameter), not from a variable holding the password: the publish play's own
    expressions, evaluated by ansible-playbook with its variables."""
    auth_file = tmp_path / "auth.json"
    auth = base64.b64encode(b"AWS:pa:ss").decode()
    auth_file.write_text(json.dumps({"auths": {HOST: {"auth": auth}, "other.example": {"auth": "eDp5"}}}))
    playbook = REPO / "playbooks" / "build_container.yml"
    publish = next(p for p in yaml.safe_load(playbook.read_text()) if p.get("name") == "Publish the images")
    (ask,) = [t for t in publish["tasks"] if t["name"] == "Ask the registry which tags it holds"]
    uri = ask["ansible.builtin.uri"]
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {**publish["vars"], "__container_registry_auth": {"file": str(auth_file), "host": HOST}},
        "tasks": [
            {
                "ansible.builtin.assert": {"that": ["__user == 'AWS'", "__password == 'pa:ss'"]},
                "vars": {"__user": uri["url_username"], "__password": uri["url_password"]},
            }
        ],
    }
    assert "password" not in json.dumps(publish["vars"]).lower()
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play]))
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
