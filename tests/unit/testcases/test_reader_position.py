"""The data reader's position through the checkpointers of the cases that save with their framework's own:
torchtitan's (``torch.distributed.checkpoint`` with a stateful among its states), megatron/gpt's (its own
``checkpoint.save``/``load``, one ``torch.save`` file per rank) and DeepSpeed's client state (the case's
``client_state``/``restore``), and a checkpoint of each saved before the position was kept. Here on CPU
without the frameworks: the full runs, which need torchtitan and DeepSpeed, are the slow tests of
test_torchtitan_llama.py and test_deepspeed_zero3.py.

What counts: the batches after a restore are the ones an uninterrupted reader gives, and the position is the
saved one, not one recomputed from the step (a resume with another seed is refused by the position's check).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ds_llama import checkpoint as ds_checkpoint
from megatron_gpt import checkpoint as megatron_checkpoint
from titan_llama import resume as titan_resume
from torch.distributed.checkpoint.api import CheckpointException
from trainstack_train import prepare as prep
from trainstack_train.data import BatchSource, ReaderPosition

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
CPU = torch.device("cpu")
BATCH, SEQ, STEPS, SAVED_AT = 3, 32, 6, 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("corpus")
    prep.train_tokenizer([SAMPLE], root / "tok.json", vocab_size=400)
    prep.prepare([SAMPLE], root / "kjv", root / "tok.json", num_shards=2)
    return str(root / "kjv")


def source(corpus: str, rank: int = 0, world: int = 2, seed: int = 7) -> BatchSource:
    return BatchSource(corpus, 512, BATCH, SEQ, rank, world, seed)


def read(data: BatchSource, steps: range) -> list[torch.Tensor]:
    return [data.batch(step, CPU)[0] for step in steps]


def stopped(corpus: str, rank: int = 0) -> ReaderPosition:
    """A reader attached at a fresh start and read for SAVED_AT steps, as a run's is before it saves."""
    position = ReaderPosition()
    data = source(corpus, rank)
    position.attach(data, 0)
    read(data, range(SAVED_AT))
    return position


def resumed(corpus: str, position: ReaderPosition, rank: int = 0, seed: int = 7) -> list[torch.Tensor]:
    data = source(corpus, rank, seed=seed)
    position.attach(data, SAVED_AT)
    return read(data, range(SAVED_AT, STEPS))


@pytest.mark.parametrize("rank", [0, 1])
def test_through_dcp_as_torchtitan_saves_it(corpus: str, tmp_path: Path, rank: int) -> None:
    whole = read(source(corpus, rank), range(STEPS))
    dcp.save({"data_position": stopped(corpus, rank)}, checkpoint_id=tmp_path / "step-4")
    position = ReaderPosition()
    dcp.load({"data_position": position}, checkpoint_id=tmp_path / "step-4")
    assert position.loaded is not None and position.loaded["step"] == SAVED_AT
    assert position.loaded["index"] == SAVED_AT * BATCH * 2  # samples of both ranks
    after = resumed(corpus, position, rank)
    assert all(torch.equal(a, b) for a, b in zip(after, whole[SAVED_AT:], strict=True))
    assert not torch.equal(whole[SAVED_AT], whole[0])  # another batch than the first


def test_a_torchtitan_checkpoint_without_a_position_resumes_after_its_steps(
    corpus: str, tmp_path: Path
) -> None:
    """Saved before the position was kept: DCP refuses to load a state the checkpoint lacks, so the case reads
    DCP's metadata first and leaves that state out (torchtitan's ``exclude_from_loading``, which the loop
    sets); the reader then starts after the samples the saved steps read. The slow test of
    test_torchtitan_llama.py resumes such a checkpoint through torchtitan itself."""
    model = torch.nn.Linear(2, 2)
    dcp.save(
        {"model": model, "train_state": {"step": torch.tensor(SAVED_AT)}}, checkpoint_id=tmp_path / "step-4"
    )
    (tmp_path / "step-6").mkdir()  # a save cut short: no .metadata, not resumed (torchtitan's rule)
    found = titan_resume.latest(str(tmp_path))
    assert found == (SAVED_AT, tmp_path / "step-4")
    skip = titan_resume.absent(found[1])
    assert skip == [titan_resume.POSITION]
    position = ReaderPosition()
    states = {"model": model, titan_resume.POSITION: position}
    with pytest.raises(
        CheckpointException, match=r"Missing key in checkpoint state_dict: data_position\.position"
    ):
        dcp.load(states, checkpoint_id=found[1])
    dcp.load({name: state for name, state in states.items() if name not in skip}, checkpoint_id=found[1])
    assert position.loaded is None
    whole = read(source(corpus), range(STEPS))
    assert all(torch.equal(a, b) for a, b in zip(resumed(corpus, position), whole[SAVED_AT:], strict=True))


