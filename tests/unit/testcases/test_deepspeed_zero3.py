"""deepspeed/zero3: its argument rules and DeepSpeed config (fast, no torch, no DeepSpeed), its checkpoint
marker, and (slow: DeepSpeed lives in the slow wheelhouse) DeepSpeed's ZeRO on CPU across two gloo processes:
every stage trains, the tiny shape learns deterministically with pytorch/fsdp's metric lines, and a run
stopped after its checkpoint resumes on the uninterrupted curve bit for bit, on synthetic data and on a
prepared corpus (the reader's position travels in DeepSpeed's client state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import free_port
from tests.unit.testcases.case_runs import (
    LIBRARY,
    imported_modules,
    metric_lines,
    prepared_corpus,
    slow_python,
)

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "deepspeed" / "zero3"
FSDP = ROOT / "testcases" / "pytorch" / "fsdp"
ENTRY = CASE / "train.py"
MANIFEST = yaml.safe_load((CASE / "testcase.yml").read_text())
sys.path.insert(0, str(CASE))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--zero-stage", "4"],
            "--zero-stage 4 is not a ZeRO stage: DeepSpeed has 0 (off), 1 (optimizer state",
        ),
        (["--zero-stage", "-1"], "--zero-stage -1 is not a ZeRO stage"),
        (
            ["--zero-stage", "0", "--offload-optimizer", "cpu"],
            "--offload-optimizer cpu needs --zero-stage 1, 2 or 3, got 0",
        ),
        (
            ["--zero-stage", "2", "--offload-param", "cpu"],
            "--offload-param cpu needs --zero-stage 3, got 2: only stage 3 partitions the parameters",
        ),
        (["--offload-optimizer", "nvme"], "--offload-optimizer must be one of ('none', 'cpu'), got 'nvme'"),
        (
            ["--device", "cpu", "--offload-optimizer", "cpu"],
            "--offload-optimizer/--offload-param cpu needs an accelerator",
        ),
        (["--optimizer", "lamb"], "--optimizer must be one of ('torch', 'deepspeed'), got 'lamb'"),
        (["--mixed-precision", "fp16"], "--mixed-precision must be one of ('auto', 'bf16', 'fp32')"),
        (["--config", "small"], "--config 'small' is unknown"),
        (["--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint-dir"),
        (["--seq-len", "2048"], "--seq-len 2048 exceeds tiny's max_seq_len 1024"),
        (["--ac", "some"], "--ac must be one of ('none', 'selective', 'full')"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(refusal, argv, expected):
    from ds_llama.config import parse_args

    assert expected in refusal(parse_args, argv)


def test_unknown_options_are_refused_by_name(refusal):
    from ds_llama.config import parse_args

    assert "unrecognized arguments: --zero-optimization 3" in refusal(
        parse_args, ["--zero-optimization", "3"]
    )


def test_the_deepspeed_config_says_what_the_options_mean():
    from ds_llama.config import deepspeed_config, parse_args

    cfg = parse_args(["--batch-size", "4", "--grad-clip", "0.5"], {})
    gpu = deepspeed_config(cfg, 16, "cuda")
    assert (
        gpu["train_batch_size"],
        gpu["train_micro_batch_size_per_gpu"],
        gpu["gradient_accumulation_steps"],
    ) == (
        64,
        4,
        1,
    )
    assert gpu["bf16"] == {"enabled": True} and gpu["gradient_clipping"] == 0.5
    assert gpu["zero_optimization"] == {"stage": 3, "overlap_comm": True, "contiguous_gradients": True}
    # Our optimizer and schedule are handed over built: the config names neither.
    assert "optimizer" not in gpu and "scheduler" not in gpu and "zero_force_ds_cpu_optimizer" not in gpu
    assert deepspeed_config(cfg, 2, "cpu")["bf16"] == {"enabled": False}
    forced = parse_args(["--mixed-precision", "bf16"], {})
    assert deepspeed_config(forced, 2, "cpu")["bf16"] == {"enabled": True}
    assert deepspeed_config(parse_args(["--zero-stage", "0"], {}), 1, "cuda")["zero_optimization"] == {
        "stage": 0
    }


def test_offloading_and_deepspeeds_optimizer_in_the_config():
    from ds_llama.config import deepspeed_config, parse_args

    offload = deepspeed_config(parse_args(["--zero-stage", "1", "--offload-optimizer", "cpu"], {}), 8, "cuda")
    assert offload["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    # torch's AdamW on the CPU: DeepSpeed must be told that a client optimizer there is meant.
    assert offload["zero_force_ds_cpu_optimizer"] is False
    both = parse_args(
        ["--offload-optimizer", "cpu", "--offload-param", "cpu", "--optimizer", "deepspeed"], {}
    )
    config = deepspeed_config(both, 8, "cuda")
    assert config["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert config["optimizer"]["type"] == "AdamW" and config["optimizer"]["params"]["betas"] == [0.9, 0.95]
    assert "zero_force_ds_cpu_optimizer" not in config


def test_validate_only_answers_without_torch():
    """What the launcher runs on the submit host: the rules, and no torch or DeepSpeed import (fast)."""
    env = dict(os.environ, WORLD_SIZE="4")
    ok, imported = imported_modules(str(ENTRY), "--zero-stage", "2", "--validate-only", "true", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "deepspeed/zero3: the arguments hold for 4 process(es)" in ok.stdout
    assert "ds_llama.config" in imported and "trainstack_train.config" in imported
    assert "torch" not in imported and "deepspeed" not in imported
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--zero-stage", "4", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--zero-stage 4 is not a ZeRO stage" in bad.stderr


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    assert MANIFEST["name"] == "deepspeed/zero3" and MANIFEST["framework"] == "deepspeed"
    assert MANIFEST["include"] == ["common/trainstack_train"]
    assert MANIFEST["validate_option"] == "validate-only"
    assert MANIFEST["wheelhouse"] == "slow"
    assert "deepspeed==0.19.8" in MANIFEST["requirements"] and "torch==2.13.0" in MANIFEST["requirements"]
    from ds_llama.config import CONFIGS

    assert MANIFEST["configs"] == list(CONFIGS)


def test_latest_names_only_a_published_checkpoint(tmp_path):
    """A tag is published by renaming a whole file; a marker naming a missing directory is no checkpoint."""
    from ds_llama import checkpoint

    assert checkpoint.latest_tag(tmp_path) is None
    (tmp_path / "step-00000004").mkdir()
    assert checkpoint.latest_tag(tmp_path) is None  # written, never published: a run killed mid-save
    checkpoint.publish(tmp_path, checkpoint.tag(4))
    assert checkpoint.latest_tag(tmp_path) == "step-00000004"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000004"]
    checkpoint.publish(tmp_path, checkpoint.tag(8))
    assert checkpoint.latest_tag(tmp_path) is None  # step 8's directory is gone


# ---------------------------------------------------------------- with DeepSpeed (slow)


@pytest.fixture(scope="module")
def deepspeed_python() -> str:
    """A Python with the test case's requirements: its variable, else a slow-wheelhouse virtualenv."""
    return slow_python("TRAINSTACK_DEEPSPEED_PYTHON", MANIFEST, needs="deepspeed-0.19.8-*.whl")


