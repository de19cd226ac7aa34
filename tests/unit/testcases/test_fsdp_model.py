"""Shapes, parameter counts, configuration errors and the fused cross-entropy of the pytorch/fsdp model."""

import dataclasses

import pytest
import torch
from trainstack_train.config import MODEL_CONFIGS, PEAK_ENV, parse_args
from trainstack_train.loss import fused_linear_cross_entropy
from trainstack_train.metrics import PEAK_UNKNOWN, flops_per_token, mfu_note, throughput_fields
from trainstack_train.model import Transformer


def test_forward_shapes_and_scalar_loss():
    cfg = MODEL_CONFIGS["tiny"]
    model = Transformer(cfg, rope_len=64)
    model.init_weights(0)
    tokens = torch.randint(0, cfg.vocab_size, (3, 40))
    assert model(tokens).shape == (3, 40, cfg.vocab_size)
    assert model.hidden_states(tokens).shape == (3, 40, cfg.dim)
    loss = model(tokens, tokens)
    assert loss.shape == ()
    assert torch.isfinite(loss)


def test_native_grouped_query_attention_equals_expanded_kv_heads_in_fp64():
    """``--gqa native`` must compute what the K/V copies computed, forward and backward."""
    cfg = MODEL_CONFIGS["small"]
    assert cfg.n_kv_heads < cfg.n_heads
    model = Transformer(cfg, rope_len=64).double()
    model.init_weights(0)
    tokens = torch.randint(0, cfg.vocab_size, (2, 48))
    runs = []
    for expand in (False, True):
        model.set_expand_kv(expand)
        model.zero_grad()
        loss = model(tokens, tokens)
        loss.backward()
        runs.append((loss.detach(), model.layers["0"].attention.wqkv.weight.grad.clone()))
    (native_loss, native_grad), (expanded_loss, expanded_grad) = runs
    torch.testing.assert_close(native_loss, expanded_loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(native_grad, expanded_grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(
    ("name", "params"),
    [("llama3_2_1b", 1_235_814_400), ("llama3_1_8b", 8_030_261_248), ("llama3_70b", 70_553_706_496)],
)
def test_published_shapes_have_the_published_parameter_counts(name, params):
    with torch.device("meta"):
        model = Transformer(MODEL_CONFIGS[name])
    assert model.num_params() == params


def test_flop_formula_matches_the_hugging_face_reference():
    """The Hugging Face reference figure for the 1B shape, 46,957 tok/s = 39.0 % MFU of 989 TFLOP/s, holds."""
    cfg = MODEL_CONFIGS["llama3_2_1b"]
    per_token = flops_per_token(cfg, 1_235_814_400, 2048)
    assert per_token == 6 * 1_235_814_400 + 12 * 16 * 2048 * 2048
    assert round(46_957 * per_token / 989e12, 3) == 0.390
    rates = throughput_fields(46_957.0, 1, per_token, 989.0)
    assert round(rates["mfu"], 3) == 0.390
    assert throughput_fields(46_957.0, 1, per_token, None)["mfu"] is None
    assert mfu_note(989.0) is None and mfu_note(None) == PEAK_UNKNOWN


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_fused_cross_entropy_equals_reference_in_fp64(chunk):
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(50, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(40, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    targets = torch.randint(0, 40, (50,), generator=gen)
    targets[[3, 17]] = -100
    loss = fused_linear_cross_entropy(hidden, weight, targets, chunk)
    (2.5 * loss).backward()
    h_ref = hidden.detach().clone().requires_grad_()
    w_ref = weight.detach().clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h_ref @ w_ref.t(), targets, ignore_index=-100)
    (2.5 * ref).backward()
    assert torch.allclose(loss, ref, rtol=1e-12, atol=0)
    assert torch.allclose(hidden.grad, h_ref.grad, rtol=1e-10, atol=1e-14)
    assert torch.allclose(weight.grad, w_ref.grad, rtol=1e-10, atol=1e-14)


def test_bf16_fused_cross_entropy_stays_within_bf16_error():
    gen = torch.Generator().manual_seed(4)
    hidden = torch.randn(256, 32, generator=gen)
    weight = torch.randn(300, 32, generator=gen) * 0.2
    targets = torch.randint(0, 300, (256,), generator=gen)
    ref = torch.nn.functional.cross_entropy(hidden.double() @ weight.double().t(), targets)
    low = fused_linear_cross_entropy(hidden.bfloat16(), weight.bfloat16(), targets, 64)
    assert abs(low.double().item() - ref.item()) / ref.item() < 1e-2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--config", "nope"], "--config"),
        (["--seq-len", "999999"], "--seq-len"),
        (["--ac", "sometimes"], "--ac"),
        (["--checkpoint-every", "5"], "--checkpoint-dir"),
        (["--checkpoint-keep-last", "2"], "--checkpoint-keep-last needs --checkpoint-every"),
        (["--checkpoint-async", "true"], "--checkpoint-async needs --checkpoint-every"),
        (["--checkpoint-async", "later"], "--checkpoint-async"),
        (["--checkpoint-staging", "locked"], "--checkpoint-staging must be one of ('pageable', 'pinned')"),
        (
            ["--checkpoint-every", "2", "--checkpoint-dir", "/tmp/ckpt", "--checkpoint-staging", "pinned"],
            "--checkpoint-staging pinned needs --checkpoint-async true",
        ),
        (["--checkpoint-keep-every", "-1"], "--checkpoint-keep-every must be >= 0"),
        (["--compile", "maybe"], "--compile"),
        (["--compile-tuning", "max"], "--compile-tuning"),
        (["--loss-kernel", "fastest"], "--loss-kernel"),
        (["--gqa", "repeat"], "--gqa"),
        (["--gqa", "native", "--attn-backend", "efficient"], "--gqa expand"),
        (["--no-such-option", "1"], "--no-such-option"),
        (["--peak-tflops", "0"], "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", "-989"], "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", "inf"], "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", "nan"], "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", "H200"], "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", ""], "--peak-tflops must be a finite number > 0"),
    ],
)
def test_bad_arguments_fail_naming_the_option(argv, needle, capsys, monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "native"),
        (["--attn-backend", "efficient"], "expand"),
        (["--gqa", "expand"], "expand"),
        (["--gqa", "native", "--attn-backend", "cudnn"], "native"),
    ],
)
def test_gqa_auto_is_native_except_with_the_efficient_kernel(argv, mode):
    assert parse_args(argv).gqa_mode == mode


