"""jax/llama: its argument rules and torchrun's variables read without jax (fast), the shared library's parts
importable without torch, and on CPU with jax itself (slow: jaxlib and orbax live in the slow wheelhouse)
that the tiny shape learns deterministically with pytorch/fsdp's metric lines, and that orbax checkpoints
resume a 2-process FSDP run (gloo between the processes) on its uninterrupted curve.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import free_port
from tests.unit.testcases.case_runs import LIBRARY, imported_modules, run_on_cpu, slow_python

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "jax" / "llama"
ENTRY = CASE / "train.py"
MANIFEST = yaml.safe_load((CASE / "testcase.yml").read_text())


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            ["--dp", "2", "--fsdp", "2"],
            {"WORLD_SIZE": "2"},
            "--dp 2 x --fsdp 2 = 4 devices, but the job has 2 processes",
        ),
        (["--dp", "3"], {"WORLD_SIZE": "2"}, "--dp 3 x --fsdp 1 = 3 devices, but the job has 2 processes"),
        (["--fsdp", "4"], {}, "--dp 1 x --fsdp 4 = 4 devices, but the job has 1 processes"),
        (
            ["--fsdp", "3"],
            {"WORLD_SIZE": "3"},
            "--fsdp 3 must divide tiny's sharded dimensions {'dim': 64, 'ffn_dim': 192, 'vocab_size': 512}: "
            "['dim', 'vocab_size'] do not split evenly",
        ),
        (["--config", "llama3_70b"], {}, "--config 'llama3_70b' is unknown"),
        (["--attention", "cudnn", "--device", "cpu"], {}, "--attention cudnn needs a GPU"),
        (["--compute-dtype", "fp16"], {}, "--compute-dtype must be one of"),
        (["--checkpoint-every", "5"], {}, "--checkpoint-every needs --checkpoint-dir"),
        (["--fsdp", "two"], {}, "--fsdp must be auto or a degree >= 1"),
        (["--seq-len", "2048"], {}, "--seq-len 2048 exceeds tiny's max_seq_len 1024"),
        (["--peak-tflops", "0"], {}, "--peak-tflops must be a finite number > 0"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(refusal, argv, environ, expected):
    from jax_llama.config import parse_args

    assert expected in refusal(parse_args, argv, environ)


def test_unknown_options_are_refused_by_name(refusal):
    from jax_llama.config import parse_args

    assert "unrecognized arguments: --tensor-parallel 2" in refusal(parse_args, ["--tensor-parallel", "2"])


def test_paths_keep_their_case_while_switches_take_the_launchers_spelling():
    from jax_llama.config import parse_args

    argv = ["--checkpoint-dir", "/fsx/Run1", "--data", "/fsx/Tokens", "--summary-json", "/fsx/Out/S.json"]
    cfg = parse_args([*argv, "--device", " CPU "], {})
    assert (cfg.checkpoint_dir, cfg.data, cfg.summary_json) == ("/fsx/Run1", "/fsx/Tokens", "/fsx/Out/S.json")
    assert cfg.device == "cpu"


def test_valid_meshes_fill_the_world():
    from jax_llama.config import parse_args

    cfg = parse_args(["--dp", "2"], {"WORLD_SIZE": "8"})
    assert (cfg.dp, cfg.fsdp_degree(8)) == (2, 4)
    cfg = parse_args(["--config", "llama3_1_8b", "--seq-len", "2048"], {"WORLD_SIZE": "16"})
    assert cfg.fsdp_degree(16) == 16


def test_torchruns_variables_name_the_process_and_the_coordinator():
    from jax_llama.launch import processes

    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    env |= {"MASTER_ADDR": "ts-compute1", "MASTER_PORT": "29500"}
    procs = processes(env)
    assert (procs.rank, procs.world_size, procs.local_rank, procs.nodes) == (3, 4, 1, 2)
    assert procs.coordinator == "ts-compute1:29501" and not procs.is_main
    assert processes(env, coordinator_port=7000).coordinator == "ts-compute1:7000"
    alone = processes({})
    assert (alone.world_size, alone.coordinator, alone.is_main) == (1, None, True)
    with pytest.raises(RuntimeError, match="start it with torchrun"):
        processes({"WORLD_SIZE": "2"})


def test_validate_only_answers_without_jax_or_torch():
    """What the launcher runs on the submit host: the rules, and neither jax nor torch imported."""
    env = dict(os.environ, WORLD_SIZE="4")
    ok, names = imported_modules(str(ENTRY), "--dp", "2", "--validate-only", "true", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "the arguments hold for 4 process(es)" in ok.stdout
    assert "trainstack_train.config" in names and not {"jax", "torch"} & names
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--dp", "3", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--dp 3 x --fsdp 1 = 3 devices, but the job has 4 processes" in bad.stderr


def test_the_shared_librarys_metrics_and_token_files_import_without_torch():
    """The parts jax/llama shares with pytorch/fsdp: the FLOP count, metric line, summary, token reader."""
    code = "import trainstack_train.metrics, trainstack_train.tokens"
    env = dict(os.environ, PYTHONPATH=str(LIBRARY))
    proc, names = imported_modules("-c", code, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"trainstack_train.metrics", "trainstack_train.tokens"} <= names and "torch" not in names


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    assert MANIFEST["include"] == ["common/trainstack_train"]
    assert MANIFEST["validate_option"] == "validate-only"
    assert MANIFEST["wheelhouse"] == "slow"
    from jax_llama.config import CONFIGS

    assert MANIFEST["configs"] == list(CONFIGS)


def test_the_parameter_count_is_pytorch_fsdps():
    """The closed form the FLOP formula uses (pytorch/fsdp's and megatron/gpt's counts of the 1B and 8B)."""
    from jax_llama.shapes import num_params
    from trainstack_train.config import MODEL_CONFIGS

    assert num_params(MODEL_CONFIGS["llama3_2_1b"]) == 1_235_814_400
    assert num_params(MODEL_CONFIGS["llama3_1_8b"]) == 8_030_261_248


# ---------------------------------------------------------------- with jax (slow)


@pytest.fixture(scope="module")
def jax_python() -> str:
    """A Python with the test case's requirements: its variable, else a slow-wheelhouse virtualenv."""
    return slow_python("TRAINSTACK_JAX_PYTHON", MANIFEST)


