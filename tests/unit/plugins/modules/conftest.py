"""Run the slurm_job module against Slurm commands that replay output recorded from Slurm 22.05.

The recordings in fixtures/slurm-22.05/ are real (see its README). ``FakeSlurm`` puts executables named
squeue, sacct, scontrol, sbatch and scancel first on PATH; each answers from a script of rules (the first rule
whose strings all occur in the command line wins; its answers are given in turn, the last one repeated) and
logs its command line, so a test sees exactly what the module asked Slurm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[4]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm-22.05"
COLLECTIONS = REPO / ".cache" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

TOOLS = ("squeue", "sacct", "scontrol", "sbatch", "scancel")

_REPLAY = r"""#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
tool, argv = os.path.basename(sys.argv[0]), sys.argv[1:]
line = " ".join(argv)
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps([tool, *argv]) + "\n")
with open(os.path.join(here, "script.json")) as f:
    rules = json.load(f).get(tool, [])
state_path = os.path.join(here, "state.json")
state = json.load(open(state_path)) if os.path.exists(state_path) else {{}}
for index, rule in enumerate(rules):
    if all(part in line for part in rule.get("match", [])):
        key = f"{{tool}}:{{index}}"
        n = state.get(key, 0)
        state[key] = n + 1
        json.dump(state, open(state_path, "w"))
        answer = rule["answers"][min(n, len(rule["answers"]) - 1)]
        sys.stdout.write(answer.get("out", ""))
        sys.stderr.write(answer.get("err", ""))
        sys.exit(answer.get("rc", 0))
sys.stderr.write(f"{{tool}}: no recorded answer for {{line!r}}\n")
sys.exit(2)
"""


def recorded(name: str) -> str:
    """One recording from fixtures/slurm-22.05."""
    return (FIXTURES / name).read_text()


def answer(name: str | None = None, *, rc: int | None = None, err: str | None = None) -> dict[str, Any]:
    """A replayed answer: a recorded stdout (``.txt``/``.json``) or a recorded error (``.err``, exit 1)."""
    if name and name.endswith(".err"):
        return {"out": "", "err": recorded(name), "rc": 1 if rc is None else rc}
    return {"out": recorded(name) if name else "", "err": err or "", "rc": rc or 0}


class FakeSlurm:
    """Slurm commands on PATH that replay recordings; ``calls`` is what the module ran, in order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.script: dict[str, list[dict[str, Any]]] = {}
        for tool in TOOLS:
            path = root / tool
            path.write_text(_REPLAY.format(python=sys.executable))
            path.chmod(0o755)
        self._save()

    def on(self, tool: str, *answers: dict[str, Any], match: tuple[str, ...] = ()) -> FakeSlurm:
        """Answer ``tool`` command lines containing every string of ``match`` with ``answers`` in turn."""
        self.script.setdefault(tool, []).append({"match": list(match), "answers": list(answers)})
        self._save()
        return self

    def _save(self) -> None:
        (self.root / "script.json").write_text(json.dumps(self.script))

    @property
    def calls(self) -> list[list[str]]:
        log = self.root / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return FakeSlurm(bin_dir)


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    """Run slurm_job's main() in this process with the given arguments; returns its JSON result."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.trainstack.cluster.plugins.modules import slurm_job

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            slurm_job.main()
        return json.loads(capsys.readouterr().out)

    return run
