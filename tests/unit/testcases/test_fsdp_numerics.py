"""Our Llama against Hugging Face transformers' LlamaForCausalLM with the same weights (CPU, tiny shape).

transformers (pinned in requirements-testcases.txt, no torch requirement of its own) is the reference: in
float64 the two agree to 1e-7 (both build the RoPE cos/sin table in fp32, HF by its own fp32 arithmetic, so
fp64 cannot agree to 1e-15), in float32 to 1e-5, for logits, the loss of our
fused linear cross-entropy and the gradients. The Llama-3 RoPE rescaling is switched on with a short
original context so that its piecewise branches actually change the frequencies at this tiny head size.
"""

import dataclasses

import pytest
import torch

transformers = pytest.importorskip("transformers")

from trainstack_train.config import LLAMA3_ROPE_SCALING, MODEL_CONFIGS  # noqa: E402
from trainstack_train.hf_compat import from_hf, hf_config_kwargs, to_hf  # noqa: E402
from trainstack_train.model import Transformer, rope_frequencies  # noqa: E402

SCALING = {**LLAMA3_ROPE_SCALING, "original_max_position_embeddings": 64.0, "factor": 4.0}


def _pair(tied: bool, dtype: torch.dtype):
    cfg = dataclasses.replace(MODEL_CONFIGS["tiny"], rope_scaling=SCALING, tie_embeddings=tied)
    hf_cfg = transformers.LlamaConfig(**hf_config_kwargs(cfg))
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_cfg).to(dtype)
    ours = Transformer(cfg).to(dtype)
    result = ours.load_state_dict(from_hf(hf.state_dict(), cfg), strict=True)
    assert not result.missing_keys
    ours.init_rope()
    return cfg, hf, ours


def _batch(cfg, seed=1):
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, cfg.vocab_size, (3, 97), generator=gen)
    return rows[:, :-1], rows[:, 1:]


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-7), (torch.float32, 1e-5)])
@pytest.mark.parametrize("tied", [True, False])
def test_loss_logits_and_grads_match_hugging_face(dtype, tol, tied):
    cfg, hf, ours = _pair(tied, dtype)
    inputs, targets = _batch(cfg)
    hf_logits = hf(input_ids=inputs).logits
    ref = torch.nn.functional.cross_entropy(hf_logits.flatten(0, 1), targets.flatten())
    ref.backward()
    loss = ours(inputs, targets)
    loss.backward()
    assert abs(loss.item() - ref.item()) <= tol * ref.item()
    with torch.no_grad():
        assert torch.allclose(ours(inputs), hf_logits, rtol=0, atol=tol * 10)
    q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    qkv_grad = ours.layers["0"].attention.wqkv.weight.grad
    feed_forward = ours.layers["1"].feed_forward
    attn, mlp = hf.model.layers[0].self_attn, hf.model.layers[1].mlp
    pairs = [
        (ours.tok_embeddings.weight.grad, hf.model.embed_tokens.weight.grad),
        (qkv_grad[:q_rows], attn.q_proj.weight.grad),
        (qkv_grad[q_rows + kv_rows :], attn.v_proj.weight.grad),
        (feed_forward.w1.weight.grad, mlp.gate_proj.weight.grad),
        (feed_forward.w3.weight.grad, mlp.up_proj.weight.grad),
        (ours.norm.weight.grad, hf.model.norm.weight.grad),
    ]
    for mine, theirs in pairs:
        assert mine.shape == theirs.shape
        assert (mine - theirs).norm() <= tol * 10 * theirs.norm()


def test_rope_scaling_matches_hugging_face_frequencies():
    cfg, hf, _ = _pair(True, torch.float64)
    assert torch.allclose(rope_frequencies(cfg).double(), hf.model.rotary_emb.inv_freq.double(), rtol=1e-6)
    plain = dataclasses.replace(cfg, rope_scaling=None)
    assert not torch.allclose(rope_frequencies(plain), rope_frequencies(cfg))


def test_a_wrong_weight_is_detected():
    """The comparison can fail: one perturbed weight moves the loss well past the tolerance."""
    cfg, hf, ours = _pair(False, torch.float64)
    inputs, targets = _batch(cfg)
    with torch.no_grad():
        v_row = (cfg.n_heads + cfg.n_kv_heads) * cfg.head_dim
        ours.layers["1"].attention.wqkv.weight[v_row, 0] += 0.5
        ref = torch.nn.functional.cross_entropy(hf(input_ids=inputs).logits.flatten(0, 1), targets.flatten())
        assert abs(ours(inputs, targets).item() - ref.item()) > 1e-6


def test_state_dict_names_round_trip():
    cfg, hf, ours = _pair(False, torch.float32)
    converted = to_hf(ours.state_dict(), cfg)
    assert set(converted) == set(hf.state_dict())
    assert set(from_hf(converted, cfg)) == set(ours.state_dict())


@pytest.mark.parametrize("tied", [True, False])
def test_conversion_round_trips_exactly_in_hugging_face_shapes(tied):
    """Splitting and concatenating the fused weights loses nothing, and the parts land in HF's places."""
    cfg = dataclasses.replace(MODEL_CONFIGS["tiny"], tie_embeddings=tied)
    ours = Transformer(cfg)
    ours.init_weights(seed=3)
    state = ours.state_dict()
    converted = to_hf(state, cfg)
    hf_state = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_config_kwargs(cfg))).state_dict()
    assert {k: v.shape for k, v in converted.items()} == {k: v.shape for k, v in hf_state.items()}
    back = from_hf(converted, cfg)
    assert set(back) == set(state)
    assert all(torch.equal(back[name], tensor) for name, tensor in state.items())


def test_conversion_splits_in_query_key_value_order():
    """Each fused row block goes to the right HF projection, so a swapped split order cannot pass."""
    cfg = MODEL_CONFIGS["tiny"]
    ours = Transformer(cfg)
    ours.init_weights(seed=4)
    converted = to_hf(ours.state_dict(), cfg)
    attention = ours.layers["1"].attention
    q_rows, kv_rows = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    expected = {
        "self_attn.q_proj": attention.wqkv.weight[:q_rows],
        "self_attn.k_proj": attention.wqkv.weight[q_rows : q_rows + kv_rows],
        "self_attn.v_proj": attention.wqkv.weight[q_rows + kv_rows :],
    }
    for hf_name, rows in expected.items():
        assert torch.equal(converted[f"model.layers.1.{hf_name}.weight"], rows)


def test_a_checkpoint_lacking_a_part_fails_naming_it():
    cfg = MODEL_CONFIGS["tiny"]
    converted = to_hf(Transformer(cfg).state_dict(), cfg)
    del converted["model.layers.0.self_attn.k_proj.weight"]
    with pytest.raises(KeyError, match=r"model\.layers\.0\.self_attn\.k_proj\.weight"):
        from_hf(converted, cfg)


def test_a_tied_model_takes_its_missing_head_from_the_embedding():
    cfg = dataclasses.replace(MODEL_CONFIGS["tiny"], tie_embeddings=True)
    converted = to_hf(Transformer(cfg).state_dict(), cfg)
    del converted["lm_head.weight"]
    back = from_hf(converted, cfg)
    assert back["output.weight"] is converted["model.embed_tokens.weight"]
