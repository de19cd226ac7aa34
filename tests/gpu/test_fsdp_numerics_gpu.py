"""Our Llama against Hugging Face LlamaForCausalLM with the same weights on the same batch, on the GPU.

The 1B shape (vocabulary 128256, tied embedding, Llama-3 RoPE scaling) with two layers instead of sixteen,
so the test is quick but the output projection and loss run at the real vocabulary size.
Tolerances: fp32 with TF32 off agrees to 1e-5 relative (different but exact-math-equivalent kernel orders);
in bf16 ours must be no further from the fp32 loss than Hugging Face's own bf16 autocast is, plus 2e-3.
"""

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

from trainstack_train.config import MODEL_CONFIGS  # noqa: E402
from trainstack_train.hf_compat import from_hf, hf_config_kwargs  # noqa: E402
from trainstack_train.model import Transformer  # noqa: E402
from trainstack_train.parallel import apply_compile  # noqa: E402

CFG = dataclasses.replace(MODEL_CONFIGS["llama3_2_1b"], n_layers=2)


@pytest.fixture(scope="module")
def pair():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf_cfg = transformers.LlamaConfig(**hf_config_kwargs(CFG))
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        hf = transformers.LlamaForCausalLM(hf_cfg)
        ours = Transformer(CFG, rope_len=1024)
    ours.load_state_dict(from_hf(hf.state_dict(), CFG), strict=False)
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(0, CFG.vocab_size, (2, 513), generator=gen).cuda()
    return hf, ours, rows[:, :-1], rows[:, 1:]


def _hf_loss(hf, inputs, targets, autocast):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = hf(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def test_fp32_loss_logits_and_grads_match(pair):
    hf, ours, inputs, targets = pair
    ref = _hf_loss(hf, inputs, targets, autocast=False)
    ref.backward()
    loss = ours(inputs, targets)
    loss.backward()
    assert torch.isfinite(loss)
    assert abs(loss.item() - ref.item()) / ref.item() < 1e-5
    with torch.no_grad():
        diff = (ours(inputs) - hf(input_ids=inputs).logits).abs().max().item()
    assert diff < 1e-3
    ours_grad = ours.layers["1"].feed_forward.w2.weight.grad
    hf_grad = hf.model.layers[1].mlp.down_proj.weight.grad
    assert (ours_grad - hf_grad).norm() / hf_grad.norm() < 1e-4
    emb = ours.tok_embeddings.weight.grad
    assert (emb - hf.model.embed_tokens.weight.grad).norm() / emb.norm() < 1e-4
    hf.zero_grad(set_to_none=True)
    ours.zero_grad(set_to_none=True)


@pytest.mark.parametrize("loss_kernel", ["compiled", "triton"])
def test_bf16_compiled_is_as_close_to_fp32_as_hf_autocast(pair, loss_kernel):
    hf, ours, inputs, targets = pair
    with torch.no_grad():
        fp32 = _hf_loss(hf, inputs, targets, autocast=False).item()
        hf_bf16 = _hf_loss(hf, inputs, targets, autocast=True).item()
    with torch.device("cuda"):
        fast = Transformer(CFG, rope_len=1024)
    fast.load_state_dict(ours.state_dict())
    fast.to(torch.bfloat16)
    fast.init_rope()
    apply_compile(fast)
    fast.loss_kernel = loss_kernel
    with torch.no_grad():
        ours_bf16 = fast(inputs, targets).item()
    assert abs(ours_bf16 - fp32) <= 2 * abs(hf_bf16 - fp32) + 2e-3, (fp32, hf_bf16, ours_bf16)


def test_triton_cross_entropy_matches_the_torch_reference_at_the_full_vocabulary():
    from trainstack_train.loss import ce_chunk_forward_backward
    from trainstack_train.xent_triton import ce_chunk_forward_backward_triton

    gen = torch.Generator(device="cuda").manual_seed(2)
    logits = (torch.randn(1024, CFG.vocab_size, device="cuda", generator=gen) * 3).bfloat16()
    targets = torch.randint(0, CFG.vocab_size, (1024,), device="cuda", generator=gen)
    targets[::97] = -100
    scale = torch.tensor(1 / 1000, device="cuda")
    loss, grad = ce_chunk_forward_backward_triton(logits, targets, scale)
    ref_loss, ref_grad = ce_chunk_forward_backward(logits, targets, scale)
    assert abs(loss.item() - ref_loss.item()) <= 1e-5 * ref_loss.item()
    # Both round one fp32 value to bf16; the exponential's last bit may differ: one bf16 step at most.
    worst = (grad.float() - ref_grad.float()).abs().max().item()
    assert worst <= torch.finfo(torch.bfloat16).eps * ref_grad.float().abs().max().item()
    assert (grad[targets == -100] == 0).all()
