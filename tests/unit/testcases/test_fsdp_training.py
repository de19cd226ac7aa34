"""The pytorch/fsdp training loop on CPU with gloo: learning, clipping, checkpoints, resume, the CLI contract.

In-process tests use a one-rank gloo group; the contract and resume tests start the real entrypoint with
torchrun and two processes (the lab's 2 nodes x 1 process, on one host), so FSDP2 really shards.
"""

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import DTensor
from trainstack_train import checkpoint
from trainstack_train.config import MODEL_CONFIGS, PEAK_ENV, TrainConfig
from trainstack_train.loop import Trainer, clip_into_optimizer, loss_kernel, lr_at, train, use_fsdp
from trainstack_train.metrics import METRIC_PREFIX, PEAK_UNKNOWN
from trainstack_train.model import Transformer
from trainstack_train.optim import MasterWeightAdamW
from trainstack_train.parallel import DistInfo, configure_compiler, init_distributed
from trainstack_train.storage import LocalStore

FSDP_DIR = Path(__file__).resolve().parents[3] / "testcases" / "pytorch" / "fsdp"
TINY = {"config": "tiny", "batch_size": 4, "seq_len": 32, "compile": "false", "device": "cpu"}


def _cfg(**overrides):
    cfg = TrainConfig(**{**TINY, **overrides})
    cfg.validate()
    return cfg


def test_loss_decreases_on_the_fixed_synthetic_problem(gloo_world):
    summary = train(_cfg(steps=25, lr=3e-3, warmup_steps=3))
    assert summary.steps == 25
    assert summary.final_loss < summary.first_loss - 1.0, (summary.first_loss, summary.final_loss)
    assert summary.world_size == 1 and summary.device == "cpu" and summary.mfu is None
    assert summary.extra["peak_tflops"] is None and summary.extra["mfu_note"] == PEAK_UNKNOWN


def test_mfu_is_against_the_peak_it_was_given(gloo_world):
    # A peak far below the CPU's rate, so MFU is a plain, checkable number; no GPU name is consulted.
    summary = train(_cfg(steps=4, metric_warmup_steps=1, peak_tflops=1e-6))
    assert summary.extra["peak_tflops"] == 1e-6 and summary.extra["mfu_note"] is None
    assert summary.mfu == pytest.approx(summary.tflops_per_gpu / 1e-6)


@pytest.mark.parametrize(
    ("fsdp", "precision", "sharded", "optimizer"),
    [
        ("auto", "fp32", False, torch.optim.AdamW),
        ("auto", "bf16", False, MasterWeightAdamW),
        ("true", "bf16", True, torch.optim.AdamW),
    ],
)
def test_one_process_skips_sharding_unless_asked(gloo_world, fsdp, precision, sharded, optimizer):
    """World size 1: plain parameters (bf16 ones over fp32 master weights), or FSDP2 with --fsdp true."""
    trainer = Trainer(_cfg(fsdp=fsdp, mixed_precision=precision), init_distributed("cpu"))
    params = list(trainer.model.parameters())
    assert isinstance(params[0], DTensor) == sharded
    assert type(trainer.optimizer) is optimizer
    if not sharded:
        assert {p.dtype for p in params} == {torch.float32 if precision == "fp32" else torch.bfloat16}
    losses = [record["loss"] for step in range(12) if (record := trainer.step(step))]
    assert losses[-1] < losses[0] - 0.5, losses


@pytest.mark.parametrize("fsdp", ["auto", "true"])
def test_a_tied_shape_stays_tied_once_materialised(gloo_world, monkeypatch, fsdp):
    """Counted once in N (the FLOP count) and trained as one matrix, sharded or not."""
    tied = dataclasses.replace(MODEL_CONFIGS["tiny"], tie_embeddings=True)
    monkeypatch.setitem(MODEL_CONFIGS, "tiny", tied)
    trainer = Trainer(_cfg(fsdp=fsdp, mixed_precision="bf16"), init_distributed("cpu"))
    model = trainer.model
    assert model.output.weight is model.tok_embeddings.weight
    with torch.device("meta"):
        assert model.num_params() == Transformer(tied).num_params()
    assert sum(len(group["params"]) for group in trainer.optimizer.param_groups) == len(
        list(model.parameters())
    )


def test_fsdp_false_is_refused_with_more_than_one_process():
    info = DistInfo(rank=0, local_rank=0, world_size=2, local_world_size=2, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="--fsdp false needs a single process"):
        use_fsdp(_cfg(fsdp="false"), info)
    assert use_fsdp(_cfg(fsdp="auto"), info)