def run(python: str, tmp_path: Path, name: str, *args: str, procs: int = 1) -> dict:
    """The entrypoint on CPU (torchrun for several processes); returns the summary with the metric lines.

    Several processes get a coordinator port that was free a moment ago: the default, torchrun's port + 1,
    may be held by another test's connection on a busy host, and JAX's coordinator then fails to bind.
    """
    if procs > 1:
        args = (*args, "--coordinator-port", str(free_port()))
    return run_on_cpu(python, ENTRY, tmp_path / f"{name}.json", *args, procs=procs)


@pytest.mark.slow
def test_tiny_learns_deterministically_with_pytorch_fsdps_lines(jax_python, tmp_path):
    first = run(jax_python, tmp_path, "a", "--steps", "12")
    second = run(jax_python, tmp_path, "b", "--steps", "12")
    assert first["losses"] == second["losses"]
    assert first["final_loss"] < first["first_loss"] - 0.5, first["losses"]
    assert [line["step"] for line in first["lines"]] == list(range(1, 13))
    assert all(set(line) == set(MANIFEST["metrics"]) for line in first["lines"])
    assert first["lines"][-1]["tokens_per_s"] is None and first["lines"][2]["tflops_per_gpu"] > 0
    assert (first["testcase"], first["jax"], first["compute_dtype"]) == ("jax/llama", "0.10.2", "fp32")
    assert first["mfu"] is None and first["mfu_note"].startswith("peak unknown")
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.metrics import flops_per_token

    assert first["flops_per_token"] == flops_per_token(MODEL_CONFIGS["tiny"], first["params"], 128)


@pytest.mark.slow
def test_orbax_checkpoints_resume_a_two_process_fsdp_run_on_its_curve(jax_python, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    whole = run(jax_python, tmp_path, "whole", "--steps", "6", procs=2)
    common = ("--steps", "6", "--checkpoint-dir", ckpt, "--checkpoint-every", "3")
    head = run(jax_python, tmp_path, "head", *common, "--max-steps-this-run", "3", procs=2)
    assert sorted(p.name for p in Path(ckpt).iterdir()) == ["step_00000003"]
    tail = run(jax_python, tmp_path, "tail", *common, procs=2)
    assert (head["dp"], head["fsdp"], head["world_size"]) == (1, 2, 2)
    assert tail["resumed_from_step"] == 3 and tail["steps_this_run"] == 3
    assert head["losses"] + tail["losses"] == whole["losses"]
    assert whole["losses"][-1] < whole["losses"][0]
