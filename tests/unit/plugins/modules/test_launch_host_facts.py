"""launch_host_facts reads, in one module run, what a launch plans by: setup's OS facts for the subset the
launch reads, the image record's baked environments (strictly: a record that is there but unusable fails,
naming the file), and sinfo's partitions. sinfo is a recorder on PATH that answers as Slurm 22.05 does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.trainstack.cluster.plugins.modules import launch_host_facts

SINFO = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
[ -n "$SINFO_FAIL" ] && { echo "slurm_load_partitions: Unable to contact slurm controller" >&2; exit 1; }
echo "debug* 2"
"""


@pytest.fixture
def sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "sinfo"
    tool.write_text(SINFO)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir / "calls"


def run(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        launch_host_facts.main()
    return json.loads(capsys.readouterr().out)


def test_reads_setups_facts_the_record_and_the_partition_in_one_run(tmp_path, sinfo, capsys) -> None:
    envs = [{"case": "pytorch/fsdp", "key": "0123456789abcdef", "path": "/opt/trainstack/envs/fsdp"}]
    record = tmp_path / "image.json"
    record.write_text(json.dumps({"testcase_envs": envs}))
    res = run(capsys, image_record=str(record), sinfo=True, partition="debug")
    assert (res["image_record_found"], res["testcase_envs"], res["changed"]) == (True, envs, False), res
    assert (res["sinfo_lines"], res["sinfo_error"]) == (["debug* 2"], "")
    assert sinfo.read_text().split() == ["--noheader", "--format=%P", "%D", "--partition=debug"]
    facts = res["ansible_facts"]
    for key in (
        "distribution",
        "distribution_version",
        "distribution_major_version",
        "os_family",
        "architecture",
    ):
        assert facts[f"ansible_{key}"], key
    assert facts["ansible_pkg_mgr"] != "unknown"
    assert "module_setup" not in facts


def test_a_missing_record_is_an_image_that_baked_nothing(tmp_path, capsys) -> None:
    res = run(capsys, image_record=str(tmp_path / "absent.json"), os_facts=False)
    assert (res["image_record_found"], res["testcase_envs"]) == (False, [])
    assert "ansible_facts" not in res and "sinfo_lines" not in res


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "must hold a JSON object, not list"),
        ('{"testcase_envs": "pytorch/fsdp"}', "testcase_envs must be a list, not str"),
    ],
)
def test_an_unusable_record_fails_naming_the_file_and_the_rule(tmp_path, capsys, text, rule) -> None:
    record = tmp_path / "image.json"
    record.write_text(text)
    res = run(capsys, image_record=str(record), os_facts=False)
    assert res["failed"] and str(record) in res["msg"] and rule in res["msg"], res


def test_an_unreadable_record_fails(tmp_path, capsys) -> None:
    record = tmp_path / "image.json"
    record.mkdir()  # a directory where the file should be: unreadable as a file, even by root
    res = run(capsys, image_record=str(record), os_facts=False)
    assert res["failed"] and "cannot be read" in res["msg"], res


def test_a_failing_sinfo_is_reported_not_raised(sinfo, capsys, monkeypatch) -> None:
    """The launch checks the request first; the partition check then names sinfo's failure."""
    monkeypatch.setenv("SINFO_FAIL", "1")
    res = run(capsys, sinfo=True, os_facts=False)
    assert not res.get("failed") and res["sinfo_lines"] == [], res
    assert res["sinfo_error"] == "sinfo failed (1): slurm_load_partitions: Unable to contact slurm controller"
    assert sinfo.read_text().split() == ["--noheader", "--format=%P", "%D"]


def test_a_host_without_sinfo_is_reported_not_raised(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    res = run(capsys, sinfo=True, os_facts=False)
    assert not res.get("failed") and res["sinfo_lines"] == [], res
    assert res["sinfo_error"].startswith("sinfo could not run: ")
