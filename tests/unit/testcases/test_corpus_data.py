"""Real data in: Megatron's indexed format, preparing a corpus into shards, and the resumable sampler.

The format test that counts is the one against megatron-core itself: it runs in the megatron/gpt case's
virtualenv (megatron-core and torch), in its own process, and is skipped with the reason when that
virtualenv has not been built; it is slow (importing megatron-core takes seconds), as is the Parquet test,
which needs pyarrow from the torchtitan/llama case's virtualenv.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from trainstack_train import prepare as prep
from trainstack_train.corpus import MANIFEST, Corpus, Position, Sampler
from trainstack_train.indexed import HEADER, IndexedDataset, IndexedWriter, paths, token_dtype

from tests.support import REPO

SAMPLE = REPO / "tests" / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
LIBRARY = REPO / "testcases" / "common"
VENVS = REPO / ".cache" / "venvs"
VERSES = [json.loads(line)["text"] for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _case_python(variable: str, prefix: str, *modules: str) -> str:
    """A test case's Python holding ``modules`` (``$variable``, else a virtualenv the slow tests built), or a
    skip that says how to get one: building one is the slow suite's work, not this fast test's.
    """
    given = [Path(os.environ[variable])] if os.environ.get(variable) else []
    for python in [*given, *sorted(VENVS.glob(f"{prefix}-*/bin/python"))]:
        # find_spec of the top-level names: importing megatron.core would cost as much as the test itself.
        probe = [
            "-c",
            "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))",
        ]
        tops = [module.split(".")[0] for module in modules]
        if subprocess.run([str(python), *probe, *tops], capture_output=True, check=False).returncode == 0:
            return str(python)
    pytest.skip(f"no {prefix} Python with {', '.join(modules)}: set {variable} or run make test-slow once")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE trained on the sample: 400 ids, so the tiny model's 512-id vocabulary holds them."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    prep.train_tokenizer([SAMPLE], path, vocab_size=400)
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, tokenizer: Path) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "kjv"
    prep.prepare([SAMPLE], out, tokenizer, num_shards=3)
    return out


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# The indexed format ------------------------------------------------------------------------------------


def test_indexed_writer_and_reader_agree_on_every_field(tmp_path: Path) -> None:
    docs = [[5, 6, 7], [], [65535, 0], [1] * 10]
    with IndexedWriter(tmp_path / "d", np.dtype(np.uint16)) as writer:
        for doc in docs:
            writer.add_document(doc)
    bin_path, idx_path = paths(tmp_path / "d")
    raw = idx_path.read_bytes()
    assert raw[:9] == HEADER and raw[9:17] == (1).to_bytes(8, "little") and raw[17] == 8  # uint16's code
    data = IndexedDataset.open(tmp_path / "d")
    assert list(data.sequence_lengths) == [3, 0, 2, 10] and list(data.document_indices) == [0, 1, 2, 3, 4]
    assert (
        list(data.sequence_pointers) == [0, 6, 6, 10]
        and data.num_tokens == 15 == bin_path.stat().st_size // 2
    )
    assert [data.sequence(i).tolist() for i in range(len(data))] == docs


def test_indexed_reader_refuses_damaged_files_by_name(tmp_path: Path) -> None:
    with IndexedWriter(tmp_path / "d", np.dtype(np.int32)) as writer:
        writer.add_document([1, 2, 3])
    bin_path, idx_path = paths(tmp_path / "d")
    bin_path.write_bytes(bin_path.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"d\.bin: 11 bytes, the index's sequence lengths need 12"):
        IndexedDataset.open(tmp_path / "d")
    idx_path.write_bytes(b"NOTANIDX!" + idx_path.read_bytes()[9:])
    with pytest.raises(ValueError, match=r"d\.idx: header .*\(not an indexed dataset\)"):
        IndexedDataset.open(tmp_path / "d")
    with pytest.raises(ValueError, match="outside uint16"):
        IndexedWriter(tmp_path / "e", np.dtype(np.uint16)).add_document([70000])
    assert token_dtype(65499) == np.uint16 and token_dtype(65500) == np.int32  # megatron-core's rule


MEGATRON_CHECK = textwrap.dedent(
    """
    import json, sys
    import numpy, torch
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    ours = IndexedDataset(sys.argv[1])
    read = {"lengths": ours.sequence_lengths.tolist(), "documents": ours.document_indices.tolist(),
            "sequences": [ours[i].tolist() for i in range(len(ours))], "dtype": ours.index.dtype.__name__}
    for dtype, prefix in ((numpy.uint16, sys.argv[2]), (numpy.int32, sys.argv[3])):
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        builder.add_item(torch.tensor([3, 1, 4, 1, 5]))
        builder.end_document()
        builder.add_document(torch.tensor([9, 2, 6, 5, 3]), lengths=[2, 3])
        builder.add_item(torch.tensor([60000]))
        builder.end_document()
        builder.finalize(prefix + ".idx")
    print(json.dumps(read))
    """
)


@pytest.mark.slow
def test_megatron_core_reads_ours_and_we_read_megatron_cores(prepared: Path, tmp_path: Path) -> None:
    python = _case_python(
        "TRAINSTACK_MEGATRON_PYTHON", "megatron-gpt", "megatron.core.datasets.indexed_dataset"
    )
    ours = prepared / "shard-00001"
    proc = subprocess.run(
        [python, "-c", MEGATRON_CHECK, str(ours), str(tmp_path / "m16"), str(tmp_path / "m32")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = json.loads(proc.stdout.strip().splitlines()[-1])
    mine = IndexedDataset.open(ours)
    assert read["dtype"] == "uint16" and read["lengths"] == mine.sequence_lengths.tolist()
    assert read["documents"] == mine.document_indices.tolist()
    assert read["sequences"] == [mine.sequence(i).tolist() for i in range(len(mine))]
    for name, dtype in (("m16", np.uint16), ("m32", np.int32)):
        theirs = IndexedDataset.open(tmp_path / name)
        assert theirs.dtype == dtype and theirs.sequence_lengths.tolist() == [5, 2, 3, 1]
        assert theirs.document_indices.tolist() == [0, 1, 3, 4]  # a document of two sequences
        assert [theirs.sequence(i).tolist() for i in range(4)] == [
            [3, 1, 4, 1, 5],
            [9, 2],
            [6, 5, 3],
            [60000],
        ]


# Preparation -------------------------------------------------------------------------------------------


def test_prepared_shards_hold_every_document_once_in_the_documented_shard(
    prepared: Path, tokenizer: Path
) -> None:
    from tokenizers import Tokenizer

    manifest = json.loads((prepared / MANIFEST).read_text())
    assert (manifest["format"], manifest["version"], manifest["dtype"]) == ("trainstack-corpus", 1, "uint16")
    assert manifest["tokenizer"] == {
        "file": "tokenizer.json", "sha256": prep.sha256_file(tokenizer), "vocab_size": 400
    }  # fmt: skip
    assert manifest["documents"] == len(VERSES) == sum(s["documents"] for s in manifest["shards"])
    tok = Tokenizer.from_file(str(prepared / "tokenizer.json"))
    eos = manifest["eos_id"]
    assert eos == tok.token_to_id("<|endoftext|>")
    for number, entry in enumerate(manifest["shards"]):
        shard = IndexedDataset.open(prepared / entry["name"])
        assert entry["bin_sha256"] == prep.sha256_file(paths(prepared / entry["name"])[0])
        assert entry["tokens"] == shard.num_tokens
        for j in range(len(shard)):
            ids = shard.sequence(j).tolist()
            assert ids[-1] == eos and eos not in ids[:-1]
            assert tok.decode(ids[:-1]) == VERSES[number + j * 3]  # document i in shard i mod 3


def test_sharding_does_not_depend_on_the_number_of_workers(
    prepared: Path, tokenizer: Path, tmp_path: Path
) -> None:
    split = tmp_path / "split"
    first = prep.prepare([SAMPLE], split, tokenizer, num_shards=3, worker=(0, 2))
    assert first.written == [0, 2] and first.manifest is None  # shard 1 is the other worker's
    env = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_COUNT": "2"}
    assert prep.main(["shards", "--output", str(split), "--tokenizer", str(tokenizer), "--num-shards", "3",
                      str(SAMPLE)], environ=env) == 0  # fmt: skip
    assert _files(split) == _files(prepared)


def test_a_rerun_skips_complete_shards_and_redoes_damaged_or_partial_ones(
    prepared: Path, tokenizer: Path, tmp_path: Path
) -> None:
    out = tmp_path / "kjv"
    prep.prepare([SAMPLE], out, tokenizer, num_shards=3)
    untouched = (out / "shard-00000.bin").stat().st_mtime_ns
    with (out / "shard-00001.bin").open("ab") as damaged:
        damaged.write(b"\0\0")
    (out / "shard-00002.json").unlink()  # killed after the rename, before the entry
    (out / "shard-00002.partial.bin").write_bytes(b"half")
    again = prep.prepare([SAMPLE], out, tokenizer, num_shards=3)
    assert (again.skipped, again.written) == ([0], [1, 2])
    assert (out / "shard-00000.bin").stat().st_mtime_ns == untouched
    assert {k: v for k, v in _files(out).items() if "partial" not in k} == _files(prepared)


def test_bad_input_is_refused_before_anything_is_written(tokenizer: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n\n')
    odd = tmp_path / "corpus.csv"
    odd.write_text("a,b\n")
    cases = [
        (([SAMPLE], out, tmp_path / "nope.json"), r"--tokenizer .*nope\.json: no such file"),
        (([empty], out, tokenizer), r"input .*empty\.jsonl: no documents"),
        (([odd], out, tokenizer), r"input .*corpus\.csv: unknown file type"),
        (([tmp_path / "missing"], out, tokenizer), r"input .*missing: no such file or directory"),
    ]
    for args, message in cases:
        with pytest.raises(prep.PrepareError, match=message):
            prep.prepare(*args)
        assert not out.exists()
    with pytest.raises(prep.PrepareError, match=r"kjv-genesis-1-12\.jsonl:1: no string field 'body'"):
        prep.prepare([SAMPLE], out, tokenizer, text_field="body")
    assert not out.exists()


def test_an_output_holding_another_tokenizers_shards_is_refused(
    prepared: Path, tokenizer: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.json"
    prep.train_tokenizer([SAMPLE], other, vocab_size=300)
    before = _files(prepared)
    with pytest.raises(prep.PrepareError, match=r"holds another tokenizer's shards .*tokenizer_sha256"):
        prep.prepare([SAMPLE], prepared, other, num_shards=3)
    with pytest.raises(prep.PrepareError, match=r"shards of another plan \(.* differs in num_shards\)"):
        prep.prepare([SAMPLE], prepared, tokenizer, num_shards=2)
    assert _files(prepared) == before


def test_the_cli_names_the_bad_input_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        prep.main(
            ["shards", "--output", str(tmp_path / "o"), "--tokenizer", str(tmp_path / "t.json"), str(SAMPLE)]
        )
    assert exited.value.code == 2 and "t.json: no such file" in capsys.readouterr().err


def test_the_tokenizer_cli_trains_the_same_file_twice(
    tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tok.json"
    assert prep.main(["tokenizer", "--vocab-size", "400", "--output", str(out), str(SAMPLE)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["sha256"] == prep.sha256_file(out) == prep.sha256_file(tokenizer)  # deterministic
    with pytest.raises(SystemExit):
        prep.main(["tokenizer", "--vocab-size", "100", "--output", str(out), str(SAMPLE)])
    assert "--vocab-size 100: at least 258" in capsys.readouterr().err


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("pyarrow") is not None, reason="pyarrow is installed here"
)
def test_parquet_without_pyarrow_is_refused_by_name(tokenizer: Path, tmp_path: Path) -> None:
    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    with pytest.raises(prep.PrepareError, match=r"rows\.parquet: reading Parquet needs the pyarrow package"):
        prep.prepare([tmp_path], tmp_path / "out", tokenizer)


PARQUET_CHECK = textwrap.dedent(
    """
    import json, sys
    import pyarrow, pyarrow.parquet
    from trainstack_train import prepare
    src, out, tok = sys.argv[1:4]
    texts = [json.loads(line)["text"] for line in open(src, encoding="utf-8")]
    pyarrow.parquet.write_table(pyarrow.table({"body": texts}), out + ".parquet", row_group_size=100)
    done = prepare.prepare([prepare.Path(out + ".parquet")], prepare.Path(out), prepare.Path(tok),
                           num_shards=3, text_field="body")
    print(json.dumps(done.manifest))
    """
)


@pytest.mark.slow
def test_parquet_rows_prepare_like_jsonl_lines(prepared: Path, tokenizer: Path, tmp_path: Path) -> None:
    python = _case_python(
        "TRAINSTACK_TORCHTITAN_PYTHON", "torchtitan-llama", "pyarrow", "tokenizers", "numpy"
    )
    env = dict(os.environ, PYTHONPATH=str(LIBRARY))
    proc = subprocess.run(
        [python, "-c", PARQUET_CHECK, str(SAMPLE), str(tmp_path / "pq"), str(tokenizer)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("shard-00000.bin", "shard-00001.idx", "shard-00002.bin"):
        assert (tmp_path / "pq" / name).read_bytes() == (prepared / name).read_bytes()


# Reading for training ----------------------------------------------------------------------------------


def _stream(directory: Path) -> np.ndarray:
    corpus = Corpus.open(directory)
    return np.concatenate([np.asarray(s.tokens, dtype=np.int64) for s in corpus.shards])


def test_samples_are_windows_of_the_shard_stream_each_once_per_epoch(prepared: Path) -> None:
    stream = _stream(prepared)
    sampler = Sampler(Corpus.open(prepared), seq_len=64, seed=3)
    assert sampler.num_samples == (stream.size - 1) // 64
    ids = sampler.take(sampler.num_samples)
    assert sorted(ids.tolist()) == list(range(sampler.num_samples)) and sampler.position == Position(1, 0)
    windows = np.lib.stride_tricks.sliding_window_view(stream, 65)[::64]  # window i starts at i * 64
    assert np.array_equal(sampler.rows(ids), windows[ids])  # across shard boundaries too
    assert not np.array_equal(sampler.order(0), sampler.order(1))  # a fresh order every epoch
    again = Sampler(Corpus.open(prepared), 64, seed=3)
    assert np.array_equal(again.order(0), sampler.order(0))
    assert not np.array_equal(Sampler(Corpus.open(prepared), 64, seed=4).order(0), sampler.order(0))


def test_a_restored_position_continues_with_the_next_batch_across_epochs(prepared: Path) -> None:
    whole = Sampler(Corpus.open(prepared), 64, seed=1)
    per_step = whole.num_samples // 3 + 1  # an odd size, so steps straddle the epoch boundary
    batches = [whole.next_batch(1, 2, per_step // 2) for _turn in range(8)]
    stopped = Sampler(Corpus.open(prepared), 64, seed=1)
    for _turn in range(5):
        stopped.next_batch(1, 2, per_step // 2)
    saved = json.loads(json.dumps(stopped.state()))
    assert saved["epoch"] >= 1  # the stop is past the first epoch's end
    resumed = Sampler(Corpus.open(prepared), 64, seed=1)
    resumed.restore(saved)
    for expected in batches[5:]:
        assert np.array_equal(resumed.next_batch(1, 2, per_step // 2), expected)
    with pytest.raises(ValueError, match="another seed"):
        Sampler(Corpus.open(prepared), 64, seed=2).restore(saved)
    with pytest.raises(ValueError, match="another seq_len"):
        Sampler(Corpus.open(prepared), 32, seed=1).restore(saved)


def test_a_shard_that_disagrees_with_the_manifest_is_refused(prepared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in _files(prepared).items():
        (copy / name).write_bytes(data)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["shards"][2]["tokens"] += 1
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"shard-00002 holds \(documents, tokens, dtype\)"):
        Corpus.open(copy)
    with pytest.raises(FileNotFoundError, match=r"no manifest\.json"):
        Corpus.open(tmp_path)


def test_a_position_saved_by_two_ranks_continues_on_one(prepared: Path) -> None:
    """The position counts the job's samples: 2 ranks x 3 rows, restored on 1 rank x 6, reads on unchanged."""
    straight = Sampler(Corpus.open(prepared), 64, seed=9)
    expected = straight.rows(straight.take(6 * 5))
    ranks = [Sampler(Corpus.open(prepared), 64, seed=9) for _turn in range(2)]
    read = [np.concatenate([ranks[r].next_batch(r, 2, 3) for r in range(2)]) for _turn in range(3)]
    assert ranks[0].state() == ranks[1].state()  # rank 0 alone saves it
    single = Sampler(Corpus.open(prepared), 64, seed=9)
    single.restore(ranks[0].state())
    read += [single.next_batch(0, 1, 6) for _turn in range(2)]
    assert np.array_equal(np.concatenate(read), expected)
