"""torchtitan/llama: its argument rules (fast, no torch), and on CPU with torchtitan itself (slow: its
dependencies live in the slow wheelhouse) that the tiny shape learns deterministically, that the metric lines
are pytorch/fsdp's, and that torchtitan's checkpoints resume a 2-process FSDP run on the uninterrupted curve,
on synthetic data and on a prepared corpus (the reader's position travels in the checkpoint; a checkpoint
saved before it did resumes from its step).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.testcases.case_runs import imported_modules, prepared_corpus, run_on_cpu, slow_python

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "torchtitan" / "llama"
ENTRY = CASE / "train.py"
MANIFEST = yaml.safe_load((CASE / "testcase.yml").read_text())


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            ["--tp", "3"],
            {"WORLD_SIZE": "3"},
            "--tp 3 must divide tiny's attention heads (n_heads 4, n_kv_heads 2)",
        ),
        (["--fsdp", "2", "--tp", "2"], {"WORLD_SIZE": "2"}, "= 4 ranks, but the job has 2 processes"),
        (["--tp", "2", "--pp", "2"], {"WORLD_SIZE": "2"}, "--fsdp 1 x --tp 2 x --pp 2 = 4 ranks"),
        (["--pp", "3"], {"WORLD_SIZE": "3"}, "--pp 3 exceeds tiny's 2 layers"),
        (["--seq-len", "127", "--tp", "2"], {"WORLD_SIZE": "2"}, "--seq-len 127 must be divisible by --tp 2"),
        (
            ["--precision", "fp8"],
            {"TRAINSTACK_GPU_ARCH": "sm_80"},
            "--precision fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer, sm_89+); "
            "this GPU is sm_80",
        ),
        (["--precision", "fp8", "--device", "cpu"], {}, "this run's device is cpu"),
        (
            ["--config", "llama3_2_1b", "--seq-len", "2048"],
            {"WORLD_SIZE": "2"},
            "--config llama3_2_1b ties the output layer to the embedding",
        ),
        (["--config", "llama3_70b"], {}, "--config 'llama3_70b' is unknown"),
        (["--checkpoint-every", "5"], {}, "--checkpoint-every needs --checkpoint-dir"),
        (["--fsdp", "two"], {}, "--fsdp must be auto or a degree >= 1"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(refusal, argv, environ, expected):
    from titan_llama.config import parse_args

    assert expected in refusal(parse_args, argv, environ)


def test_unknown_options_are_refused_by_name(refusal):
    from titan_llama.config import parse_args

    assert "unrecognized arguments: --tensor-parallel 2" in refusal(parse_args, ["--tensor-parallel", "2"])


def test_valid_degrees_fill_the_world():
    from titan_llama.config import parse_args

    cfg = parse_args(["--tp", "2"], {"WORLD_SIZE": "8"})
    assert (cfg.fsdp_degree(8), cfg.tp, cfg.pp) == (4, 2, 1)
    cfg = parse_args(
        ["--precision", "fp8", "--fsdp", "2", "--pp", "2"],
        {"WORLD_SIZE": "4", "TRAINSTACK_GPU_ARCH": "sm_90"},
    )
    assert cfg.precision == "fp8" and cfg.fsdp_degree(4) == 2


def test_validate_only_answers_without_torch():
    """What the launcher runs on the submit host: the rules, and no torch import (fast, no GPU needed)."""
    env = dict(os.environ, WORLD_SIZE="4")
    ok, imported = imported_modules(str(ENTRY), "--tp", "2", "--validate-only", "true", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "the arguments hold for 4 process(es)" in ok.stdout
    assert "trainstack_train.config" in imported and "torch" not in imported
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--tp", "3", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--tp 3 must divide tiny's attention heads" in bad.stderr


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    assert MANIFEST["include"] == ["common/trainstack_train"]
    assert MANIFEST["validate_option"] == "validate-only"
    assert MANIFEST["wheelhouse"] == "slow"
    from titan_llama.config import CONFIGS

    assert MANIFEST["configs"] == list(CONFIGS)


# ---------------------------------------------------------------- with torchtitan (slow)


@pytest.fixture(scope="module")
def titan_python() -> str:
    """A Python with the test case's requirements: its variable, else a slow-wheelhouse virtualenv."""
    return slow_python("TRAINSTACK_TORCHTITAN_PYTHON", MANIFEST)


def run(python: str, tmp_path: Path, name: str, *args: str, procs: int = 1) -> dict:
    """The entrypoint on CPU (torchrun for several processes); returns the summary with the metric lines."""
    return run_on_cpu(python, ENTRY, tmp_path / f"{name}.json", *args, procs=procs)


