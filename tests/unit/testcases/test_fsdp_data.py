"""Token data: byte tokenizer, the prepared on-disk format, deterministic batches, training from a file."""

import json

import numpy as np
import prepare_data
import pytest
import torch
from trainstack_train.config import TrainConfig
from trainstack_train.data import FORMAT, BatchSource, ByteTokenizer, TokenFile, prepare
from trainstack_train.loop import train

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
