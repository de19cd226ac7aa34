"""Process group, device placement, FSDP2 sharding, torch.compile and activation checkpointing.

Kept apart from the model so the same ``Transformer`` runs unsharded in the numerics tests and sharded here,
in torchtitan's order: activation checkpointing, then compile (per block, so FSDP2's hooks stay outside the
compiled graphs and one compiled block is reused by every layer), then ``fully_shard`` per block and root.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from .metrics import Placement, peak_memory_gb
from .model import Transformer


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits; ``nodes`` assumes the same number of processes on every node (torchrun)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device

    @property
    def nodes(self) -> int:
        """Node count derived from torchrun's variables."""
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        """Rank 0 prints metrics and writes the summary."""
        return self.rank == 0

    def placement(self) -> Placement:
        """Where this run ran, as its summary reports it: the processes, the device and a GPU's name."""
        gpu = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None
        return Placement(
            self.world_size,
            self.nodes,
            self.device.type,
            gpu,
            self.is_main,
            lambda: peak_memory_gb(self.device),
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def resolve_device(requested: str) -> torch.device:
    """``auto`` means this process's local GPU when CUDA is present, otherwise the CPU."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was requested but torch.cuda.is_available() is False")
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(requested_device: str) -> DistInfo:
    """Join torchrun's process group (nccl on GPU, gloo on CPU); plain ``python`` gives world size 1."""
    if "RANK" not in os.environ:
        os.environ.update(
            {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
            | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        )
    device = resolve_device(requested_device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    world = dist.get_world_size()
    return DistInfo(
        rank=dist.get_rank(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))),
        device=device,
    )


def configure_attention(backend: str) -> None:
    """Restrict SDPA to one backend when asked; ``auto`` leaves PyTorch's own priority order."""
    if backend == "auto" or not torch.cuda.is_available():
        return
    torch.backends.cuda.enable_flash_sdp(backend == "flash")
    torch.backends.cuda.enable_cudnn_sdp(backend == "cudnn")
    torch.backends.cuda.enable_mem_efficient_sdp(backend == "efficient")
    torch.backends.cuda.enable_math_sdp(backend == "math")


def configure_compiler(tuning: str) -> None:
    """``coordinate``: Inductor tunes each generated kernel's block sizes by coordinate descent.

    It times a few neighbouring launch configurations of every fused elementwise and reduction kernel once,
    at compile time, and keeps the fastest; the arithmetic is the same, up to the order of reductions.
    ``max-autotune`` also times Triton GEMM templates against cuBLAS for every matrix product, where a
    template can take the following elementwise work into its epilogue (CUDA graphs stay off).
    """
    import torch._inductor.config as inductor_config

    inductor_config.coordinate_descent_tuning = tuning in ("coordinate", "max-autotune")
    inductor_config.max_autotune = tuning == "max-autotune"


def apply_activation_checkpointing(model: Transformer, mode: str) -> None:
    """``full`` recomputes every block; ``selective`` every second one (half the memory saved)."""
    if mode == "none":
        return
    for name in list(model.layers.keys()):
        if mode == "full" or int(name) % 2 == 0:
            model.layers[name] = checkpoint_wrapper(model.layers[name], preserve_rng_state=False)


def apply_compile(model: Transformer) -> None:
    """Compile each block separately; identical blocks share one compiled graph, so compile time stays low.

    The final norm is compiled too: left eager, its fp32 upcast, square, mean, scale and downcast, forward
    and backward, are a dozen separate passes over the ``tokens x dim`` activations. The loss kernel is
    chosen apart from this, by :func:`trainstack_train.loop.loss_kernel`.
    """
    for name, block in model.layers.items():
        model.layers[name] = torch.compile(block, fullgraph=True)
    model.norm = torch.compile(model.norm, fullgraph=True)


# Below this many parameters the gathered bf16 weights (2 bytes each) are kept from forward to backward.
KEEP_GATHERED_BELOW = 3_000_000_000


def reshard_policy(setting: str, num_params: int) -> bool:
    """``auto``: free gathered weights after forward only for large models.

    Keeping them (ZeRO-2 style) saves the backward all-gather and its bf16 cast, about 2 % of a 1B step on
    one H200, for 2 bytes per parameter of memory; at 8B that would be 16 GB, so larger shapes reshard.
    """
    if setting == "auto":
        return num_params >= KEEP_GATHERED_BELOW
    return setting == "true"


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, param_dtype: torch.dtype, reshard: bool = True) -> None:
    """Shard each block, then the root (embedding, final norm and output, tied or not, share one group).

    Parameters are gathered in ``param_dtype`` (bf16 on GPU) while gradients are reduced in fp32, so the
    fp32 master weights see full-precision gradient sums.
    """
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    layers = list(model.layers.values())  # type: ignore[union-attr]
    for index, block in enumerate(layers):
        # The last block is resharded right away by the root's backward anyway; keeping it gathered saves
        # one all-gather per step.
        keep = not reshard or index == len(layers) - 1
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=not keep)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def build_mesh(info: DistInfo) -> DeviceMesh:
    """A 1-D mesh over all ranks: plain FSDP (no HSDP/TP in this test case)."""
    return init_device_mesh(info.device.type, (info.world_size,))