def cpu_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "DS_ACCELERATOR"):
        env.pop(key, None)
    env["PYTHONPATH"] = str(LIBRARY)
    return env


def torchrun(python: str, summary: Path, *args: str) -> subprocess.Popen[str]:
    """Two gloo processes of the entrypoint, as the launcher starts them (torchrun, c10d rendezvous)."""
    argv = [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2"]
    argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", str(ENTRY)]
    argv += ["--summary-json", str(summary), *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cpu_env())


def finished(proc: subprocess.Popen[str], summary: Path) -> tuple[dict, list[dict]]:
    """The run's summary and its metric lines, after it exited 0."""
    out, _err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    return json.loads(summary.read_text()), metric_lines(out)


@pytest.fixture(scope="module")
def resumed(deepspeed_python, tmp_path_factory) -> dict[str, tuple[dict, list[dict]]]:
    """8 steps uninterrupted, and beside it the same run stopped after 4 (checkpoint), then relaunched."""
    work = tmp_path_factory.mktemp("deepspeed")
    common = ("--steps", "8", "--zero-stage", "3")
    ckpt = ("--checkpoint-dir", str(work / "ckpt"), "--checkpoint-every", "2")
    whole = torchrun(deepspeed_python, work / "whole.json", *common)
    head = torchrun(deepspeed_python, work / "head.json", *common, *ckpt, "--max-steps-this-run", "4")
    runs = {"head": finished(head, work / "head.json")}
    tail = torchrun(deepspeed_python, work / "tail.json", *common, *ckpt)
    runs["whole"] = finished(whole, work / "whole.json")
    runs["tail"] = finished(tail, work / "tail.json")
    runs["files"] = ({"latest": (work / "ckpt" / "latest").read_text()}, [])
    return runs


@pytest.mark.slow
def test_zero3_learns_on_two_cpu_processes_with_pytorch_fsdps_lines(resumed):
    summary, lines = resumed["whole"]
    assert (summary["testcase"], summary["world_size"], summary["device"], summary["zero_stage"]) == (
        "deepspeed/zero3",
        2,
        "cpu",
        3,
    )
    assert summary["optimizer_class"] == "DeepSpeedZeroOptimizer_Stage3" and summary["bf16"] is False
    assert summary["jit_ops"] == [] and summary["accelerator"] == "cpu"
    assert summary["final_loss"] < summary["first_loss"] - 0.5, summary["losses"]
    assert [line["step"] for line in lines] == list(range(1, 9))
    assert set(MANIFEST["metrics"]) <= set(lines[0])
    assert lines[-1]["tokens_per_s"] is None and lines[0]["tokens_per_s"] > 0


@pytest.mark.slow
def test_the_same_seed_gives_the_same_curve_and_the_resume_continues_it(resumed):
    whole = resumed["whole"][0]["losses"]
    head, tail = resumed["head"][0], resumed["tail"][0]
    assert head["losses"] == whole[:4]  # two runs, one seed: the same numbers
    assert (tail["resumed_from_step"], tail["steps_this_run"]) == (4, 4)
    assert tail["losses"] == whole[4:]  # DeepSpeed's checkpoint holds the whole state
    assert resumed["files"][0]["latest"] == "step-00000008"


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2])
def test_every_other_stage_trains_the_same_numbers_on_two_cpu_processes(
    deepspeed_python, resumed, tmp_path, stage
):
    """In fp32 on gloo, partitioning changes where the numbers live, not what they are: stage 3's curve.

    Not to the last bit: stage 3 reduce-scatters gradients in buckets where the lower stages all-reduce them
    whole, so the same fp32 sums are added in another order and a loss may differ in its last place or two
    (4.8e-7 of 5.69 after two steps on one host). A relative tolerance of 1e-6 holds that and nothing more: a
    stage that trained differently (another learning rate, a lost gradient) moves the loss by far more.
    """
    summary, lines = finished(
        torchrun(deepspeed_python, tmp_path / "s.json", "--steps", "4", "--zero-stage", str(stage)),
        tmp_path / "s.json",
    )
    assert summary["zero_stage"] == stage and len(lines) == 4
    assert summary["losses"] == pytest.approx(resumed["whole"][0]["losses"][:4], rel=1e-6, abs=0)