def test_loss_kernel_auto_is_triton_on_gpu_and_torch_on_cpu(monkeypatch):
    cpu = DistInfo(rank=0, local_rank=0, world_size=1, local_world_size=1, device=torch.device("cpu"))
    gpu = dataclasses.replace(cpu, device=torch.device("cuda", 0))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object() if name == "triton" else None)
    assert loss_kernel(_cfg(), gpu) == "triton"
    assert loss_kernel(_cfg(), cpu) == "eager"
    assert loss_kernel(_cfg(compile="true"), cpu) == "compiled"
    assert loss_kernel(_cfg(loss_kernel="compiled"), gpu) == "compiled"
    with pytest.raises(ValueError, match="--loss-kernel triton needs a CUDA device and the triton package"):
        loss_kernel(_cfg(loss_kernel="triton"), cpu)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert loss_kernel(_cfg(compile="true"), gpu) == "compiled"
    with pytest.raises(ValueError, match="the triton package"):
        loss_kernel(_cfg(loss_kernel="triton"), gpu)


@pytest.mark.parametrize(
    ("tuning", "coordinate", "autotune"),
    [("coordinate", True, False), ("max-autotune", True, True), ("default", False, False)],
)
def test_compile_tuning_sets_inductors_switches(tuning, coordinate, autotune):
    import torch._inductor.config as inductor_config

    try:
        configure_compiler(tuning)
        switches = (inductor_config.coordinate_descent_tuning, inductor_config.max_autotune)
        assert switches == (coordinate, autotune)
    finally:
        configure_compiler("default")


def test_learning_rate_warms_up_then_decays_to_the_floor():
    cfg = _cfg(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(cfg, 0) == pytest.approx(0.1)
    assert lr_at(cfg, 9) == pytest.approx(1.0)
    assert lr_at(cfg, 55) == pytest.approx(0.55)
    assert lr_at(cfg, 99) == pytest.approx(0.1, abs=1e-3)


def test_clipping_inside_fused_adamw_equals_clip_grad_norm():
    """The folded clip must give the same update as the textbook clip_grad_norm_ then AdamW."""
    results = []
    for folded in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
        norms = []
        for step in range(3):
            gen = torch.Generator().manual_seed(step)
            (model(torch.randn(5, 8, generator=gen)) * 30).pow(2).mean().backward()
            if folded:
                norms.append(clip_into_optimizer(model, opt, 0.5).item())
            else:
                norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5).item())
            opt.step()
            opt.zero_grad()
        assert min(norms) > 0.5  # clipping was active in every step
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(results[0], results[1], rtol=1e-5, atol=1e-7)


def _full_state(trainer):
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer)
    flat = {f"model.{k}": v for k, v in model_sd.items()}
    for pid, state in optim_sd["state"].items():
        flat |= {f"optim.{pid}.{k}": v for k, v in state.items()}
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).clone() for k, v in flat.items()}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("fsdp", ["auto", "true"])
def test_checkpoint_round_trip_is_bit_exact(gloo_world, tmp_path, fsdp, precision):
    cfg = _cfg(
        steps=3, checkpoint_dir=str(tmp_path), checkpoint_every=3, fsdp=fsdp, mixed_precision=precision
    )
    train(cfg)
    info = init_distributed("cpu")
    saved = Trainer(cfg, info)
    assert saved.start_step == 3
    loaded_state = _full_state(saved)
    # A fresh, never-trained trainer differs; after resuming it equals what was saved, bit for bit.
    fresh = Trainer(_cfg(steps=3, fsdp=fsdp, mixed_precision=precision), info)
    fresh_state = _full_state(fresh)
    assert any(
        not torch.equal(fresh_state[k], loaded_state[k]) for k in loaded_state if k.startswith("model")
    )
    again = Trainer(cfg, info)
    again_state = _full_state(again)
    assert loaded_state.keys() == again_state.keys()
    assert len([k for k in loaded_state if k.startswith("optim.")]) >= 3 * len(list(saved.model.parameters()))
    for key, value in loaded_state.items():
        assert torch.equal(value, again_state[key]), key


def _step_dirs(root):
    return sorted(path.name for path in root.iterdir())


def test_asynchronous_checkpoints_hold_what_synchronous_ones_do_and_retention_keeps_the_newest(
    gloo_world, tmp_path
):
    """The same 4 steps saved every 2 steps both ways: the asynchronous run keeps only its newest (keep-last
    1), marked complete once written; resuming from either gives the same state, bit for bit."""
    sync_cfg = _cfg(steps=4, checkpoint_dir=str(tmp_path / "sync"), checkpoint_every=2)
    async_cfg = _cfg(
        steps=4,
        checkpoint_dir=str(tmp_path / "async"),
        checkpoint_every=2,
        checkpoint_async="true",
        checkpoint_keep_last=1,
    )
    sync_summary, async_summary = train(sync_cfg), train(async_cfg)
    assert _step_dirs(tmp_path / "sync") == ["step-00000002", "step-00000004"]
    assert _step_dirs(tmp_path / "async") == ["step-00000004"]
    assert (tmp_path / "async" / "step-00000004" / checkpoint.MARKER).is_file()
    saved = async_summary.extra["checkpoints"]
    assert saved["saved"] == 2 and saved["asynchronous"] and len(saved["write_s"]) == 2
    assert not sync_summary.extra["checkpoints"]["asynchronous"]
    assert sync_summary.final_loss == async_summary.final_loss
    info = init_distributed("cpu")
    from_sync, from_async = Trainer(sync_cfg, info), Trainer(async_cfg, info)
    assert from_sync.start_step == from_async.start_step == 4
    sync_state, async_state = _full_state(from_sync), _full_state(from_async)
    assert sync_state.keys() == async_state.keys()
    for key, value in sync_state.items():
        assert torch.equal(value, async_state[key]), key


