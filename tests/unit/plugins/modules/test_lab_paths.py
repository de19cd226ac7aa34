"""lab_paths run by Ansible: lab-up marks its directories, and lab-down removes only what carries the mark,
refusing everything when one path does not."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import LOCALHOST_ARGS, VENV_BIN, run

MARK = "trainstack-lab: tslab0"


def lab_paths(*flags: str, **args: Any) -> subprocess.CompletedProcess[str]:
    """One real module run on localhost."""
    return run(
        [
            str(VENV_BIN / "ansible"),
            "all",
            *LOCALHOST_ARGS,
            *flags,
            "-m",
            "trainstack.cluster.lab_paths",
            "-a",
            json.dumps({"owner": "tslab0", **args}),
        ],
        check=False,
        timeout=300,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The module's result, as the configured callback prints it (YAML after the host's status)."""
    return yaml.safe_load(proc.stdout.split("=>", 1)[1])


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Path]:
    """A lab's layout: state directory with keys and shared directory inside, run directory, inventory."""
    state = tmp_path / "var" / "lib" / "trainstack" / "lab"
    (state / "ssh").mkdir(parents=True)
    (state / "ssh" / "id_ed25519").write_text("key\n")
    (state / "shared").mkdir()
    run_dir = tmp_path / "run" / "trainstack-lab"
    run_dir.mkdir(parents=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"---\n# managed\n# Written by lab-up.\n# {MARK}\nall: {{}}\n")
    return {
        "state": state,
        "ssh": state / "ssh",
        "shared": state / "shared",
        "run": run_dir,
        "inv": inventory,
    }


def _down_paths(lab: dict[str, Path]) -> list[str]:
    return [str(lab[key]) for key in ("ssh", "shared", "state", "run", "inv")]


def test_marked_then_removed_and_second_runs_change_nothing(lab: dict[str, Path]) -> None:
    dirs = [str(lab["state"]), str(lab["shared"]), str(lab["run"])]
    first = lab_paths(state="marked", paths=dirs)
    assert first.returncode == 0 and "CHANGED" in first.stdout, first.stdout
    assert (lab["state"] / ".trainstack-lab").read_text() == MARK + "\n"
    assert oct((lab["run"] / ".trainstack-lab").stat().st_mode & 0o777) == "0o644"
    again = lab_paths(state="marked", paths=dirs)
    assert again.returncode == 0 and "CHANGED" not in again.stdout, again.stdout

    checked = lab_paths("--check", paths=_down_paths(lab))
    assert checked.returncode == 0 and lab["state"].is_dir() and lab["inv"].is_file(), checked.stdout
    removed = lab_paths(paths=_down_paths(lab))
    assert removed.returncode == 0 and "CHANGED" in removed.stdout, removed.stdout
    assert not any(Path(path).exists() for path in _down_paths(lab))
    gone = lab_paths(paths=_down_paths(lab))
    assert gone.returncode == 0 and "CHANGED" not in gone.stdout, gone.stdout


@pytest.mark.parametrize(
    ("victim", "why"),
    [
        ("etc/ssh", "holds no .trainstack-lab file reading 'trainstack-lab: tslab0'"),
        ("usr/lib", "holds no .trainstack-lab file reading 'trainstack-lab: tslab0'"),
    ],
)
def test_an_unmarked_directory_refuses_the_whole_removal(
    lab: dict[str, Path], tmp_path: Path, victim: str, why: str
) -> None:
    """A path set by mistake to a system directory: nothing at all goes, the lab's own paths neither."""
    lab_paths(state="marked", paths=[str(lab["state"])])
    system = tmp_path / victim
    system.mkdir(parents=True)
    (system / "sshd_config").write_text("Port 22\n")
    paths = [str(lab["state"]), str(system), str(lab["inv"])]
    proc = lab_paths(paths=paths)
    assert proc.returncode != 0
    msg = result(proc)["msg"]
    assert f"{system} {why}" in msg and "Nothing was removed." in msg, msg
    assert (system / "sshd_config").is_file() and lab["state"].is_dir() and lab["inv"].is_file()


def test_another_labs_mark_is_refused_for_both_states(lab: dict[str, Path]) -> None:
    (lab["run"] / ".trainstack-lab").write_text("trainstack-lab: other\n")
    marking = lab_paths(state="marked", paths=[str(lab["state"]), str(lab["run"])])
    assert marking.returncode != 0
    assert "is marked 'trainstack-lab: other'" in result(marking)["msg"]
    assert not (lab["state"] / ".trainstack-lab").exists(), "a refused run wrote a mark"
    removing = lab_paths(paths=[str(lab["run"])])
    assert removing.returncode != 0 and lab["run"].is_dir()


def test_a_file_without_the_mark_line_and_a_link_are_refused(lab: dict[str, Path], tmp_path: Path) -> None:
    foreign = tmp_path / "inventory.yml"
    foreign.write_text("---\nall:\n  hosts: {}\n")
    link = tmp_path / "link"
    link.symlink_to(lab["state"])
    proc = lab_paths(paths=[str(foreign), str(link)])
    assert proc.returncode != 0
    refused = result(proc)["refused"]
    assert any(
        item.startswith(f"{foreign} has no line ending in 'trainstack-lab: tslab0'") for item in refused
    )
    assert any(item.startswith(f"{link} is a symbolic link") for item in refused)
    assert foreign.is_file() and link.is_symlink()


@pytest.mark.parametrize("path", ["relative/dir", "/", "/var/.."])
def test_paths_that_are_not_absolute_or_are_the_root_are_refused(path: str) -> None:
    proc = lab_paths(paths=[path])
    assert proc.returncode != 0
    assert "is not an absolute path other than '/'" in result(proc)["msg"], proc.stdout


def test_a_path_through_dot_dot_is_judged_where_it_leads(lab: dict[str, Path]) -> None:
    """The inventory's default is written from the role's path (roles/lab/../../inventories/...)."""
    lab_paths(state="marked", paths=[str(lab["state"])])
    roundabout = lab["state"] / "ssh" / ".." / ".." / "lab"
    proc = lab_paths(paths=[str(roundabout), str(lab["inv"].parent / "x" / ".." / lab["inv"].name)])
    assert proc.returncode == 0, proc.stdout
    assert not lab["state"].exists() and not lab["inv"].exists()
