"""megatron/gpt: its argument rules (fast, no torch), and on CPU with megatron-core itself (slow: it lives in
the slow wheelhouse) everything before the first CUDA call through the product's own preflight
(``--preflight true`` on one rank and on two gloo ranks): the model built from our shapes with our
parameter count, the micro-batches from pytorch/fsdp's data, the per-rank checkpoint's round trip, a summary
that is never a training result; Hugging Face weights in GPTModel's layout, and the refusal of a node without
CUDA when no preflight is asked for.
"""

from __future__ import annotations

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

from tests.unit.testcases.case_runs import LIBRARY, imported_modules, slow_python

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "testcases" / "megatron" / "gpt"
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
        (
            ["--sequence-parallel", "true", "--tp", "2"],
            {"WORLD_SIZE": "2"},
            "--sequence-parallel true cannot be built: megatron-core 0.16.1's local layer spec makes "
            "RMSNorm a WrappedTorchNorm",
        ),
        (["--device", "cpu"], {}, "--device cpu is refused: megatron-core 0.16.1 trains on CUDA only"),
        (["--precision", "fp8"], {}, "--precision must be one of ('bf16',), got 'fp8'"),
        (["--recompute", "some"], {}, "--recompute must be one of ('none', 'selective', 'full')"),
        (["--distributed-optimizer", "maybe"], {}, "--distributed-optimizer must be true or false"),
        (["--preflight", "maybe"], {}, "--preflight must be true or false"),
        (["--warmup-steps", "20"], {}, "--warmup-steps 20 must be below --steps 20"),
        (["--config", "small"], {}, "--config 'small' is unknown"),
        (["--checkpoint-every", "5"], {}, "--checkpoint-every needs --checkpoint-dir"),
        (["--dp", "two"], {}, "--dp must be auto or a degree >= 1"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(refusal, argv, environ, expected):
    from megatron_gpt.config import parse_args

    assert expected in refusal(parse_args, argv, environ)


def test_unknown_options_are_refused_by_name(refusal):
    from megatron_gpt.config import parse_args

    assert "unrecognized arguments: --tensor-parallel 2" in refusal(parse_args, ["--tensor-parallel", "2"])


def test_valid_degrees_fill_the_world():
    from megatron_gpt.config import parse_args

    cfg = parse_args(["--tp", "2", "--sequence-parallel", "no"], {"WORLD_SIZE": "8"})
    assert (cfg.tp, cfg.pp, cfg.dp_degree(8), cfg.sequence_parallel) == (2, 1, 4, "false")
    cfg = parse_args(
        ["--config", "llama3_1_8b", "--seq-len", "4096", "--tp", "8", "--pp", "4", "--dp", "2"],
        {"WORLD_SIZE": "64"},
    )
    assert (cfg.dp_degree(64), cfg.micro_batches()) == (2, 8)
    cfg = parse_args(["--distributed-optimizer", "true", "--recompute", "full"], {"WORLD_SIZE": "4"})
    assert (cfg.dp_degree(4), cfg.micro_batches(), cfg.distributed_optimizer) == (4, 1, "true")


def test_a_preflight_may_run_on_the_cpu():
    """--device cpu is refused for training, not for a preflight (it stops before the first CUDA call)."""
    from megatron_gpt.config import parse_args

    cfg = parse_args(["--device", "cpu", "--preflight", "yes", "--tp", "2"], {"WORLD_SIZE": "2"})
    assert (cfg.device, cfg.preflight, cfg.dp_degree(2)) == ("cpu", "true", 1)
    assert parse_args([], {}).preflight == "false"


def test_validate_only_answers_without_torch():
    """What the launcher runs on the submit host: the rules, and no torch import (fast, no GPU needed)."""
    env = dict(os.environ, WORLD_SIZE="4")
    ok, imported = imported_modules(str(ENTRY), "--tp", "2", "--validate-only", "true", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "megatron/gpt: the arguments hold for 4 process(es)" in ok.stdout
    assert "megatron_gpt.config" in imported and "trainstack_train.config" in imported
    assert "torch" not in imported and "megatron" not in imported
    bad = subprocess.run(
        [sys.executable, str(ENTRY), "--tp", "3", "--validate-only", "true"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--tp 3 must divide tiny's attention heads" in bad.stderr


def test_the_manifest_stages_the_shared_package_and_names_its_check():
    assert MANIFEST["name"] == "megatron/gpt" and MANIFEST["framework"] == "megatron"
    assert MANIFEST["include"] == ["common/trainstack_train"]
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
    from megatron_gpt.hf_weights import from_hf, qkv_weight
    from trainstack_train.config import MODEL_CONFIGS

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
    return slow_python("TRAINSTACK_MEGATRON_PYTHON", MANIFEST)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(CASE), str(LIBRARY)])
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(key, None)
    return env


# What the preflight does not cover: Hugging Face weights mapped into GPTModel's layout, shape for shape.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = sys.argv[1]
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.hf_compat import to_hf
    from trainstack_train.model import Transformer
    from megatron_gpt import build
    from megatron_gpt.config import TrainConfig
    from megatron_gpt.hf_weights import from_hf
    build.init_parallel(TrainConfig(config="tiny"), torch.device("cpu"))
    out = {}
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        with torch.device("meta"):
            ours = Transformer(MODEL_CONFIGS[name], rope_len=128)
        ours.tie_weights()
        mapped = from_hf(to_hf(ours.state_dict(), MODEL_CONFIGS[name]), MODEL_CONFIGS[name])
        meta = build.meta_model(TrainConfig(config=name, seq_len=128)).state_dict()
        out["hf_" + name] = [{k: list(v.shape) for k, v in mapped.items()},
                             {k: list(v.shape) for k, v in meta.items() if torch.is_tensor(v)}]
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def probe(megatron_python) -> dict:
    proc = subprocess.run(
        [megatron_python, "-W", "ignore", "-c", PROBE, str(free_port())],
        capture_output=True, text=True, env=cpu_env(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def token_file(megatron_python: str, work: Path) -> Path:
    """pytorch/fsdp's token file made from a small text (its own ``prepare``)."""
    (work / "doc.txt").write_text("megatron reads our tokens " * 40)
    script = "import sys; from pathlib import Path; from trainstack_train.data import prepare; "
    script += "prepare([Path(sys.argv[1])], Path(sys.argv[2]))"
    subprocess.run(
        [megatron_python, "-c", script, str(work / "doc.txt"), str(work / "tokens")],
        check=True, env=cpu_env(), timeout=120,
    )  # fmt: skip
    return work / "tokens"


def run_preflight(megatron_python: str, work: Path, name: str, procs: int, *args: str) -> dict:
    """The entrypoint with ``--preflight true`` (torchrun for several ranks): its summary and stdout."""
    summary = work / f"summary-{name}.json"
    argv = [str(ENTRY), "--preflight", "true", "--summary-json", str(summary), *args]
    if procs > 1:
        launcher = [megatron_python, "-m", "torch.distributed.run", "--nproc-per-node", str(procs)]
        argv = [*launcher, "--master-port", str(free_port()), *argv]
    else:
        argv = [megatron_python, "-W", "ignore", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, env=cpu_env(), timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads(summary.read_text())
    return {"summary": body, "checks": {c["name"]: c for c in body["checks"]}, "stdout": proc.stdout}


@pytest.fixture(scope="module")
def preflights(megatron_python, tmp_path_factory) -> dict[str, dict]:
    """The product's preflight on CPU: one rank (token file, checkpoint), two ranks as two pipeline stages
    (four one-row micro-batches, a file per rank), two tensor-parallel ranks (counts summed over shards)."""
    work = tmp_path_factory.mktemp("megatron")
    tokens = str(token_file(megatron_python, work))
    small = ("--data", tokens, "--batch-size", "4", "--seq-len", "16")
    py = megatron_python
    return {
        "one": run_preflight(py, work, "one", 1, *small, "--checkpoint-dir", str(work / "ck1")),
        "pp2": run_preflight(py, work, "pp2", 2, *small, "--pp", "2", "--checkpoint-dir", str(work / "ck2")),
        "tp2": run_preflight(py, work, "tp2", 2, "--tp", "2"),
        "work": {"path": work, "tokens": tokens},
    }


def llama_params(name: str) -> int:
    """The closed form of a Llama-3 decoder's parameters for one of our shapes (tied output counted once)."""
    from trainstack_train.config import MODEL_CONFIGS

    s = MODEL_CONFIGS[name]
    kv = s.n_kv_heads * s.head_dim
    block = 2 * s.dim + 2 * s.dim * s.dim + 2 * s.dim * kv + 3 * s.dim * s.ffn_dim
    return s.vocab_size * s.dim * (1 if s.tie_embeddings else 2) + s.n_layers * block + s.dim


@pytest.mark.slow
def test_gptmodel_has_our_shapes_parameter_count(preflights):
    one, tp2 = preflights["one"]["checks"], preflights["tp2"]["checks"]
    assert one["model_cpu"]["value"] == tp2["model_cpu"]["value"] == llama_params("tiny")
    for name in ("llama3_2_1b", "llama3_1_8b"):
        # Under TP the shards' counts are summed over the ranks (a meta model's shards too).
        assert one[f"model_meta_{name}"]["value"] == tp2[f"model_meta_{name}"]["value"] == llama_params(name)
    assert llama_params("llama3_2_1b") == 1_235_814_400 and llama_params("llama3_1_8b") == 8_030_261_248
    assert all(check["passed"] for run in ("one", "tp2") for check in preflights[run]["checks"].values())


@pytest.mark.slow
def test_hf_weights_fill_every_gptmodel_weight_with_its_shape(probe):
    for name in ("tiny", "llama3_2_1b", "llama3_1_8b"):
        mapped, gptmodel = probe["hf_" + name]
        assert mapped == gptmodel, name
    assert "output_layer.weight" not in probe["hf_llama3_2_1b"][1]  # tied: the embedding is the output


@pytest.mark.slow
def test_the_model_builds_on_cpu_in_bf16_from_the_local_spec(preflights):
    for run in ("one", "pp2", "tp2"):
        check = preflights[run]["checks"]["model_cpu"]
        assert check["passed"] and not check["skipped"], check
        assert "dtypes ['torch.bfloat16'], local spec modules present" in check["detail"]


@pytest.mark.slow
def test_micro_batches_are_pytorch_fsdps_rows_from_the_token_file(preflights):
    tokens = preflights["work"]["tokens"]
    data = preflights["pp2"]["checks"]["data"]
    assert data["passed"] and data["passed_ranks"] == [0, 1]
    assert data["detail"].startswith(f"4 micro-batch(es) of [[1, 16]] from {tokens} for dp rank 0 of 1")
    assert "rows in order True, labels shifted True, ids below 512 True" in data["detail"]
    assert preflights["one"]["checks"]["data"]["detail"].startswith("1 micro-batch(es) of [[4, 16]]")
    agree = preflights["pp2"]["checks"]["ranks_agree"]
    assert agree["passed"] and "dp ranks [0] each read one row set" in agree["detail"]


@pytest.mark.slow
def test_checkpoint_round_trip_of_the_model_state(preflights):
    work = preflights["work"]["path"]
    one = preflights["one"]["checks"]["checkpoint_round_trip"]
    assert one["passed"] and "perturbed True, loaded step 1, equal after load True" in one["detail"]
    assert "files there ['rank-00000.pt']" in one["detail"]
    two = preflights["pp2"]["checks"]["checkpoint_round_trip"]
    assert two["passed"] and two["passed_ranks"] == [0, 1]
    assert "files there ['rank-00000.pt', 'rank-00001.pt']" in two["detail"]
    # Nothing is left that a training run in the same directory would resume from.
    assert [list((work / ck).iterdir()) for ck in ("ck1", "ck2")] == [[], []]
    assert "checkpoint_round_trip" not in preflights["tp2"]["checks"]  # no --checkpoint-dir, no round trip


@pytest.mark.slow
def test_a_tied_output_under_pipeline_parallelism_names_its_cuda_call(preflights):
    pp2 = preflights["pp2"]
    tied = pp2["checks"]["model_meta_llama3_2_1b"]
    assert tied["skipped"] and tied["passed"] and tied["value"] is None
    assert "setup_embeddings_and_output_layer calls weight.data.cuda()" in tied["detail"]
    assert pp2["checks"]["model_meta_llama3_1_8b"]["value"] == llama_params("llama3_1_8b")
    # The tiny shape is untied: the run itself still stops at DistributedDataParallel.
    assert pp2["summary"]["first_cuda_call"].startswith("megatron.core.distributed.DistributedDataParallel")


@pytest.mark.slow
def test_a_preflight_is_never_a_training_result(preflights):
    for run in ("one", "pp2", "tp2"):
        summary, stdout = preflights[run]["summary"], preflights[run]["stdout"]
        assert (summary["preflight"], summary["passed"], summary["steps"]) == (True, True, 0)
        rates = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "first_loss", "final_loss")
        assert [summary[key] for key in rates] == [None] * len(rates)
        assert summary["stops_before"].startswith("megatron-core 0.16.1 trains on CUDA only")
        assert "TRAINSTACK_METRIC" not in stdout and "megatron/gpt preflight: every check" in stdout
        assert "no training step ran. It stops before megatron.core." in stdout
    assert (preflights["one"]["summary"]["world_size"], preflights["pp2"]["summary"]["world_size"]) == (1, 2)


@pytest.mark.slow
def test_a_node_without_cuda_is_refused_with_the_calls_that_need_it(megatron_python):
    proc = subprocess.run(
        [megatron_python, "-W", "ignore", str(ENTRY), "--steps", "4"],
        capture_output=True, text=True, env=cpu_env(), timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "megatron/gpt found no CUDA device: megatron-core 0.16.1 trains on CUDA only" in proc.stderr
    assert "RotaryEmbedding.get_emb" in proc.stderr and "TRAINSTACK_METRIC" not in proc.stdout
