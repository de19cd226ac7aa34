"""trainstack_train.entry, what every train.py runs: the validate-only answer, the start, the teardown."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from trainstack_train.entry import main


def parse(validate_only: str = "false"):
    return lambda argv: SimpleNamespace(validate_only=validate_only, argv=argv)


def test_validate_only_answers_and_starts_nothing(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "4")
    started: list[object] = []
    status = main("a/case", parse("true"), started.append, ["--x"], teardown=lambda: started.append("down"))
    assert status == 0
    assert capsys.readouterr().out == "a/case: the arguments hold for 4 process(es)\n"
    assert started == []


def test_the_start_is_imported_by_name_and_its_status_returned():
    """``module:function``, imported only once the arguments hold (here ``len`` of a three-item config)."""
    down: list[str] = []
    status = main("c", lambda argv: [1, 2, 3], "builtins:len", teardown=lambda: down.append("x"))
    assert (status, down) == (3, ["x"])
    # A loop that returns its summary (not an int) exits 0.
    assert main("c", parse(), lambda cfg: object(), teardown=lambda: None) == 0


def test_the_teardown_runs_when_training_fails():
    down: list[str] = []

    def fail(cfg: object) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        main("c", parse(), fail, teardown=lambda: down.append("x"))
    assert down == ["x"]
