"""Token data: byte tokenizer, the prepared on-disk formats, deterministic batches, training and resuming."""

import json
from pathlib import Path

import numpy as np
import prepare_data
import pytest
import torch
from trainstack_train.config import TrainConfig
from trainstack_train.data import FORMAT, BatchSource, ByteTokenizer, TokenFile, prepare
from trainstack_train.loop import train
from trainstack_train.prepare import prepare as prepare_corpus
from trainstack_train.prepare import train_tokenizer

TEXT = "Grüße aus dem Labor: naïve café ☕\n" * 40


def test_byte_tokenizer_round_trips_any_text():
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert max(ids) < 256 and tok.decode(ids) == TEXT
    assert tok.decode([tok.bos_id, *ids, tok.eos_id]) == TEXT


def test_prepare_cli_writes_the_documented_format(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "b.txt").write_text("zwei", encoding="utf-8")
    out = tmp_path / "data"
    assert prepare_data.main(["--output", str(out), str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == FORMAT and meta["dtype"] == "uint16" and meta["documents"] == 2
    tokens = np.fromfile(out / "tokens.bin", dtype="<u2")
    encoded = len(TEXT.encode()) + 1 + 4 + 1
    assert meta["num_tokens"] == tokens.size == encoded
    assert tokens[len(TEXT.encode())] == ByteTokenizer.eos_id and tokens[-1] == ByteTokenizer.eos_id


def test_prepare_names_a_missing_input(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        prepare([tmp_path / "nope.txt"], tmp_path / "out")


def test_token_file_checks_meta_against_the_file(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    prepare([tmp_path / "a.txt"], tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    meta["num_tokens"] += 1
    (tmp_path / "d" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"tokens\.bin holds"):
        TokenFile.open(tmp_path / "d")
    with pytest.raises(FileNotFoundError, match="prepare_data"):
        TokenFile.open(tmp_path / "empty")


def test_file_batches_are_windows_disjoint_across_ranks(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    prepare([tmp_path / "a.txt"], tmp_path / "d")
    stream = torch.from_numpy(np.fromfile(tmp_path / "d" / "tokens.bin", dtype="<u2").astype(np.int64))
    r0 = BatchSource(str(tmp_path / "d"), 512, 2, 16, rank=0, world=2, seed=0)
    r1 = BatchSource(str(tmp_path / "d"), 512, 2, 16, rank=1, world=2, seed=0)
    inputs, targets = r0.batch(0, torch.device("cpu"))
    assert torch.equal(inputs[0], stream[0:16]) and torch.equal(targets[0], stream[1:17])
    assert torch.equal(r1.batch(0, torch.device("cpu"))[0][0], stream[32:48])  # rank 1 starts after rank 0
    assert torch.equal(r0.batch(3, torch.device("cpu"))[0], r0.batch(3, torch.device("cpu"))[0])


def test_synthetic_batches_depend_on_step_and_rank_only():
    a = BatchSource("synthetic", 512, 4, 32, rank=0, world=2, seed=5)
    b = BatchSource("synthetic", 512, 4, 32, rank=1, world=2, seed=5)
    x0, y0 = a.batch(7, torch.device("cpu"))
    assert torch.equal(x0, BatchSource("synthetic", 512, 4, 32, 0, 2, 5).batch(7, torch.device("cpu"))[0])
    assert not torch.equal(x0, b.batch(7, torch.device("cpu"))[0])
    assert torch.equal(x0[:, 1:], y0[:, :-1])


def test_vocabulary_too_large_for_the_model_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    prepare([tmp_path / "a.txt"], tmp_path / "d")
    with pytest.raises(ValueError, match="--data vocabulary"):
        BatchSource(str(tmp_path / "d"), 200, 2, 16, 0, 1, 0)


def test_training_from_a_prepared_file(gloo_world, tmp_path):
    (tmp_path / "a.txt").write_text(TEXT * 5)
    prepare([tmp_path / "a.txt"], tmp_path / "d")
    cfg = TrainConfig(
        config="tiny", data=str(tmp_path / "d"), steps=8, batch_size=4, seq_len=32, compile="false"
    )
    cfg.validate()
    summary = train(cfg)
    assert summary.final_loss < summary.first_loss


def test_a_resumed_run_on_a_prepared_corpus_reads_the_same_batches_and_losses(
    gloo_world, tmp_path, monkeypatch
):
    """6 steps straight, and 3 + 3 across a checkpoint: the same rows after the restart, the same losses bit
    for bit; the checkpoint holds the reader's position (12 samples of epoch 0 after 3 steps of 4 rows)."""
    sample = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
    train_tokenizer([sample], tmp_path / "tok.json", vocab_size=400)
    prepare_corpus([sample], tmp_path / "corpus", tmp_path / "tok.json", num_shards=2)
    seen: list[tuple[int, torch.Tensor]] = []
    real = BatchSource.batch

    def recorded(self, step, device):  # the real batch, kept for comparison
        inputs, targets = real(self, step, device)
        seen.append((step, inputs.clone()))
        return inputs, targets

    monkeypatch.setattr(BatchSource, "batch", recorded)
    base = {"config": "tiny", "data": str(tmp_path / "corpus"), "steps": 6, "batch_size": 4, "seq_len": 32}
    base |= {"compile": "false", "device": "cpu", "warmup_steps": 2}
    whole = train(TrainConfig(**base))
    straight, seen[:] = list(seen), []
    ckpt = {"checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_every": 3}
    first = train(TrainConfig(**base, **ckpt, max_steps_this_run=3))
    marker = json.loads((tmp_path / "ckpt" / "step-00000003" / "train_state.json").read_text())
    assert {k: marker["data"][k] for k in ("step", "epoch", "index")} == {"step": 3, "epoch": 0, "index": 12}
    seen[:] = []
    second = train(TrainConfig(**base, **ckpt))
    assert [step for step, _rows in seen] == [3, 4, 5]
    assert all(torch.equal(rows, straight[step][1]) for step, rows in seen)
    # Every step read other rows.
    assert len({tuple(rows.flatten().tolist()) for _step, rows in straight}) == 6
    losses = whole.extra["losses"]
    assert first.extra["losses"] == losses[:3] and second.extra["losses"] == losses[3:]  # bitwise


def test_a_prepared_corpus_is_checked_against_the_model_and_read_in_step_order(tmp_path):
    sample = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
    train_tokenizer([sample], tmp_path / "tok.json", vocab_size=400)
    prepare_corpus([sample], tmp_path / "corpus", tmp_path / "tok.json")
    with pytest.raises(ValueError, match=r"--data vocabulary \(400\) exceeds the model's \(300\)"):
        BatchSource(str(tmp_path / "corpus"), 300, 2, 16, 0, 1, 0)
    source = BatchSource(str(tmp_path / "corpus"), 512, 2, 16, 0, 1, 0)
    source.batch(0, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="step 2 asked, the reader stands at step 1"):
        source.batch(2, torch.device("cpu"))
    # A checkpoint saved on other data holds no position: start after the samples those steps read.
    resumed = BatchSource(str(tmp_path / "corpus"), 512, 2, 16, 0, 1, 0)
    resumed.resume(1, None)
    assert torch.equal(resumed.batch(1, torch.device("cpu"))[0], source.batch(1, torch.device("cpu"))[0])
