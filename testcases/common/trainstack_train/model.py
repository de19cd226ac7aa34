"""The Llama-3 decoder: the network and nothing else (no parallelism, no optimizer, no data).

Rotary embeddings use the half-split ("rotate_half") layout, the one Hugging Face checkpoints are stored in,
so weights convert by renaming and concatenation only, never a permutation (see
:mod:`trainstack_train.hf_compat`).
The q/k/v projections are one weight (``wqkv``): one larger GEMM instead of three, two of them small under
grouped-query attention, fills the GPU's SMs in fuller waves and reads the normalised input once. Attention
goes through ``scaled_dot_product_attention`` so PyTorch picks flash or cuDNN kernels on Hopper; the loss is
computed by a fused linear cross-entropy so the full ``tokens x vocab`` fp32 logits never exist.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the universal spelling

from .config import ModelConfig
from .loss import float8_linear_cross_entropy, fused_linear_cross_entropy


def rope_frequencies(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies, with Llama 3.1's piecewise long-context rescaling when the shape has it."""
    half = torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**half)
    scaling = cfg.rope_scaling
    if not scaling:
        return inv_freq.float()
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled).float()


def rope_cos_sin(cfg: ModelConfig, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """``[2, seq_len, head_dim]`` table of cos and sin, computed in fp32 once per model."""
    inv_freq = rope_frequencies(cfg).to(device)
    positions = torch.arange(seq_len, dtype=torch.float32, device=device)
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return torch.stack((emb.cos(), emb.sin()))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``[batch, heads, seq, head_dim]`` by position; the table is cast to the activation dtype."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + _rotate_half(x) * sin


def repeat_kv(x: torch.Tensor, repeat: int) -> torch.Tensor:
    """``[batch, kv_heads, seq, head_dim]`` to ``kv_heads * repeat`` heads, each K/V head for its group.

    Query head ``h`` reads K/V head ``h // repeat``: the order SDPA's ``enable_gqa`` and Hugging Face's
    ``repeat_kv`` use. The result is a copy (the reshape of an expanded view).
    """
    bsz, kv_heads, seq, head_dim = x.shape
    return (
        x[:, :, None]
        .expand(bsz, kv_heads, repeat, seq, head_dim)
        .reshape(bsz, kv_heads * repeat, seq, head_dim)
    )


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32 and cast back, as Llama's reference does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise in fp32 so bf16 activations do not lose the variance's small bits."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)

    def reset_parameters(self) -> None:
        """Unit gain, the identity at start."""
        nn.init.ones_(self.weight)


class Attention(nn.Module):
    """Grouped-query causal self-attention with the q, k and v projections fused into one weight.

    ``wqkv`` stacks the q rows, then k, then v (Hugging Face's ``q_proj``, ``k_proj``, ``v_proj`` concatenated
    along dim 0), so one ``dim x (n_heads + 2 n_kv_heads) head_dim`` GEMM replaces three: the small k and v
    GEMMs of grouped-query attention would otherwise run as partial waves, and ``x`` is read once, not three
    times. The split afterwards is a view, not a copy.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.head_dim
        self.qkv_sizes = (
            cfg.n_heads * cfg.head_dim,
            cfg.n_kv_heads * cfg.head_dim,
            cfg.n_kv_heads * cfg.head_dim,
        )
        self.wqkv = nn.Linear(cfg.dim, sum(self.qkv_sizes), bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        # Set through Transformer.set_expand_kv from ``--gqa`` before compiling (Dynamo specialises on it).
        self.expand_kv = False

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """Project, rotate, attend; K and V keep their ``n_kv_heads`` heads unless ``expand_kv`` is set.

        Native grouped-query attention (``enable_gqa``) lets the kernel read each KV head for its group of
        query heads: no copy of K and V to ``n_heads`` heads forward and no sum of the copies' gradients
        backward. ``expand_kv`` keeps the copies for SDPA backends that cannot take fewer KV heads.
        """
        bsz, seq, _ = x.shape
        q, k, v = torch.split(self.wqkv(x), self.qkv_sizes, dim=-1)
        q = q.view(bsz, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope[0, :seq], rope[1, :seq]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        repeat = self.n_heads // self.n_kv_heads
        if repeat > 1 and self.expand_kv:
            k, v = repeat_kv(k, repeat), repeat_kv(v, repeat)
        grouped = k.shape[1] != self.n_heads
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped)
        return self.wo(out.transpose(1, 2).reshape(bsz, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``.

    Unlike q/k/v, the gate and up projections stay two weights: both GEMMs are large enough to fill the GPU
    on their own, and with one fused weight Inductor's backward writes the two gradient halves through a
    concatenation that reads every input twice (measured on an H200: 10.2 ms against 4.9 ms per 1B step).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Gated MLP; under torch.compile the SiLU and product fuse into one kernel."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm residual block: the unit that FSDP shards, compile compiles and AC checkpoints."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """Two residual branches."""
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Embedding, ``n_layers`` blocks, final norm and output projection (tied to the embedding for 1B)."""

    def __init__(self, cfg: ModelConfig, rope_len: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg) for i in range(cfg.n_layers)})
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.rope_len = rope_len or min(cfg.max_seq_len, 8192)
        self.register_buffer("rope", rope_cos_sin(cfg, self.rope_len), persistent=False)
        self.loss_chunk_tokens = 4096
        self.loss_kernel = "eager"
        # Linears swapped for float8 ones by trainstack_train.fp8 (0 on the default bf16 path), and whether
        # the LM head's GEMMs (inside the fused loss) run in float8 too (False on the default bf16 path).
        self.fp8_linears = 0
        self.fp8_head = False

    def init_weights(self, seed: int) -> None:
        """Deterministic init after ``to_empty`` (meta-device construction leaves memory uninitialised)."""
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg.n_layers)
        with torch.no_grad():
            nn.init.normal_(self.tok_embeddings.weight, std=std)
            for block in self.layers.values():
                for name, module in block.named_modules():
                    if isinstance(module, nn.Linear):
                        # Output projections only; the fused wqkv keeps its parts' plain std.
                        depth_scaled = name.endswith(("wo", "w2"))
                        nn.init.normal_(module.weight, std=out_std if depth_scaled else std)
                    elif isinstance(module, RMSNorm):
                        module.reset_parameters()
            self.norm.reset_parameters()
            if not self.cfg.tie_embeddings:
                nn.init.normal_(self.output.weight, std=std)
        self.init_rope()
        torch.random.set_rng_state(gen_state)

    def set_expand_kv(self, expand: bool) -> None:
        """Every block's attention copies K/V to the query heads' count (``--gqa expand``) or not."""
        for block in self.layers.values():
            block.attention.expand_kv = expand

    def tie_weights(self) -> None:
        """Share the embedding with the output projection again when the shape ties them.

        ``to_empty`` gives every module its own new parameter, so a model materialised from the meta device
        without FSDP (which keeps the tie itself) would otherwise train, and count, two matrices.
        """
        if self.cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def init_rope(self) -> None:
        """Re-create the fp32 cos/sin table (``to(bf16)`` or ``to_empty`` would have rounded or voided it)."""
        self.rope = rope_cos_sin(self.cfg, self.rope_len, device=self.rope.device)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """Everything up to, and including, the final norm."""
        h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h, self.rope)
        return self.norm(h)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Mean next-token loss when ``targets`` is given (the training path), else the logits."""
        h = self.hidden_states(tokens)
        if targets is None:
            return self.output(h)
        weight = self.output.weight
        flat = h.reshape(-1, h.shape[-1])
        if flat.dtype != weight.dtype:
            flat = flat.to(weight.dtype)
        loss_fn = float8_linear_cross_entropy if self.fp8_head else fused_linear_cross_entropy
        return loss_fn(flat, weight, targets.reshape(-1), self.loss_chunk_tokens, self.loss_kernel)

    def num_params(self) -> int:
        """Unique parameters (a tied embedding counts once), the N of the 6N FLOP rule."""
        seen: dict[int, int] = {}
        for p in self.parameters():
            seen[id(p)] = p.numel()
        return sum(seen.values())
