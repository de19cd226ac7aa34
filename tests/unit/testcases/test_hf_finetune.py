"""hf/finetune: its argument rules and data (fast, no torch for the rules), and on CPU with transformers, PEFT
and accelerate (slow: they live in the slow wheelhouse) that LoRA on the tiny shape learns deterministically
with pytorch/fsdp's metric lines, that a model directory trains exactly as the same random weights made in
place, and that accelerate's checkpoints resume a 2-process FSDP2 run on its uninterrupted curve.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.unit.testcases.case_runs import imported_modules, run_on_cpu, slow_python

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "hf" / "finetune"
ENTRY = CASE / "train.py"
MANIFEST = yaml.safe_load((CASE / "testcase.yml").read_text())
TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 192,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
}


def model_dir(root: Path, config: dict | None = None, weights: bool = True, tokenizer: bool = False) -> Path:
    """A model directory's files as transformers writes them (content only where the rules read it)."""
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    if weights:
        (root / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--init-config", "tiny", "--lora-rank", "0"], "--lora-rank must be >= 1, got 0"),
        (["--init-config", "llama3_70b"], "--init-config 'llama3_70b' is unknown; choose one of"),
        ([], "give one of --model-path DIR (a model directory in transformers' format) and --init-config"),
        (["--init-config", "tiny", "--lora-alpha", "0"], "--lora-alpha must be > 0"),
        (["--init-config", "tiny", "--lora-dropout", "1"], "--lora-dropout must be in [0, 1)"),
        (
            ["--init-config", "tiny", "--lora-targets", "q_proj,wq"],
            "['wq'] not a linear layer of a Llama model",
        ),
        (["--init-config", "tiny", "--lora-targets", ","], "empty not a linear layer"),
        (["--init-config", "tiny", "--seq-len", "2048"], "--seq-len 2048 exceeds the model's context"),
        (["--init-config", "tiny", "--eval-fraction", "0"], "--eval-fraction must be in (0, 0.5]"),
        (["--init-config", "tiny", "--precision", "bf16", "--device", "cpu"], "--precision bf16 needs a GPU"),
        (["--init-config", "tiny", "--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint-dir"),
        (
            ["--init-config", "tiny", "--data", "/nonexistent.jsonl"],
            "--data '/nonexistent.jsonl' is not a file",
        ),
        (["--init-config", "tiny", "--fsdp", "maybe"], "--fsdp must be auto, true or false"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(refusal, argv, expected):
    from hf_finetune.config import parse_args

    assert expected in refusal(parse_args, argv)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"config": None}, "has no config.json: a model directory in transformers' format (save_pretrained)"),
        (
            {"config": {**TINY_CONFIG, "model_type": "gpt2"}},
            "model_type 'gpt2' is not one this case fine-tunes",
        ),
        ({"config": TINY_CONFIG, "weights": False}, "has no weights: none of ['model.safetensors'"),
        (
            {"config": {**TINY_CONFIG, "vocab_size": 100}},
            "has no tokenizer, and its vocabulary (100) is smaller",
        ),
        ({"config": {"model_type": "llama"}}, "config.json lacks or mistypes a Llama field"),
    ],
)
def test_bad_model_directories_are_refused_by_what_they_lack(refusal, tmp_path, files, expected):
    from hf_finetune.config import parse_args

    path = model_dir(tmp_path / "model", **files)
    assert expected in refusal(parse_args, ["--model-path", str(path)])


def test_a_model_path_that_is_no_directory_and_both_sources_are_refused(refusal, tmp_path):
    from hf_finetune.config import parse_args

    assert "is not a directory" in refusal(parse_args, ["--model-path", str(tmp_path / "absent")])
    path = model_dir(tmp_path / "m", TINY_CONFIG)
    assert "not both" in refusal(parse_args, ["--model-path", str(path), "--init-config", "tiny"])


def test_a_model_directory_gives_its_shape_and_tokenizer():
    from hf_finetune.config import parse_args, read_model_dir
    from trainstack_train.config import MODEL_CONFIGS

    path = model_dir(Path(os.environ.get("TMPDIR", "/tmp")) / f"hf-rules-{os.getpid()}", TINY_CONFIG)
    cfg = parse_args(["--model-path", str(path), "--lora-targets", "all-linear,lm_head"], {})
    shape, has_tokenizer = read_model_dir(path)
    tiny = MODEL_CONFIGS["tiny"]
    assert (shape.dim, shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.ffn_dim, shape.vocab_size) == (
        tiny.dim, tiny.n_layers, tiny.n_heads, tiny.n_kv_heads, tiny.ffn_dim, tiny.vocab_size,
    )  # fmt: skip
    assert not has_tokenizer
    assert cfg.targets == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "lm_head",
    ]
    # A tokenizer in the directory lifts the byte-level vocabulary rule.
    small = model_dir(
        path.parent / f"hf-rules-tok-{os.getpid()}", {**TINY_CONFIG, "vocab_size": 100}, tokenizer=True
    )
    assert read_model_dir(small)[1]