def test_a_torchtitan_checkpoint_with_a_position_leaves_out_nothing(corpus: str, tmp_path: Path) -> None:
    dcp.save({titan_resume.POSITION: stopped(corpus)}, checkpoint_id=tmp_path / "step-4")
    assert titan_resume.latest(str(tmp_path)) == (SAVED_AT, tmp_path / "step-4")
    assert titan_resume.absent(tmp_path / "step-4") == []
    assert titan_resume.latest(str(tmp_path / "none")) is None and titan_resume.latest("") is None


def test_through_megatron_gpts_checkpoint_files(corpus: str, tmp_path: Path) -> None:
    whole = read(source(corpus), range(STEPS))
    model = torch.nn.Linear(2, 2)
    states = {"model": model, megatron_checkpoint.POSITION: stopped(corpus)}
    megatron_checkpoint.save(tmp_path, SAVED_AT, states)
    position = ReaderPosition()
    step = megatron_checkpoint.load(
        tmp_path, SAVED_AT, {"model": model, megatron_checkpoint.POSITION: position}
    )
    assert step == SAVED_AT and position.loaded is not None
    assert all(torch.equal(a, b) for a, b in zip(resumed(corpus, position), whole[SAVED_AT:], strict=True))


def test_a_megatron_checkpoint_without_a_position_resumes_after_its_steps(
    corpus: str, tmp_path: Path
) -> None:
    """Saved before the position was kept: the reader starts after the samples the saved steps read."""
    model = torch.nn.Linear(2, 2)
    megatron_checkpoint.save(tmp_path, SAVED_AT, {"model": model})
    position = ReaderPosition()
    megatron_checkpoint.load(tmp_path, SAVED_AT, {"model": model, megatron_checkpoint.POSITION: position})
    assert position.loaded is None
    assert all(
        torch.equal(a, b)
        for a, b in zip(resumed(corpus, position), read(source(corpus), range(STEPS))[SAVED_AT:], strict=True)
    )


def test_through_deepspeeds_client_state(corpus: str, tmp_path: Path) -> None:
    """DeepSpeed pickles the client state into its model-states file; torch.save is that pickling."""
    whole = read(source(corpus), range(STEPS))
    torch.save(ds_checkpoint.client_state(SAVED_AT, stopped(corpus)), tmp_path / "client.pt")
    saved = torch.load(tmp_path / "client.pt", weights_only=False)
    position = ReaderPosition()
    assert ds_checkpoint.restore(saved, position) == SAVED_AT
    assert position.loaded is not None and position.loaded["index"] == SAVED_AT * BATCH * 2
    assert all(torch.equal(a, b) for a, b in zip(resumed(corpus, position), whole[SAVED_AT:], strict=True))


def test_the_restored_position_is_the_saved_one_and_checked(corpus: str, tmp_path: Path) -> None:
    """A position recomputed from the step would accept another seed; the saved one names it."""
    dcp.save({"data_position": stopped(corpus)}, checkpoint_id=tmp_path / "step-4")
    position = ReaderPosition()
    dcp.load({"data_position": position}, checkpoint_id=tmp_path / "step-4")
    with pytest.raises(ValueError, match=r"data position was saved with another seed \(seed=7\)"):
        resumed(corpus, position, seed=8)


def test_synthetic_data_saves_no_position(tmp_path: Path) -> None:
    position = ReaderPosition()
    position.attach(BatchSource("synthetic", 512, BATCH, SEQ, 0, 1, 7), 0)
    assert position.state_dict() == {"position": "null"}
    dcp.save({"data_position": position}, checkpoint_id=tmp_path / "c")
    loaded = ReaderPosition()
    dcp.load({"data_position": loaded}, checkpoint_id=tmp_path / "c")
    assert loaded.loaded is None
