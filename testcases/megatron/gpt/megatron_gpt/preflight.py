"""``--preflight true``: what a run does before megatron-core's first CUDA-only call, checked on every rank.

Why: megatron-core 0.16.1 cannot take a step without CUDA (``config.CUDA_ONLY``), yet most of what can go
wrong in a launch happens before that step: the process group across nodes, megatron-core's parallel groups,
the model built from the named shape, the rows each data-parallel rank reads, the checkpoint directory. A
preflight runs exactly those parts of a run, the run's own functions, on CPU nodes as well as GPU ones, and
stops before ``DistributedDataParallel`` (the first call that needs a GPU). Its summary is the training
summary's type at the same path, marked ``preflight: true``, with the checks and the call it stopped before,
and with no loss or throughput: it must never read as a training result.

Every rank runs every check; one ``all_gather_object`` then brings every rank's results and facts to every
rank, where the cross-rank agreement check is computed the same way, so all ranks exit alike (0 only when
every check passed on every rank).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from torch import nn
from trainstack_train.config import MODEL_CONFIGS
from trainstack_train.data import BatchSource, Stateful
from trainstack_train.metrics import Summary, now
from trainstack_train.parallel import DistInfo, init_distributed

from . import build, checkpoint
from .config import CONFIGS, CUDA_ONLY, TrainConfig
from .loop import TESTCASE, micro_batches

# The call a training run makes right after everything a preflight checks (build.build): on a node without
# CUDA it fails there ("Torch not compiled with CUDA enabled" from torch's CPU build).
FIRST_CUDA_CALL = (
    "megatron.core.distributed.DistributedDataParallel(...) in megatron_gpt.build.build, right after the "
    "model: its _ParamAndGradBuffer allocates the gradient buffer on torch.cuda.current_device()"
)
# Under pipeline parallelism a tied output layer (the 1B shape) needs CUDA already while GPTModel is built:
# its last stage's copy of the embedding is moved to the GPU to be all-reduced with the first stage's.
TIED_PP_CALL = (
    "megatron.core.models.gpt.GPTModel(...) in megatron_gpt.build.gpt_model: with a tied output under "
    "pipeline parallelism, LanguageModule.setup_embeddings_and_output_layer calls weight.data.cuda() to "
    "all-reduce the embedding between the first and last stage"
)
# Under --checkpoint-dir, where the round trip writes: not a step-N directory, so a later training run with
# the same directory never resumes from it; removed once every rank compared.
ROUND_TRIP_DIR = "preflight"
ROUND_TRIP_STEP = 1
# Model modules the local layer spec must have produced (Transformer Engine's would be named otherwise).
LOCAL_SPEC_MODULES = ("Float16Module", "GPTModel", "RMSNorm", "DotProductAttention")


@dataclass
class Check:
    """One rank's result of one check; ``detail`` says what was compared, ``value`` the count a model check
    measured (the summary's number for the shape)."""

    name: str
    passed: bool
    detail: str
    skipped: bool = False
    value: int | None = None


def cuda_call_in_build(cfg: TrainConfig) -> str | None:
    """The CUDA-only call inside GPTModel's construction for this shape and degrees, if there is one."""
    return TIED_PP_CALL if cfg.model.tie_embeddings and cfg.pp > 1 else None


def first_cuda_call(cfg: TrainConfig) -> str:
    """Where a run of these arguments first needs CUDA: where a preflight stops."""
    return cuda_call_in_build(cfg) or FIRST_CUDA_CALL


def fsdp_params(name: str) -> int:
    """pytorch/fsdp's parameter count for a named shape: its Transformer on the meta device (tied: once).

    The number pytorch/fsdp trains and puts in its FLOP formula: equal counts, one network in both cases.
    """
    from trainstack_train.model import Transformer

    with torch.device("meta"):
        model = Transformer(MODEL_CONFIGS[name], rope_len=2)
    return model.num_params()


def check_groups(cfg: TrainConfig, world: int) -> tuple[Check, dict[str, int]]:
    """megatron-core's TP/PP/DP groups as the degrees ask (build.init_parallel made them over the job)."""
    sizes = {
        "tp": parallel_state.get_tensor_model_parallel_world_size(),
        "pp": parallel_state.get_pipeline_model_parallel_world_size(),
        "dp": parallel_state.get_data_parallel_world_size(),
    }
    ranks = {
        "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
        "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
        "dp_rank": parallel_state.get_data_parallel_rank(),
    }
    wanted = {"tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp_degree(world)}
    passed = sizes == wanted and sizes["tp"] * sizes["pp"] * sizes["dp"] == world
    detail = (
        f"tp {sizes['tp']} x pp {sizes['pp']} x dp {sizes['dp']} over {world} rank(s) (asked "
        f"{wanted['tp']} x {wanted['pp']} x {wanted['dp']}); this rank tp {ranks['tp_rank']}, pp "
        f"{ranks['pp_rank']}, dp {ranks['dp_rank']}"
    )
    return Check("parallel_groups", passed, detail), sizes | ranks


def check_model(cfg: TrainConfig) -> tuple[Check, nn.Module | None, int | None]:
    """The named shape built on CPU as a run builds it (build.build_model: local spec, bf16), counted."""
    call = cuda_call_in_build(cfg)
    if call:
        return (
            Check("model_cpu", True, f"{cfg.config}: not built, it needs CUDA: {call}", skipped=True),
            None,
            None,
        )
    _config, model, params = build.build_model(cfg, torch.device("cpu"))
    expected = fsdp_params(cfg.config)
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    modules = {type(m).__name__ for m in model.modules()}
    missing = [name for name in LOCAL_SPEC_MODULES if name not in modules]
    passed = params == expected and dtypes == ["torch.bfloat16"] and not missing
    detail = (
        f"{cfg.config}: {params:,} parameters built on CPU (pytorch/fsdp's count {expected:,}), dtypes "
        f"{dtypes}, local spec modules {'present' if not missing else 'missing ' + str(missing)}"
    )
    return Check("model_cpu", passed, detail, value=params), model, params


def check_meta_shapes(cfg: TrainConfig, world: int) -> list[Check]:
    """The larger named shapes on the meta device with the run's degrees: exact counts, no memory.

    A shape the run's degrees do not fit (its rules fail) is not built; its check says which rule.
    """
    checks = []
    for name in CONFIGS[CONFIGS.index(cfg.config) + 1 :]:
        shape_cfg = dataclasses.replace(cfg, config=name)
        try:
            shape_cfg.validate(world)
        except ValueError as err:
            detail = f"not built: the run's degrees break a rule: {err}"
            checks.append(Check(f"model_meta_{name}", True, detail, skipped=True))
            continue
        call = cuda_call_in_build(shape_cfg)
        if call:
            checks.append(
                Check(f"model_meta_{name}", True, f"not built, it needs CUDA: {call}", skipped=True)
            )
            continue
        params = build.count_params(build.meta_model(shape_cfg))
        expected = fsdp_params(name)
        detail = f"{name}: {params:,} parameters on the meta device (pytorch/fsdp's count {expected:,})"
        checks.append(Check(f"model_meta_{name}", params == expected, detail, value=params))
    return checks


def check_data(cfg: TrainConfig, vocab_size: int) -> tuple[Check, dict[str, Any]]:
    """This rank's micro-batches of step 0, as the training loop cuts them (loop.micro_batches).

    Checked: their count and shapes, that together they are pytorch/fsdp's rows for this data-parallel rank in
    order, that labels are the inputs shifted by one token, and that every id fits the vocabulary.
    """
    dp_rank = parallel_state.get_data_parallel_rank()
    dp_world = parallel_state.get_data_parallel_world_size()
    source = BatchSource(cfg.data, vocab_size, cfg.batch_size, cfg.seq_len, dp_rank, dp_world, cfg.seed)
    cpu = torch.device("cpu")
    inputs, labels = source.batch(0, cpu)
    # A prepared corpus is read in order, each step once: rewind to step 0 for the loop's cut of its rows.
    source.resume(0, None)
    count = cfg.micro_batches()
    pairs = list(micro_batches(source, 0, cpu, count))
    shapes = sorted({tuple(part.shape) for pair in pairs for part in pair})
    rows_kept = torch.equal(torch.cat([p[0] for p in pairs]), inputs) and torch.equal(
        torch.cat([p[1] for p in pairs]), labels
    )
    shifted = all(torch.equal(x[:, 1:], y[:, :-1]) for x, y in pairs)
    in_vocab = int(inputs.min()) >= 0 and int(torch.maximum(inputs, labels).max()) < vocab_size
    wanted = [(cfg.batch_size // count, cfg.seq_len)]
    passed = len(pairs) == count and shapes == wanted and rows_kept and shifted and in_vocab
    digest = hashlib.sha256(inputs.numpy().tobytes() + labels[:, -1:].numpy().tobytes()).hexdigest()[:16]
    detail = (
        f"{len(pairs)} micro-batch(es) of {[list(s) for s in shapes]} from {cfg.data} for dp rank {dp_rank} "
        f"of {dp_world}; rows in order {rows_kept}, labels shifted {shifted}, "
        f"ids below {vocab_size} {in_vocab}"
    )
    facts = {"micro_batches": len(pairs), "micro_batch_shape": list(shapes[0]), "rows_digest": digest}
    return Check("data", passed, detail), facts


def check_checkpoint(cfg: TrainConfig, model: nn.Module, rank: int, world: int) -> Check:
    """The case's checkpoint module round trip: save (every rank its file), perturb, load, compare, remove."""
    root = Path(cfg.checkpoint_dir) / ROUND_TRIP_DIR
    states: dict[str, Stateful] = {"model": model}
    before = {k: v.clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
    published = checkpoint.save(root, ROUND_TRIP_STEP, states)
    own = published / f"rank-{rank:05d}.pt"
    listed = sorted(p.name for p in published.iterdir()) if rank == 0 else []
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    perturbed = any(not torch.equal(before[k], v) for k, v in model.state_dict().items() if k in before)
    step = checkpoint.load(root, ROUND_TRIP_STEP, states)
    after = model.state_dict()
    restored = all(torch.equal(value, after[key]) for key, value in before.items())
    latest = checkpoint.latest_step(root)
    expected_files = [f"rank-{r:05d}.pt" for r in range(world)]
    files_ok = rank != 0 or listed == expected_files
    passed = own.is_file() and perturbed and step == ROUND_TRIP_STEP == latest and restored and files_ok
    detail = (
        f"{len(before)} tensors saved to {published}/{own.name} ({own.stat().st_size:,} bytes), perturbed "
        f"{perturbed}, loaded step {step}, equal after load {restored}"
        + (f"; files there {listed}" if rank == 0 else "")
    )
    if dist.is_initialized():
        dist.barrier()
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
    return Check("checkpoint_round_trip", passed, detail)


def check_agreement(gathered: list[dict[str, Any]]) -> Check:
    """What the ranks must agree on: one model (parameter count), one group layout, one micro-batch shape;
    ranks of one data-parallel rank (its TP and PP peers) read the same rows, and every DP rank is there."""
    facts = [g["facts"] for g in gathered]

    def distinct(key: str) -> list[Any]:
        return sorted({str(f[key]) for f in facts})

    shared = ("params", "tp", "pp", "dp", "micro_batches", "micro_batch_shape")
    disagree = [key for key in shared if len(distinct(key)) != 1]
    by_dp: dict[int, set[str]] = {}
    for fact in facts:
        by_dp.setdefault(fact["dp_rank"], set()).add(fact["rows_digest"])
    peers_differ = sorted(dp for dp, digests in by_dp.items() if len(digests) != 1)
    dp_complete = sorted(by_dp) == list(range(facts[0]["dp"]))
    passed = not disagree and not peers_differ and dp_complete
    detail = (
        f"{len(facts)} rank(s) agree on {[k for k in shared if k not in disagree]}"
        + (f", differ on {disagree} ({ {k: distinct(k) for k in disagree} })" if disagree else "")
        + f"; dp ranks {sorted(by_dp)} each read one row set"
        + (f" except {peers_differ}" if peers_differ else "")
    )
    return Check("ranks_agree", passed, detail)


def merge(gathered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per check: passed on every rank, on which ranks, rank 0's detail and each failure's own."""
    merged = []
    for index, first in enumerate(gathered[0]["checks"]):
        results = [(g["rank"], g["checks"][index]) for g in gathered]
        merged.append(
            {
                "name": first["name"],
                "passed": all(check["passed"] for _rank, check in results),
                "skipped": any(check["skipped"] for _rank, check in results),
                "passed_ranks": [rank for rank, check in results if check["passed"]],
                "detail": first["detail"],
                "value": first["value"],
                "failed": {str(rank): check["detail"] for rank, check in results if not check["passed"]},
            }
        )
    return merged


def run_checks(cfg: TrainConfig, info: DistInfo) -> tuple[list[Check], dict[str, Any]]:
    """This rank's checks, in a run's order, and the facts the ranks compare."""
    build.init_parallel(cfg, info.device)
    groups, facts = check_groups(cfg, info.world_size)
    model_check, model, params = check_model(cfg)
    checks = [groups, model_check, *check_meta_shapes(cfg, info.world_size)]
    data_check, data_facts = check_data(cfg, cfg.model.vocab_size)
    checks.append(data_check)
    if cfg.checkpoint_dir and model is None:
        checks.append(
            Check("checkpoint_round_trip", True, "not run: no model was built on CPU", skipped=True)
        )
    elif cfg.checkpoint_dir:
        checks.append(check_checkpoint(cfg, model, info.rank, info.world_size))
    return checks, facts | data_facts | {"params": params}


def preflight(cfg: TrainConfig) -> Summary:
    """Run the checks on every rank, agree over the process group, write rank 0's summary; no step is run."""
    t_start = now()
    info = init_distributed(cfg.device)
    checks, facts = run_checks(cfg, info)
    local = {"rank": info.rank, "checks": [dataclasses.asdict(c) for c in checks], "facts": facts}
    gathered: list[Any] = [None] * info.world_size
    dist.all_gather_object(gathered, local)
    agreement = check_agreement(gathered)
    results = [
        *merge(gathered),
        {
            "name": agreement.name,
            "passed": agreement.passed,
            "skipped": False,
            "passed_ranks": list(range(info.world_size)) if agreement.passed else [],
            "detail": agreement.detail,
            "value": None,
            "failed": {} if agreement.passed else {"all": agreement.detail},
        },
    ]
    passed = all(result["passed"] for result in results)
    _report(results, passed, info, first_cuda_call(cfg))
    summary = _summary(cfg, info, results, passed, facts, t_start)
    if info.is_main:
        summary.write(cfg.summary_json)
    return summary


def _report(results: list[dict[str, Any]], passed: bool, info: DistInfo, stop: str) -> None:
    """Rank 0 prints one line per check (never a metric line); a failed one also goes to standard error."""
    if not info.is_main:
        return
    for result in results:
        state = "skipped" if result["skipped"] else "passed" if result["passed"] else "FAILED"
        line = (
            f"megatron/gpt preflight: {result['name']} {state} on {len(result['passed_ranks'])}/"
            f"{info.world_size} rank(s): {result['detail']}"
        )
        print(line, file=sys.stdout if result["passed"] else sys.stderr, flush=True)
        for rank, detail in result["failed"].items():
            print(f"megatron/gpt preflight: {result['name']} on rank {rank}: {detail}", file=sys.stderr)
    skipped = sum(1 for result in results if result["skipped"])
    verdict = "a check FAILED" if not passed else "every check passed"
    if passed and skipped:
        verdict = f"every check that runs without CUDA passed ({skipped} skipped: they need it)"
    print(f"megatron/gpt preflight: {verdict}; no training step ran. It stops before {stop}")


def _summary(
    cfg: TrainConfig,
    info: DistInfo,
    results: list[dict[str, Any]],
    passed: bool,
    facts: dict[str, Any],
    t_start: float,
) -> Summary:
    """The training summary's type, marked as a preflight: no step, no loss, no throughput (all null)."""
    from importlib.metadata import version

    return Summary(
        testcase=TESTCASE,
        world_size=info.world_size,
        nodes=info.nodes,
        device=info.device.type,
        gpu_model=torch.cuda.get_device_name(info.device) if info.device.type == "cuda" else None,
        steps=0,
        first_loss=None,
        final_loss=None,
        tokens_per_s=None,
        tflops_per_gpu=None,
        mfu=None,
        peak_mem_gb=None,
        elapsed_s=now() - t_start,
        extra={
            "preflight": True,
            "passed": passed,
            "checks": results,
            "stops_before": CUDA_ONLY,
            "first_cuda_call": first_cuda_call(cfg),
            "tokens_per_s_per_gpu": None,
            "config": cfg.config,
            "params": facts["params"],
            "tp": cfg.tp,
            "pp": cfg.pp,
            "dp": facts["dp"],
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "data": cfg.data,
            "micro_batches": facts["micro_batches"],
            "checkpoint_dir": cfg.checkpoint_dir or None,
            "layer_spec": "local",
            "precision": cfg.precision,
            "torch": torch.__version__,
            "megatron_core": version("megatron-core"),
            "hostname": os.uname().nodename,
        },
    )