def test_retention_keeps_the_newest_and_every_mth_and_drops_dead_partial_saves(tmp_path):
    store = LocalStore(tmp_path)
    for step in (2, 4, 6, 8, 10):
        (tmp_path / f"step-{step:08d}").mkdir()
        checkpoint.write_marker(store, f"step-{step:08d}", step, None)
    (tmp_path / "step-00000005").mkdir()  # a save that died before its marker
    (tmp_path / "step-00000012").mkdir()  # a save still being written
    dropped = checkpoint.to_remove(store, keep_last=2, keep_every=4)
    assert dropped == ["step-00000002", "step-00000005", "step-00000006"]
    assert checkpoint.to_remove(store, 0, 0) == ["step-00000005"]
    assert checkpoint.to_remove(LocalStore(tmp_path / "missing"), 1, 0) == []


def test_incomplete_checkpoint_is_skipped(tmp_path):
    (tmp_path / "step-00000004").mkdir()
    done = tmp_path / "step-00000002"
    done.mkdir()
    (done / checkpoint.MARKER).write_text('{"step": 2}\n')
    assert checkpoint.latest_complete(LocalStore(tmp_path)) == (2, "step-00000002")
    assert checkpoint.latest_complete(LocalStore(tmp_path / "missing")) is None
    point = checkpoint.resume_point(LocalStore(tmp_path), MODEL_CONFIGS["tiny"])
    assert (point.step, point.name, point.skipped) == (2, "step-00000002", [str(tmp_path / "step-00000004")])


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun(args, env, tmp_path, name):
    summary = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2"]
    cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"]
    cmd += [str(FSDP_DIR / "train.py"), *args, "--summary-json", str(summary)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    # train.py leaves with os._exit once done (torch's C++ teardown used to abort finished ranks under load).
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [
        json.loads(line[len(METRIC_PREFIX) :])
        for line in proc.stdout.splitlines()
        if line.startswith(METRIC_PREFIX)
    ]
    return json.loads(summary.read_text()), metrics


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    """One uninterrupted 6-step run and the same run stopped after 3 steps then relaunched (2 ranks each)."""
    tmp_path = tmp_path_factory.mktemp("resume")
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env.pop(PEAK_ENV, None)
    base = ["--config", "tiny", "--steps", "6", "--batch-size", "2", "--seq-len", "32", "--warmup-steps", "2"]
    # The uninterrupted run gets the peak as the launcher hands it over: in the environment of every rank.
    whole = _torchrun(base, {**env, PEAK_ENV: "0.000002"}, tmp_path, "whole")
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "3"]
    first = _torchrun([*base, *ckpt, "--max-steps-this-run", "3"], env, tmp_path, "first")
    second = _torchrun([*base, *ckpt], env, tmp_path, "second")
    return whole, first, second


def test_resumed_run_continues_the_same_loss_curve(resume_runs):
    (whole, _), (first, _), (second, _) = resume_runs
    assert first["steps_this_run"] == 3 and first["resumed_from_step"] == 0
    assert second["resumed_from_step"] == 3 and second["steps_this_run"] == 3
    assert whole["losses"][:3] == first["losses"]
    assert whole["losses"][3:] == second["losses"]  # bit-identical, not approximately equal


def test_entrypoint_honours_the_launcher_contract(resume_runs):
    (summary, metrics), _, _ = resume_runs
    for key in (
        "testcase",
        "world_size",
        "nodes",
        "device",
        "gpu_model",
        "steps",
        "first_loss",
        "final_loss",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "peak_mem_gb",
        "elapsed_s",
    ):
        assert key in summary, key
    assert summary["testcase"] == "pytorch/fsdp"
    assert summary["world_size"] == 2 and summary["nodes"] == 1
    assert summary["tokens_per_s"] > 0 and summary["tflops_per_gpu"] > 0
    assert [m["step"] for m in metrics] == list(range(1, 7))  # one line per step, rank 0 only
    assert {"step", "loss", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_mem_gb"} <= metrics[0].keys()
    assert summary["final_loss"] == metrics[-1]["loss"]


def test_the_launchers_peak_reaches_mfu_and_its_absence_is_explained(resume_runs):
    (whole, metrics), (first, _), _ = resume_runs
    assert whole["peak_tflops"] == 2e-6 and whole["mfu_note"] is None
    assert whole["mfu"] == pytest.approx(whole["tflops_per_gpu"] / 2e-6)
    timed = [m for m in metrics if m["tflops_per_gpu"] is not None]
    assert timed and all(m["mfu"] == pytest.approx(m["tflops_per_gpu"] / 2e-6) for m in timed)
    assert first["mfu"] is None and first["peak_tflops"] is None
    assert first["mfu_note"] == PEAK_UNKNOWN