def test_arguments_parse_in_the_launchers_form():
    cfg = parse_args(["--config", "small", "--steps", "7", "--compile", "false", "--lr", "0.01"])
    assert (cfg.config, cfg.steps, cfg.compile, cfg.lr) == ("small", 7, "false", 0.01)


def test_the_peak_comes_from_the_option_else_the_launchers_variable(monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert parse_args([]).peak_tflops is None
    assert parse_args(["--peak-tflops", "989.4"]).peak_tflops == 989.4
    monkeypatch.setenv(PEAK_ENV, "2250")
    assert parse_args([]).peak_tflops == 2250.0
    assert parse_args(["--peak-tflops", "312"]).peak_tflops == 312.0  # the option wins
    monkeypatch.setenv(PEAK_ENV, " ")
    assert parse_args([]).peak_tflops is None  # an empty variable counts as unset


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "989 TFLOP/s"])
def test_a_bad_peak_in_the_environment_names_the_variable(value, capsys, monkeypatch):
    monkeypatch.setenv(PEAK_ENV, value)
    with pytest.raises(SystemExit) as exc:
        parse_args([])
    assert exc.value.code == 2
    assert f"{PEAK_ENV} (the default of --peak-tflops) must be a finite number > 0" in capsys.readouterr().err


def test_model_config_rejects_inconsistent_heads():
    bad = dataclasses.replace(MODEL_CONFIGS["tiny"], n_kv_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        bad.validate()