@pytest.mark.slow
def test_a_resume_on_a_prepared_corpus_reads_the_uninterrupted_runs_batches(deepspeed_python, tmp_path):
    """Stopped after 4 of 8 steps and launched again: the same next batches, so the same losses bit for bit;
    DeepSpeed's checkpoint holds the reader's position in its client state (4 steps of 2 ranks' 4 rows)."""
    data = ("--data", str(prepared_corpus(tmp_path)), "--steps", "8", "--zero-stage", "3")
    data += ("--batch-size", "4", "--seq-len", "32")
    ckpt = ("--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "4")
    whole = torchrun(deepspeed_python, tmp_path / "whole.json", *data)
    stop = ("--max-steps-this-run", "4")
    head, _lines = finished(
        torchrun(deepspeed_python, tmp_path / "head.json", *data, *ckpt, *stop), tmp_path / "head.json"
    )
    # ZeRO-3: every rank writes its own model-states file, client state included, and reads it back.
    files = sorted((tmp_path / "ckpt" / "step-00000004").glob("zero_pp_rank_*_mp_rank_00_model_states.pt"))
    read = "import sys, torch\nfor f in sys.argv[1:]:\n    state = torch.load(f, weights_only=False)\n"
    read += "    print(state['data_position']['position'])"
    proc = subprocess.run(
        [deepspeed_python, "-c", read, *map(str, files)],
        capture_output=True, text=True, env=cpu_env(), timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    positions = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert len(positions) == 2 and positions[0] == positions[1]
    assert {k: positions[0][k] for k in ("step", "epoch", "index")} == {"step": 4, "epoch": 0, "index": 32}
    tail, _lines = finished(
        torchrun(deepspeed_python, tmp_path / "tail.json", *data, *ckpt), tmp_path / "tail.json"
    )
    whole_losses = finished(whole, tmp_path / "whole.json")[0]["losses"]
    assert (tail["resumed_from_step"], tail["steps_this_run"]) == (4, 4)
    assert len(set(whole_losses)) == 8
    assert head["losses"] + tail["losses"] == whole_losses