def test_validate_only_answers_without_torch(tmp_path):
    """What the launcher runs on the submit host: the rules, and no torch import (fast, no GPU needed)."""
    env = dict(os.environ, WORLD_SIZE="2")
    ok, imported = imported_modules(str(ENTRY), "--init-config", "tiny", "--validate-only", "true", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "hf/finetune: the arguments hold for 2 process(es)" in ok.stdout
    assert (
        "trainstack_train.config" in imported and "torch" not in imported and "transformers" not in imported
    )
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--model-path", str(model_dir(tmp_path / "m")), "--validate-only", "1"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "has no config.json" in bad.stderr


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    from hf_finetune.config import INIT_CONFIGS

    assert MANIFEST["include"] == ["common/trainstack_train"]
    assert MANIFEST["validate_option"] == "validate-only"
    assert MANIFEST["wheelhouse"] == "slow"
    assert MANIFEST["configs"] == list(INIT_CONFIGS)
    pins = dict(r.split("==") for r in MANIFEST["requirements"])
    assert {"transformers", "accelerate", "peft", "torch"} <= set(pins)


# ---------------------------------------------------------------- data (numpy only)


def test_the_shipped_records_split_into_disjoint_fixed_sets():
    from hf_finetune.config import DATA_FILE
    from hf_finetune.data import load_records, split

    records = load_records(DATA_FILE)
    assert len(records) >= 40
    train, held = split(records, 0.125)
    assert len(held) == 6 and len(train) + len(held) == len(records)
    assert not set(train) & set(held)
    assert split(records, 0.125) == (train, held)


def test_bad_record_lines_are_named(tmp_path):
    from hf_finetune.data import load_records

    path = tmp_path / "r.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "c"}\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: needs string fields instruction and output"):
        load_records(path)
    path.write_text('{"instruction": "a", "output": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: not a JSON object"):
        load_records(path)


def test_only_the_response_and_eos_are_trained_on():
    from hf_finetune.data import IGNORE, ByteLevel, Record, encode

    record = Record("Add.", "2 and 3", "5.")
    ids, labels = encode(record, ByteLevel())
    prompt = "### Instruction:\nAdd.\n\n### Input:\n2 and 3\n\n### Response:\n"
    assert ids == [256, *prompt.encode(), *b"5.", 257]
    assert labels == [IGNORE] * (1 + len(prompt)) + [*b"5.", 257]


def test_rows_are_a_function_of_the_step_and_wrap_the_stream():
    from hf_finetune.data import IGNORE, Batches, Stream

    stream = Stream(np.arange(10), np.where(np.arange(10) % 3 == 0, IGNORE, np.arange(10)))
    batches = Batches(stream, batch_size=2, seq_len=4, world=2)
    ids, labels = batches.rows(step=1, rank=1)  # rows 6 and 7: stream offsets 24 and 28
    assert ids.tolist() == [[4, 5, 6, 7], [8, 9, 0, 1]]
    assert labels.tolist() == [[4, 5, IGNORE, 7], [8, IGNORE, IGNORE, 1]]
    assert np.array_equal(Batches(stream, 2, 4, 2).rows(1, 1)[0], ids)
    # Trained positions over every rank's rows, the first position of a row excluded (the model shifts).
    expected = sum(int((batches.rows(1, r)[1][:, 1:] != IGNORE).sum()) for r in range(2))
    assert batches.targets(1) == expected == 7


def test_held_out_windows_pad_the_last_one_with_nothing_to_count():
    from hf_finetune.data import IGNORE, Stream, eval_windows

    windows = eval_windows(Stream(np.arange(10), np.arange(10)), seq_len=4, pad_id=257)
    assert len(windows) == 3
    assert windows[-1][0].tolist() == [8, 9, 257, 257] and windows[-1][1].tolist() == [8, 9, IGNORE, IGNORE]


def test_lora_flops_drop_the_frozen_weights_own_gradient():
    from hf_finetune.model import Counts
    from trainstack_train.config import MODEL_CONFIGS

    tiny = MODEL_CONFIGS["tiny"]
    counts = Counts(frozen=164_160, trainable=48_128)
    attention = 12 * tiny.n_layers * tiny.dim * 128
    assert counts.flops_per_token(tiny, 128) == 4 * 164_160 + 6 * 48_128 + attention


# ---------------------------------------------------------------- with transformers, PEFT, accelerate (slow)


@pytest.fixture(scope="module")
def hf_python() -> str:
    """A Python with the test case's locked requirements: its variable, else a slow-wheelhouse virtualenv."""
    return slow_python("TRAINSTACK_HF_PYTHON", MANIFEST, lock=CASE / "requirements.lock")


def run(python: str, tmp_path: Path, name: str, *args: str, procs: int = 1) -> dict:
    """The entrypoint on CPU (torchrun for several processes); returns the summary with the metric lines."""
    defaults = ("--lora-targets", "all-linear,lm_head")
    return run_on_cpu(python, ENTRY, tmp_path / f"{name}.json", *defaults, *args, procs=procs)


@pytest.mark.slow
def test_lora_on_tiny_learns_deterministically_with_pytorch_fsdps_lines(hf_python, tmp_path):
    first = run(hf_python, tmp_path, "a", "--init-config", "tiny", "--steps", "12")
    second = run(hf_python, tmp_path, "b", "--init-config", "tiny", "--steps", "12")
    assert first["losses"] == second["losses"] and first["eval_loss"] == second["eval_loss"]
    assert first["final_loss"] < first["first_loss"] - 1.0, first["losses"]
    assert first["eval_loss"] < first["eval_loss_before"] - 1.0
    assert [line["step"] for line in first["lines"]] == list(range(1, 13))
    assert all(set(line) == set(MANIFEST["metrics"]) for line in first["lines"])
    assert first["lines"][-1]["tokens_per_s"] is None and first["lines"][2]["tflops_per_gpu"] > 0
    assert (first["testcase"], first["tokenizer"], first["fsdp"]) == ("hf/finetune", "byte-level", False)
    assert first["mfu"] is None and first["mfu_note"].startswith("peak unknown")
    from hf_finetune.model import Counts
    from trainstack_train.config import MODEL_CONFIGS

    counts = Counts(first["frozen_params"], first["trainable_params"])
    assert first["flops_per_token"] == counts.flops_per_token(MODEL_CONFIGS["tiny"], 128)
    # Rank 16 x (in + out) on q, k, v, o, gate, up, down of 2 blocks (dim 64, KV 32, FFN 192) and the output.
    per_block = (64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 192)
    assert first["trainable_params"] == 16 * (2 * per_block + (64 + 512))


@pytest.mark.slow
def test_a_model_directory_trains_as_the_same_weights_made_in_place(hf_python, tmp_path):
    path = tmp_path / "tiny-model"
    made = subprocess.run(
        [hf_python, str(CASE / "make_model.py"), "--init-config", "tiny", "--output", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    loaded = run(hf_python, tmp_path, "dir", "--model-path", str(path), "--steps", "4")
    made_here = run(hf_python, tmp_path, "here", "--init-config", "tiny", "--steps", "4")
    assert loaded["losses"] == made_here["losses"] and loaded["model"] == str(path)


@pytest.mark.slow
def test_accelerate_checkpoints_resume_a_two_process_fsdp_run_on_its_curve(hf_python, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    common = ("--init-config", "tiny", "--steps", "6")
    whole = run(hf_python, tmp_path, "whole", *common, procs=2)
    resume = ("--checkpoint-dir", ckpt, "--checkpoint-every", "3")
    head = run(hf_python, tmp_path, "head", *common, *resume, "--max-steps-this-run", "3", procs=2)
    assert sorted(p.name for p in Path(ckpt).iterdir()) == ["step-00000003"]
    tail = run(hf_python, tmp_path, "tail", *common, *resume, procs=2)
    assert (head["fsdp"], head["world_size"], head["distributed_type"]) == (True, 2, "FSDP")
    assert tail["resumed_from_step"] == 3 and tail["steps_this_run"] == 3
    assert head["losses"] + tail["losses"] == whole["losses"]
    assert tail["eval_loss"] == whole["eval_loss"]


@pytest.mark.slow
def test_bf16_fsdp_reduces_gradients_and_keeps_the_loss_in_fp32(hf_python):
    """accelerate's own bf16 policy would reduce and output in bf16; the case's policy survives its setter."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "from hf_finetune.loop import fsdp_plugin\n"
        "plugin = fsdp_plugin('bf16'); plugin.set_mixed_precision('bf16')\n"
        "p = plugin.mixed_precision_policy; print(p.param_dtype, p.reduce_dtype, p.output_dtype)\n"
    )
    shared = str(ROOT / "testcases" / "pytorch" / "fsdp")
    argv = [hf_python, "-c", code, str(CASE), shared]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["torch.bfloat16", "torch.float32", "None"]
