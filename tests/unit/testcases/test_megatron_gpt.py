"""megatron/gpt: its argument rules (fast, no torch), and on CPU with megatron-core itself (slow: it lives in
the slow wheelhouse) everything before the first CUDA call: the model built from our shapes with our
parameter count, the micro-batches from pytorch/fsdp's data, the per-rank checkpoint's round trip and the
refusal of a node without CUDA.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "megatron" / "gpt"
ENTRY = CASE / "train.py"
MANIFEST = yaml.safe_load((CASE / "testcase.yml").read_text())
SLOW_WHEELHOUSE = ROOT / ".cache" / "wheelhouse-slow"


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str]) -> str:
    """The message parse_args exits with (status 2, argparse's way)."""
    from megatron_gpt.config import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(argv, environ)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            ["--tp", "3"],
            {"WORLD_SIZE": "3"},
            "--tp 3 must divide tiny's attention heads (n_heads 4, n_kv_heads 2)",
        ),
        (
            ["--config", "llama3_2_1b", "--seq-len", "2048", "--tp", "16"],
            {"WORLD_SIZE": "16"},
            "--tp 16 must divide llama3_2_1b's attention heads (n_heads 32, n_kv_heads 8)",
        ),
        (
            ["--tp", "2", "--dp", "2"],
            {"WORLD_SIZE": "2"},
            "--tp 2 x --pp 1 x --dp 2 = 4 ranks, but the job has 2",
        ),
        (["--pp", "3"], {"WORLD_SIZE": "3"}, "--pp 3 exceeds tiny's 2 layers"),
        (
            ["--config", "llama3_2_1b", "--seq-len", "2048", "--pp", "3"],
            {"WORLD_SIZE": "3"},
            "--pp 3 must divide llama3_2_1b's 16 layers",
        ),
        (["--sequence-parallel", "true"], {}, "--sequence-parallel true needs --tp > 1"),
        (
            ["--sequence-parallel", "true", "--tp", "2", "--seq-len", "127"],
            {"WORLD_SIZE": "2"},
            "--seq-len 127 must be divisible by --tp 2 under --sequence-parallel",
        ),
        (["--device", "cpu"], {}, "--device cpu is refused: megatron-core 0.16.1 trains on CUDA only"),
        (["--precision", "fp8"], {}, "--precision must be one of ('bf16',), got 'fp8'"),
        (["--recompute", "some"], {}, "--recompute must be one of ('none', 'selective', 'full')"),
        (["--distributed-optimizer", "maybe"], {}, "--distributed-optimizer must be true or false"),
        (["--warmup-steps", "20"], {}, "--warmup-steps 20 must be below --steps 20"),
        (["--config", "small"], {}, "--config 'small' is unknown"),
        (["--checkpoint-every", "5"], {}, "--checkpoint-every needs --checkpoint-dir"),
        (["--dp", "two"], {}, "--dp must be auto or a degree >= 1"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(capsys, argv, environ, expected):
    assert expected in refusal(capsys, argv, environ)


def test_unknown_options_are_refused_by_name(capsys):
    from megatron_gpt.config import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--tensor-parallel", "2"], {})
    assert "unrecognized arguments: --tensor-parallel 2" in capsys.readouterr().err


def test_valid_degrees_fill_the_world():
    from megatron_gpt.config import parse_args

    cfg = parse_args(["--tp", "2", "--sequence-parallel", "yes"], {"WORLD_SIZE": "8"})
    assert (cfg.tp, cfg.pp, cfg.dp_degree(8), cfg.sequence_parallel) == (2, 1, 4, "true")
    cfg = parse_args(
        ["--config", "llama3_1_8b", "--seq-len", "4096", "--tp", "8", "--pp", "4", "--dp", "2"],
        {"WORLD_SIZE": "64"},
    )
    assert (cfg.dp_degree(64), cfg.micro_batches()) == (2, 8)
    cfg = parse_args(["--distributed-optimizer", "true", "--recompute", "full"], {"WORLD_SIZE": "4"})
    assert (cfg.dp_degree(4), cfg.micro_batches(), cfg.distributed_optimizer) == (4, 1, "true")


def test_validate_only_answers_without_torch():
    """What the launcher runs on the submit host: the rules, and no torch import (fast, no GPU needed)."""
    env = dict(os.environ, WORLD_SIZE="4")
    ok = subprocess.run(
        [sys.executable, "-X", "importtime", str(ENTRY), "--tp", "2", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "megatron/gpt: the arguments hold for 4 process(es)" in ok.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in ok.stderr.splitlines() if line.startswith("import time:")
    }
    assert "megatron_gpt.config" in imported and "fsdp_llama.config" in imported
    assert "torch" not in imported and "megatron" not in imported
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--tp", "3", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--tp 3 must divide tiny's attention heads" in bad.stderr


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    assert MANIFEST["name"] == "megatron/gpt" and MANIFEST["framework"] == "megatron"
    assert MANIFEST["include"] == ["pytorch/fsdp/fsdp_llama"]
    assert MANIFEST["validate_option"] == "validate-only"
    assert MANIFEST["wheelhouse"] == "slow"
    assert "megatron-core==0.16.1" in MANIFEST["requirements"]
    from megatron_gpt.config import CONFIGS

    assert MANIFEST["configs"] == list(CONFIGS)


# ------------------------------------------------------- the distributed optimizer's shard (torch only)
# Under megatron-core's distributed optimizer each rank steps a torch Adam over its fp32 master shards; these
# are that optimizer and those shards, with the checkpoint module's save and load (no megatron-core needed).


def _adam_over_shards(seed: int) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """Two fp32 "master shards" in two groups (with and without weight decay, as megatron-core has)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    shards = [torch.randn(6, generator=gen).requires_grad_(), torch.randn(3, generator=gen).requires_grad_()]
    groups = [{"params": [shards[0]], "weight_decay": 0.1}, {"params": [shards[1]], "weight_decay": 0.0}]
    return shards, torch.optim.AdamW(groups, lr=0.05, betas=(0.9, 0.95))


def _adam_steps(shards: list[torch.Tensor], optimizer: torch.optim.Optimizer, steps: range) -> list[float]:
    """Steps on a fixed objective per step index; the loss of each."""
    losses = []
    for step in steps:
        optimizer.zero_grad()
        loss = sum(((p - 0.1 * step) ** 2).sum() for p in shards)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_optimizer_shards_resume_on_the_uninterrupted_curve(tmp_path):
    from megatron_gpt import checkpoint

    shards, adam = _adam_over_shards(7)
    head = _adam_steps(shards, adam, range(3))
    checkpoint.save(tmp_path, 3, {"optimizer_shards": checkpoint.OptimizerShards([adam])})
    whole = head + _adam_steps(shards, adam, range(3, 6))
    fresh, fresh_adam = _adam_over_shards(99)
    assert checkpoint.load(tmp_path, 3, {"optimizer_shards": checkpoint.OptimizerShards([fresh_adam])}) == 3
    resumed = head + _adam_steps(fresh, fresh_adam, range(3, 6))
    assert resumed == whole
    assert all(torch_equal(a, b) for a, b in zip(fresh, shards, strict=True))
    # One step per parameter, each advanced once per optimizer step (not once per parameter).
    steps = [fresh_adam.state[p]["step"] for p in fresh]
    assert len({id(t) for t in steps}) == len(fresh) and [float(t) for t in steps] == [6.0, 6.0]


def test_optimizer_shards_of_other_degrees_are_refused_before_anything_changes(tmp_path):
    import torch
    from megatron_gpt import checkpoint

    shards, adam = _adam_over_shards(7)
    _adam_steps(shards, adam, range(2))
    checkpoint.save(tmp_path, 2, {"optimizer_shards": checkpoint.OptimizerShards([adam])})
    other = [torch.zeros(4, requires_grad=True), torch.zeros(3, requires_grad=True)]
    other_adam = torch.optim.AdamW([{"params": [other[0]]}, {"params": [other[1]]}], lr=0.05)
    with pytest.raises(ValueError, match=r"optimizer 0: the checkpoint's master shards \[\(6,\), \(3,\)\]"):
        checkpoint.load(tmp_path, 2, {"optimizer_shards": checkpoint.OptimizerShards([other_adam])})
    assert all(float(t.abs().sum()) == 0 for t in other) and not other_adam.state
    with pytest.raises(
        KeyError, match=r"holds no \['optimizer'\] \(written with another --distributed-optimizer"
    ):
        checkpoint.load(tmp_path, 2, {"optimizer": other_adam})


def torch_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    return bool(torch.equal(a.detach(), b.detach()))


def test_hf_qkv_goes_into_megatrons_per_group_layout():
    """linear_qkv as megatron-core splits it: per key/value group, its query heads, its key, its value."""
    import torch
    from fsdp_llama.config import MODEL_CONFIGS
    from megatron_gpt.hf_weights import from_hf, qkv_weight

    shape = MODEL_CONFIGS["tiny"]  # 4 query heads, 2 key/value groups, head_dim 16

    def heads(tag: int, count: int) -> torch.Tensor:
        """``count`` heads whose rows all read ``10 * head + tag``."""
        return (
            torch.arange(count)
            .repeat_interleave(shape.head_dim)
            .mul(10)
            .add(tag)
            .float()
            .outer(torch.ones(2))
        )

    qkv = qkv_weight(heads(1, 4), heads(2, 2), heads(3, 2), shape)
    assert qkv.shape == (8 * shape.head_dim, 2)
    assert [int(row) for row in qkv[:: shape.head_dim, 0]] == [1, 11, 2, 3, 21, 31, 12, 13]
    with pytest.raises(KeyError, match=r"lacks 21 weight\(s\), first \['model.embed_tokens.weight'"):
        from_hf({}, shape)


# ---------------------------------------------------------------- with megatron-core (slow)


@pytest.fixture(scope="module")
def megatron_python() -> str:
    """A Python with the test case's requirements: TRAINSTACK_MEGATRON_PYTHON, else a virtualenv built from
    the slow wheelhouse as the launcher builds one (``pip install --no-index`` of the manifest's pins).
    """
    given = os.environ.get("TRAINSTACK_MEGATRON_PYTHON")
    if given:
        return given
    if not (SLOW_WHEELHOUSE / ".stamp").exists():
        pytest.fail("megatron/gpt needs the slow wheelhouse: run make wheelhouse-slow (make test-slow does)")
    key = hashlib.sha256("\n".join(sorted(MANIFEST["requirements"])).encode()).hexdigest()[:16]
    venv = ROOT / ".cache" / "venvs" / f"megatron-gpt-{key}"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(SLOW_WHEELHOUSE)]
        subprocess.run([*pip, *MANIFEST["requirements"]], check=True)
        (venv / ".complete").write_text("\n".join(MANIFEST["requirements"]) + "\n")
    return str(venv / "bin" / "python")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(CASE), str(ROOT / "testcases" / "pytorch" / "fsdp")])
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    return env


# One gloo rank, megatron-core's groups: everything megatron-core does before its first CUDA call.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = sys.argv[2]
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    from fsdp_llama.data import BatchSource, prepare
    from megatron_gpt import build, checkpoint
    from megatron_gpt.config import TrainConfig
    from megatron_gpt.loop import micro_batches
    work = Path(sys.argv[1])
    out = {}
    cfg = TrainConfig(config="tiny", pp=1)
    build.init_parallel(cfg, torch.device("cpu"))
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        out[name] = build.count_params(build.meta_model(TrainConfig(config=name, seq_len=128)))
    from fsdp_llama.config import MODEL_CONFIGS
    from fsdp_llama.hf_compat import to_hf
    from fsdp_llama.model import Transformer
    from megatron_gpt.hf_weights import from_hf
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        with torch.device("meta"):
            ours = Transformer(MODEL_CONFIGS[name], rope_len=128)
        ours.tie_weights()
        mapped = from_hf(to_hf(ours.state_dict(), MODEL_CONFIGS[name]), MODEL_CONFIGS[name])
        meta = build.meta_model(TrainConfig(config=name, seq_len=128)).state_dict()
        out["hf_" + name] = [{k: list(v.shape) for k, v in mapped.items()},
                             {k: list(v.shape) for k, v in meta.items() if torch.is_tensor(v)}]
    config, model, params = build.build_model(cfg, torch.device("cpu"))
    out["built"] = {"params": params, "dtype": str(next(model.parameters()).dtype),
                    "modules": sorted({type(m).__name__ for m in model.modules()})}
    (work / "doc.txt").write_text("megatron reads our tokens " * 40)
    prepare([work / "doc.txt"], work / "tokens")
    data = BatchSource(str(work / "tokens"), 512, 4, 16, 0, 1, 1234)
    rows = data.batch(1, torch.device("cpu"))
    pairs = list(micro_batches(data, 1, torch.device("cpu"), 4))
    out["micro"] = {"count": len(pairs), "shapes": [list(p[0].shape) for p in pairs],
                    "same": all(torch.equal(torch.cat([p[i] for p in pairs]), rows[i]) for i in (0, 1)),
                    "shifted": bool(torch.equal(pairs[0][0][0, 1:], pairs[0][1][0, :-1]))}
    root = work / "ckpt"
    (root / "step-9.tmp").mkdir(parents=True)
    before = {k: v.clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
    checkpoint.save(root, 3, {"model": model})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    files = sorted(p.name for p in (root / "step-3").iterdir())
    latest, step = checkpoint.latest_step(root), checkpoint.load(root, 3, {"model": model})
    after = model.state_dict()
    restored = all(torch.equal(before[k], after[k]) for k in before)
    out["ckpt"] = dict(latest=latest, files=files, step=step, restored=restored, tensors=len(before))
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def probe(megatron_python, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("megatron")
    proc = subprocess.run(
        [megatron_python, "-W", "ignore", "-c", PROBE, str(work), str(free_port())],
        capture_output=True, text=True, env=cpu_env(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def llama_params(name: str) -> int:
    """The closed form of a Llama-3 decoder's parameters for one of our shapes (tied output counted once)."""
    from fsdp_llama.config import MODEL_CONFIGS

    s = MODEL_CONFIGS[name]
    kv = s.n_kv_heads * s.head_dim
    block = 2 * s.dim + 2 * s.dim * s.dim + 2 * s.dim * kv + 3 * s.dim * s.ffn_dim
    return s.vocab_size * s.dim * (1 if s.tie_embeddings else 2) + s.n_layers * block + s.dim


@pytest.mark.slow
def test_gptmodel_has_our_shapes_parameter_count(probe):
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        assert probe[name] == llama_params(name), name
    assert probe["llama3_2_1b"] == 1_235_814_400 and probe["llama3_1_8b"] == 8_030_261_248


@pytest.mark.slow
def test_hf_weights_fill_every_gptmodel_weight_with_its_shape(probe):
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        mapped, gptmodel = probe["hf_" + name]
        assert mapped == gptmodel, name
    assert "output_layer.weight" not in probe["hf_llama3_2_1b"][1]  # tied: the embedding is the output


@pytest.mark.slow
def test_the_model_builds_on_cpu_in_bf16_from_the_local_spec(probe):
    built = probe["built"]
    assert built["params"] == llama_params("tiny") and built["dtype"] == "torch.bfloat16"
    assert {"GPTModel", "Float16Module", "RMSNorm", "DotProductAttention"} <= set(built["modules"])


@pytest.mark.slow
def test_micro_batches_are_pytorch_fsdps_rows_from_the_token_file(probe):
    assert probe["micro"]["count"] == 4 and probe["micro"]["shapes"] == [[1, 16]] * 4
    assert probe["micro"]["same"] and probe["micro"]["shifted"]


@pytest.mark.slow
def test_checkpoint_round_trip_of_the_model_state(probe):
    ckpt = probe["ckpt"]
    assert ckpt["latest"] == 3 and ckpt["files"] == ["rank-00000.pt"] and ckpt["step"] == 3
    assert ckpt["restored"] and ckpt["tensors"] > 10


@pytest.mark.slow
def test_a_node_without_cuda_is_refused_with_the_calls_that_need_it(megatron_python):
    proc = subprocess.run(
        [megatron_python, "-W", "ignore", str(ENTRY), "--steps", "4"],
        capture_output=True, text=True, env=cpu_env(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "megatron/gpt found no CUDA device: megatron-core 0.16.1 trains on CUDA only" in proc.stderr
    assert "RotaryEmbedding.get_emb" in proc.stderr and "TRAINSTACK_METRIC" not in proc.stdout
