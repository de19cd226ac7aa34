"""Every summary says which torch the run imported, and the exception the launch accepted for it
(trainstack_train.metrics.torch_record, written by Summary.write)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from trainstack_train.metrics import Summary


def written(tmp_path: Path) -> dict[str, object]:
    summary = Summary("a/case", 1, 1, "cpu", None, 1, 1.0, 1.0, None, None, None, None, 0.1)
    summary.write(str(tmp_path / "summary.json"))
    return json.loads((tmp_path / "summary.json").read_text())


def test_the_summary_names_the_torch_it_ran_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TRAINSTACK_TORCH_ACCEPTED", raising=False)
    body = written(tmp_path)
    assert body["torch_version"] == torch.__version__
    assert body["torch_accepted"] is None


def test_an_accepted_torch_is_recorded(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRAINSTACK_TORCH_ACCEPTED", "2.12.0+cu128")
    monkeypatch.setenv("TRAINSTACK_TORCH_LOCK", "2.13.0")
    assert written(tmp_path)["torch_accepted"] == {"found": "2.12.0+cu128", "lock": "2.13.0"}
