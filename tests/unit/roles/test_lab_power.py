"""The lab host's power program (roles/lab/files/trainstack-lab-power): what the head may ask of it over SSH.

The program is the one way from a lab node to the host's containers, so every request is checked before
anything runs: the action, the hostlist Slurm passes (expanded as Slurm writes it), and every name against the
elastic nodes the lab was brought up with. A refused request runs nothing; an accepted one runs the lab_power
playbook with the names as arguments, never through a shell.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import stat
from pathlib import Path

import pytest

from tests.support import REPO

PROGRAM = REPO / "roles" / "lab" / "files" / "trainstack-lab-power"


def _load():
    loader = importlib.machinery.SourceFileLoader("trainstack_lab_power", str(PROGRAM))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


power = _load()
ELASTIC = ["ts-elastic1", "ts-elastic2", "ts-elastic3"]


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("ts-elastic1", ["ts-elastic1"]),
        ("ts-elastic[1-3]", ["ts-elastic1", "ts-elastic2", "ts-elastic3"]),
        ("ts-elastic[1,3]", ["ts-elastic1", "ts-elastic3"]),
        ("ts-elastic[2-3],ts-elastic1", ["ts-elastic2", "ts-elastic3", "ts-elastic1"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("ts-elastic1,ts-elastic1", ["ts-elastic1"]),
    ],
)
def test_hostlists_expand_as_slurm_writes_them(hostlist: str, names: list[str]) -> None:
    assert power.expand_hostlist(hostlist) == names


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("resume ts-compute1", "not elastic nodes of this lab: ['ts-compute1']"),
        ("resume ts-elastic[1-4]", "not elastic nodes of this lab: ['ts-elastic4']"),
        ("reboot ts-elastic1", "unknown action 'reboot'"),
        ("resume ts-elastic1 ts-elastic2", "expected '<resume|suspend> <hostlist>'"),
        ("resume ts-elastic1;rm", "not a hostlist element"),
        ("resume $(id)", "not a hostlist element"),
        ("suspend ts-elastic[1-2", "unbalanced '['"),
        ("suspend ts-elastic[3-1]", "bad range '3-1'"),
        ("suspend x[1-1000]", "bad range '1-1000'"),
        ("", "expected '<resume|suspend> <hostlist>'"),
    ],
)
def test_requests_outside_the_rules_are_refused(command: str, message: str) -> None:
    with pytest.raises(power.RefusedError, match=None) as refused:
        power.parse_request(command, ELASTIC)
    assert message in str(refused.value)


def test_an_elastic_request_names_its_action_and_nodes() -> None:
    assert power.parse_request("suspend ts-elastic[1-2]", ELASTIC) == (
        "suspend",
        ["ts-elastic1", "ts-elastic2"],
    )


def _config(tmp_path: Path) -> Path:
    """A configuration whose 'playbook' records the argv it was started with."""
    recorder = tmp_path / "ansible-playbook"
    recorder.write_text(
        "#!/usr/bin/python3\nimport json, sys\n"
        f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "nodes": ELASTIC,
                "playbook": str(recorder),
                "inventory": "/lab/hosts.yml",
                "extra_vars_file": "/lab/vars.json",
                "env": {"PATH": "/usr/bin:/bin"},
                "cwd": str(tmp_path),
                "log_dir": str(tmp_path / "log"),
            }
        )
    )
    return config


def test_a_refused_request_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "resume ts-elastic1,ts-head")
    assert power.main(["--config", str(config)]) == 2
    assert not (tmp_path / "argv.json").exists()


def test_an_accepted_request_runs_the_playbook_with_the_names_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    monkeypatch.setenv("SSH_ORIGINAL_COMMAND", "resume ts-elastic[2-3]")
    assert power.main(["--config", str(config)]) == 0
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:4] == ["trainstack.cluster.lab_power", "-i", "/lab/hosts.yml", "-e"]
    assert argv[4] == "@/lab/vars.json"
    assert json.loads(argv[6]) == {
        "lab_power_action": "resume",
        "lab_power_nodes": ["ts-elastic2", "ts-elastic3"],
    }
    logs = list((tmp_path / "log").glob("*-resume-ts-elastic2-etc.log"))
    assert len(logs) == 1
