"""The training_job_attempts action: a job's attempts read from its fetched log and saved beside it, in the
controller's process. Runs ansible-playbook on localhost, as the launch runs it; the logs are the lines the
batch script and the test cases print (output.ATTEMPT_PREFIX and the metric lines)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import LOCALHOST_ARGS, VENV_BIN, ansible_env, run

LOG = "\n".join(
    [
        'TRAINSTACK_ATTEMPT {"attempt": 0, "job_id": "12", "nodes": "ts-compute[1-2]", "checkpoint": ""}',
        'TRAINSTACK_METRIC {"step": 1, "loss": 6.2}',
        'TRAINSTACK_METRIC {"step": 2, "loss": 6.0}',
        'TRAINSTACK_ATTEMPT {"attempt": 1, "job_id": "12", "nodes": "ts-compute[2-3]", '
        '"checkpoint": "step-2"}',
        'TRAINSTACK_METRIC {"step": 3, "loss": 5.9}',
        'TRAINSTACK_ATTEMPT_STOP {"reason": "requeued 2 times"}',
        "",
    ]
)


def _play(tmp_path: Path, log: Path, dest: Path, *extra: str) -> tuple[int, str, dict]:
    result = tmp_path / "result.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Save the attempts",
                    "trainstack.cluster.training_job_attempts": {"log": str(log), "dest": str(dest)},
                    "register": "read",
                },
                {
                    "name": "Keep the result",
                    "ansible.builtin.copy": {
                        "dest": str(result),
                        "content": "{{ read | to_json }}",
                        "mode": "0644",
                    },
                    "check_mode": False,
                },
            ],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play))  # JSON is YAML
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), *LOCALHOST_ARGS, str(path), *extra],
        env=ansible_env(),
        check=False,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    return proc.returncode, out, json.loads(result.read_text()) if result.exists() else {}


def test_attempts_are_parsed_and_written_once(tmp_path: Path) -> None:
    log, dest = tmp_path / "job.log", tmp_path / "attempts.json"
    log.write_text(LOG)
    rc, out, first = _play(tmp_path, log, dest)
    assert rc == 0 and first["changed"], out[-2000:]
    saved = json.loads(dest.read_text())
    assert saved == first["attempts"]
    assert [(a["attempt"], a["nodes"], a["checkpoint"], a["steps"]) for a in saved] == [
        (0, "ts-compute[1-2]", None, 2),
        (1, "ts-compute[2-3]", "step-2", 1),
    ]
    assert saved[-1]["stopped"] == "requeued 2 times"
    assert oct(dest.stat().st_mode & 0o777) == "0o644"
    rc, out, again = _play(tmp_path, log, dest)
    assert rc == 0 and not again["changed"], out[-2000:]


def test_a_log_without_attempts_writes_nothing(tmp_path: Path) -> None:
    log, dest = tmp_path / "job.log", tmp_path / "attempts.json"
    log.write_text('TRAINSTACK_METRIC {"step": 1, "loss": 6.2}\n')
    rc, out, read = _play(tmp_path, log, dest)
    assert rc == 0 and (read["attempts"], read["changed"], read["dest"]) == ([], False, ""), out[-2000:]
    assert not dest.exists()


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    log, dest = tmp_path / "job.log", tmp_path / "attempts.json"
    log.write_text(LOG)
    rc, out, read = _play(tmp_path, log, dest, "--check")
    assert rc == 0 and len(read["attempts"]) == 2 and not dest.exists(), out[-2000:]


def test_a_missing_log_fails_naming_it(tmp_path: Path) -> None:
    rc, out, _ = _play(tmp_path, tmp_path / "absent.log", tmp_path / "attempts.json")
    assert rc != 0 and "cannot read the job's log" in out and "absent.log" in out
