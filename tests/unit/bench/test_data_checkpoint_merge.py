"""bench/data_checkpoint.py --merge: one machine call cannot hold all four runs, so a second invocation keeps
the runs of an earlier output that it did not run itself, says which it took, and compares across both."""

from __future__ import annotations

import json
from pathlib import Path

from bench import data_checkpoint


def _run(tokens: float, saved: int = 0) -> dict[str, object]:
    run: dict[str, object] = {"ok": True, "tokens_per_s": tokens, "elapsed_s": 60.0}
    if saved:
        run["checkpoints"] = {"saved": saved, "blocked_s": 2.0 * saved, "write_s": [3.0] * saved}
    return run


def _earlier(tmp_path: Path) -> Path:
    """An earlier output that ran the data pair (synthetic and corpus) and an old corpus_sync."""
    path = tmp_path / "earlier.json"
    runs = {"synthetic": _run(1000.0), "corpus": _run(900.0), "corpus_sync": _run(1.0, saved=1)}
    path.write_text(
        json.dumps({"benchmark": "data_checkpoint", "date_utc": "2026-01-02T03:04:05Z", "runs": runs})
    )
    return path


def test_merge_takes_the_earlier_runs_not_rerun_and_keeps_the_new_ones(tmp_path: Path) -> None:
    runs = {"corpus_sync": _run(880.0, saved=4), "corpus_async": _run(890.0, saved=4)}
    merged = data_checkpoint.merge(_earlier(tmp_path), runs)
    assert merged == {
        "file": "earlier.json",
        "date_utc": "2026-01-02T03:04:05Z",
        "runs": ["synthetic", "corpus"],
    }
    assert sorted(runs) == ["corpus", "corpus_async", "corpus_sync", "synthetic"]
    # This invocation's own run wins over the earlier one of the same name.
    assert runs["corpus_sync"]["tokens_per_s"] == 880.0
    assert runs["synthetic"]["tokens_per_s"] == 1000.0
    assert data_checkpoint.merge(None, runs) is None


def test_an_invocation_that_runs_nothing_writes_the_merged_document(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text(json.dumps({"documents": 3, "tokens": 1200, "tokenizer": 128256}))
    output = tmp_path / "out" / "merged.json"
    output.parent.mkdir()
    code = data_checkpoint.main(
        [
            "--runs",
            "",
            "--merge",
            str(_earlier(tmp_path)),
            "--corpus",
            str(corpus),
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--output",
            str(output),
        ]
    )
    assert code == 0
    document = json.loads(output.read_text())
    assert document["merged_from"]["runs"] == ["synthetic", "corpus", "corpus_sync"]
    assert sorted(document["runs"]) == ["corpus", "corpus_sync", "synthetic"]
    # The comparison is computed over the merged runs.
    assert document["comparison"]["corpus_rate_fraction"] == 0.9
    assert document["comparison"]["corpus_sync"]["saved"] == 1
    assert document["corpus"] == {"documents": 3, "tokens": 1200, "tokenizer": 128256}