@pytest.mark.slow
def test_tiny_learns_deterministically_with_pytorch_fsdps_lines(titan_python, tmp_path):
    first = run(titan_python, tmp_path, "a", "--steps", "12")
    second = run(titan_python, tmp_path, "b", "--steps", "12")
    assert first["losses"] == second["losses"]
    assert first["final_loss"] < first["first_loss"] - 0.5, first["losses"]
    assert [line["step"] for line in first["lines"]] == list(range(1, 13))
    assert all(set(line) == set(MANIFEST["metrics"]) for line in first["lines"])
    assert first["lines"][-1]["tokens_per_s"] is None and first["lines"][2]["tflops_per_gpu"] > 0
    assert first["testcase"] == "torchtitan/llama" and first["torchtitan"] == "0.2.2"
    assert first["mfu"] is None and first["mfu_note"].startswith("peak unknown")
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.metrics import flops_per_token

    assert first["flops_per_token"] == flops_per_token(MODEL_CONFIGS["tiny"], first["params"], 128)


@pytest.mark.slow
def test_checkpoints_resume_a_two_process_fsdp_run_on_its_curve(titan_python, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    whole = run(titan_python, tmp_path, "whole", "--steps", "6", procs=2)
    common = ("--steps", "6", "--checkpoint-dir", ckpt, "--checkpoint-every", "3")
    head = run(titan_python, tmp_path, "head", *common, "--max-steps-this-run", "3", procs=2)
    assert sorted(p.name for p in Path(ckpt).iterdir()) == ["step-3"]
    tail = run(titan_python, tmp_path, "tail", *common, procs=2)
    assert (head["fsdp"], head["world_size"]) == (2, 2)
    assert tail["resumed_from_step"] == 3 and tail["steps_this_run"] == 3
    assert head["losses"] + tail["losses"] == whole["losses"]


@pytest.mark.slow
def test_a_resume_on_a_prepared_corpus_reads_the_uninterrupted_runs_batches(titan_python, tmp_path):
    """Stopped after 3 of 6 steps and launched again: the same next batches, so the same losses bit for bit;
    the checkpoint holds the reader's position (3 steps of 2 ranks' 4 rows), as torchtitan saved it."""
    import torch.distributed.checkpoint as dcp
    from trainstack_train.data import ReaderPosition

    data = ("--data", str(prepared_corpus(tmp_path)), "--steps", "6", "--batch-size", "4", "--seq-len", "32")
    ckpt = tmp_path / "ckpt"
    whole = run(titan_python, tmp_path, "whole", *data, procs=2)
    common = (*data, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "3")
    head = run(titan_python, tmp_path, "head", *common, "--max-steps-this-run", "3", procs=2)
    position = ReaderPosition()
    dcp.load({"data_position": position}, checkpoint_id=ckpt / "step-3")
    assert position.loaded is not None
    assert {k: position.loaded[k] for k in ("step", "epoch", "index")} == {"step": 3, "epoch": 0, "index": 24}
    tail = run(titan_python, tmp_path, "tail", *common, procs=2)
    assert tail["resumed_from_step"] == 3 and tail["steps_this_run"] == 3
    assert len(set(whole["losses"])) == 6
    assert head["losses"] + tail["losses"] == whole["losses"]


def without_position(checkpoint: Path, work: Path) -> None:
    """Rewrite a DCP checkpoint without ``data_position``, as the case saved it before it kept the reader's
    position (DCP's own converters: the whole checkpoint into one file and back, less that state)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp

    whole = work / "whole.pt"
    dcp_to_torch_save(checkpoint, whole)
    state = torch.load(whole, weights_only=False)
    del state["data_position"]
    torch.save(state, whole)
    shutil.rmtree(checkpoint)
    torch_save_to_dcp(whole, checkpoint)


@pytest.mark.slow
def test_a_checkpoint_saved_before_the_position_was_kept_resumes_from_its_step(titan_python, tmp_path):
    """Without ``data_position`` (DCP alone would refuse the missing key) the run resumes, and says so: the
    reader starts after the samples the saved steps read, where the uninterrupted run's reader stood."""
    from titan_llama import resume

    data = ("--data", str(prepared_corpus(tmp_path)), "--steps", "6", "--batch-size", "4", "--seq-len", "32")
    ckpt = tmp_path / "ckpt"
    whole = run(titan_python, tmp_path, "whole", *data, procs=2)
    common = (*data, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "3")
    head = run(titan_python, tmp_path, "head", *common, "--max-steps-this-run", "3", procs=2)
    without_position(ckpt / "step-3", tmp_path)
    assert resume.absent(ckpt / "step-3") == ["data_position"]
    tail = run(titan_python, tmp_path, "tail", *common, procs=2)
    assert tail["resumed_from_step"] == 3 and tail["steps_this_run"] == 3
    assert resume.derived_position_note(ckpt / "step-3", 3) in tail["stderr"]
    assert "derived from step 3" in tail["stderr"]
    assert head["losses"] + tail["losses"] == whole["losses"]
