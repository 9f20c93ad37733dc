"""Input validation of the attention layers and TinyLM: empty sequences, recurrent state from another
batch size, bad configs, bad ``generate`` arguments. Each bad input must raise a ValueError/TypeError
that names the argument (never a raw torch error or a silent wrong answer)."""
import math

import pytest
import torch

import path_lib  # noqa: F401  registers the rotation variants
from path_lib.nn.layers import (ATTENTION_LAYERS, ALiBiAttention, FoXAttention, NoPEAttention, PaTHAttention,
                                RoPEAttention, SBAAttention, make_attention)
from path_lib.nn.model import TinyLM

KINDS = list(ATTENTION_LAYERS)
# kinds whose ``step`` is defined in path_lib.nn.layers (the generic fallback included)
LAYER_STEP_KINDS = list(KINDS)
D, H, V = 16, 2, 11


def _lm(kind, **kw):
    torch.manual_seed(0)
    return TinyLM(V, D, 1, H, attention=kind, **kw)


# -- 1. T = 0 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_layer_empty_sequence(kind):
    layer = make_attention(kind, D, H)
    y = layer(torch.randn(3, 0, D))
    assert y.shape == (3, 0, D) and y.dtype == torch.float32


@pytest.mark.parametrize("kind", KINDS)
def test_lm_empty_sequence(kind):
    logits = _lm(kind)(torch.zeros(2, 0, dtype=torch.long))
    assert logits.shape == (2, 0, V)


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
@pytest.mark.parametrize("fox", [False, True])
def test_path_empty_sequence_backends_and_params(backend, fox):
    layer = PaTHAttention(D, H, backend=backend, use_forget_gate=fox).double()
    x = torch.randn(2, 0, D, dtype=torch.float64)
    assert layer(x).shape == (2, 0, D)
    w, beta, g = layer.path_params(x)
    assert w.shape == (2, 0, H, D // H) and beta.shape == (2, 0, H)
    assert (g is None) == (not fox) and (g is None or g.shape == (2, 0, H))


# -- 2. state from another batch size ---------------------------------------------------------------

@pytest.mark.parametrize("kind", LAYER_STEP_KINDS)
def test_layer_step_state_from_other_batch(kind):
    layer = make_attention(kind, D, H)
    _, state = layer.step(torch.randn(2, D))
    _, state = layer.step(torch.randn(2, D), state)          # same batch: fine
    with pytest.raises(ValueError, match="state.*batch size 2.*batch size 3"):
        layer.step(torch.randn(3, D), state)


@pytest.mark.parametrize("kind", KINDS)
def test_lm_step_state_from_other_batch(kind):
    lm = _lm(kind)
    _, state = lm.step(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="state.*batch size"):
        lm.step(torch.tensor([1, 2, 3]), state)


def test_lm_step_state_wrong_container():
    lm = TinyLM(V, D, 2, H, attention="nope")
    _, state = lm.step(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="state.*2 per-layer states"):
        lm.step(torch.tensor([1, 2]), state[:1])
    with pytest.raises(TypeError, match="state"):
        make_attention("path", D, H).step(torch.randn(2, D), [1, 2])


def test_step_same_batch_still_matches_forward():
    lm = _lm("path")
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    state, rows = None, []
    for t in range(3):
        logits, state = lm.step(tokens[:, t], state)
        rows.append(logits)
    torch.testing.assert_close(torch.stack(rows, 1), lm(tokens), atol=1e-5, rtol=1e-5)


# -- 3. configs -------------------------------------------------------------------------------------

LAYER_CLASSES = [NoPEAttention, RoPEAttention, ALiBiAttention, FoXAttention, SBAAttention, PaTHAttention]


@pytest.mark.parametrize("cls", LAYER_CLASSES)
@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(d_model=64.0, n_heads=2), TypeError, "d_model"),
    (dict(d_model=True, n_heads=1), TypeError, "d_model"),
    (dict(d_model=0, n_heads=2), ValueError, "d_model"),
    (dict(d_model=64, n_heads=2.0), TypeError, "n_heads"),
    (dict(d_model=64, n_heads=True), TypeError, "n_heads"),
    (dict(d_model=64, n_heads=0), ValueError, "n_heads"),
    (dict(d_model=64, n_heads=3), ValueError, "n_heads"),            # 3 does not divide 64
    (dict(d_model=64, n_heads=2, head_dim=0), ValueError, "head_dim"),
    (dict(d_model=64, n_heads=2, head_dim=-4), ValueError, "head_dim"),
    (dict(d_model=64, n_heads=2, head_dim=8.0), TypeError, "head_dim"),
    (dict(d_model=64, n_heads=2, head_dim=True), TypeError, "head_dim"),
    (dict(d_model=64, n_heads=2, n_kv_heads=2.0), TypeError, "n_kv_heads"),
    (dict(d_model=64, n_heads=2, n_kv_heads=True), TypeError, "n_kv_heads"),
    (dict(d_model=64, n_heads=4, n_kv_heads=3), ValueError, "n_kv_heads"),
])
def test_layer_bad_config(cls, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        cls(**kwargs)


def test_layer_head_dim_given_need_not_divide():
    layer = NoPEAttention(64, 3, head_dim=8)
    assert layer(torch.randn(1, 2, 64)).shape == (1, 2, 64)


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(w_rank=0), ValueError, "w_rank"),
    (dict(w_rank=4.0), TypeError, "w_rank"),
    (dict(conv_size=0), ValueError, "conv_size"),
    (dict(conv_size=True), TypeError, "conv_size"),
    (dict(block_size=0), ValueError, "block_size"),
    (dict(beta_max=float("nan")), ValueError, "beta_max"),
    (dict(beta_max=2.5), ValueError, "beta_max"),
    (dict(beta_max="1"), TypeError, "beta_max"),
    (dict(use_forget_gate=1), TypeError, "use_forget_gate"),
    (dict(backend="cuda"), ValueError, "backend"),
])
def test_path_bad_config(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        PaTHAttention(D, H, **kwargs)


def test_other_layer_options():
    with pytest.raises(ValueError, match="rope_base"):
        RoPEAttention(D, H, rope_base=-1.0)
    with pytest.raises(TypeError, match="attend_current"):
        SBAAttention(D, H, attend_current="yes")


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(vocab_size=0), ValueError, "vocab_size"),
    (dict(vocab_size=-3), ValueError, "vocab_size"),
    (dict(vocab_size=11.0), TypeError, "vocab_size"),
    (dict(vocab_size=True), TypeError, "vocab_size"),
    (dict(d_model=64.0), TypeError, "d_model"),
    (dict(d_model=True), TypeError, "d_model"),
    (dict(n_layers=0), ValueError, "n_layers"),
    (dict(n_layers=True), TypeError, "n_layers"),
    (dict(n_heads=2.0), TypeError, "n_heads"),
    (dict(n_heads=3), ValueError, "n_heads"),
    (dict(head_dim=0), ValueError, "head_dim"),
    (dict(mlp_ratio=-1), ValueError, "mlp_ratio"),
    (dict(mlp_ratio=0), ValueError, "mlp_ratio"),
    (dict(mlp_ratio=float("nan")), ValueError, "mlp_ratio"),
    (dict(mlp_ratio=float("inf")), ValueError, "mlp_ratio"),
    (dict(mlp_ratio=0.01), ValueError, "mlp_ratio"),                 # int(0.01 * 16) == 0
    (dict(mlp_ratio="4"), TypeError, "mlp_ratio"),
    (dict(mlp_ratio=True), TypeError, "mlp_ratio"),
    (dict(tie_embeddings=1), TypeError, "tie_embeddings"),
    (dict(attention="nothing"), ValueError, "attention"),
])
def test_lm_bad_config(kwargs, exc, name):
    cfg = dict(vocab_size=V, d_model=D, n_layers=1, n_heads=H)
    cfg.update(kwargs)
    with pytest.raises(exc, match=name):
        TinyLM(**cfg)


def test_lm_int_mlp_ratio_ok():
    assert TinyLM(V, D, 1, H, attention="nope", mlp_ratio=2)(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, V)


# -- 4. generate ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lm():
    return _lm("path")


PROMPT = torch.tensor([[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("n_new, exc", [(-1, ValueError), (1.5, TypeError), (2.0, TypeError),
                                        (True, TypeError), ("2", TypeError), (None, TypeError)])
def test_generate_bad_n_new(lm, n_new, exc):
    with pytest.raises(exc, match="n_new"):
        lm.generate(PROMPT, n_new)


@pytest.mark.parametrize("temperature, exc", [(-1.0, ValueError), (float("nan"), ValueError),
                                              (float("inf"), ValueError), ("0.5", TypeError),
                                              (True, TypeError), (torch.tensor(1.0), TypeError)])
def test_generate_bad_temperature(lm, temperature, exc):
    with pytest.raises(exc, match="temperature"):
        lm.generate(PROMPT, 2, temperature=temperature)


@pytest.mark.parametrize("prompt, exc", [
    (torch.zeros(2, 0, dtype=torch.long), ValueError),      # empty sequence
    (torch.zeros(0, 3, dtype=torch.long), ValueError),      # empty batch
    (torch.tensor([1, 2, 3]), ValueError),                  # [T] instead of [B, T]
    (torch.zeros(1, 2, 3, dtype=torch.long), ValueError),
    (torch.tensor([[1.0, 2.0]]), TypeError),                # float ids
    ([[1, 2, 3]], TypeError),                               # not a tensor
    (torch.tensor([[1, V]]), ValueError),                   # id >= vocab
    (torch.tensor([[1, -1]]), ValueError),
])
def test_generate_bad_prompt(lm, prompt, exc):
    with pytest.raises(exc, match="prompt"):
        lm.generate(prompt, 2)


def test_generate_bad_generator(lm):
    with pytest.raises(TypeError, match="generator"):
        lm.generate(PROMPT, 2, temperature=1.0, generator=0)


@pytest.mark.parametrize("kind", ["nope", "path", "sba"])
def test_generate_greedy_and_sampled_still_work(kind):
    lm = _lm(kind)
    assert torch.equal(lm.generate(PROMPT, 0), PROMPT)
    out = lm.generate(PROMPT, 3, temperature=0)                 # int 0: greedy
    assert out.shape == (2, 6) and torch.equal(out[:, :3], PROMPT)
    # greedy means each new token is the argmax of the forward's last row
    for t in range(3, 6):
        assert torch.equal(out[:, t], lm(out[:, :t])[:, -1].argmax(-1))
    g = torch.Generator().manual_seed(0)
    sampled = lm.generate(PROMPT, 3, temperature=0.7, generator=g)
    assert sampled.shape == (2, 6) and int(sampled.max()) < V and not math.isnan(float(sampled.sum()))


def test_auto_backend_warns_once_when_it_falls_back_on_cuda(monkeypatch):
    """backend="auto" on a CUDA tensor with unverified kernels runs the blockwise path and says so once
    (a CUDA tensor is faked: only its device and dtype are read on this path)."""
    import warnings

    import path_lib.kernels as kernels
    from path_lib import impl
    from path_lib.nn import layers

    class FakeCuda:
        is_cuda, device, dtype = True, torch.device("cuda"), torch.bfloat16

    layer = layers.PaTHAttention(64, 2, backend="auto")
    monkeypatch.setattr(kernels, "GPU_VERIFIED", False)
    monkeypatch.setattr(impl, "_FALLBACK_WARNED", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert layer._resolve_backend(FakeCuda()) == "blockwise"
        assert layer._resolve_backend(FakeCuda()) == "blockwise"
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "GPU_VERIFIED is False" in msgs[0]
    monkeypatch.setattr(kernels, "GPU_VERIFIED", True)
    assert layer._resolve_backend(FakeCuda()) == "triton"


# -- 4. the edges of issue "Bad input at the edges" -----------------------------------------------

@pytest.mark.parametrize("cls", [NoPEAttention, RoPEAttention, ALiBiAttention, FoXAttention, SBAAttention,
                                 PaTHAttention])
def test_float64_layer_names_a_float32_input(cls):
    layer = cls(D, H).double()
    with pytest.raises(TypeError, match=r"x has dtype float32 .* float64"):
        layer(torch.randn(1, 3, D))
    with pytest.raises(TypeError, match=r"x_t has dtype float32"):
        layer.step(torch.randn(1, D))


@pytest.mark.parametrize("kind", KINDS)
def test_empty_batch_gives_empty_outputs(kind):
    layer = make_attention(kind, D, H)
    assert layer(torch.randn(0, 3, D)).shape == (0, 3, D)
    y, state = layer.prefill(torch.randn(0, 3, D))
    assert y.shape == (0, 3, D) and layer.step(torch.randn(0, D), state)[0].shape == (0, D)
    lm = _lm(kind)
    assert lm(torch.zeros(0, 3, dtype=torch.long)).shape == (0, 3, V)
    assert lm.prefill(torch.zeros(0, 3, dtype=torch.long))[0].shape == (0, V)


@pytest.mark.parametrize("kind", KINDS)
def test_step_names_an_empty_or_foreign_state(kind):
    layer = make_attention(kind, D, H)
    x_t = torch.randn(2, D)
    with pytest.raises(ValueError, match="state is not a state returned by a layer"):
        layer.step(x_t, {})
    other = "nope" if kind != "nope" else "sba"
    _, foreign = make_attention(other, D, H).step(x_t)
    with pytest.raises(ValueError, match="state is a state of"):
        layer.step(x_t, foreign)


@pytest.mark.parametrize("value", [1, 0, "yes", 1.0])
def test_check_values_must_be_a_bool_or_none(value):
    with pytest.raises(TypeError, match="check_values"):
        NoPEAttention(D, H).check_values = value
    lm = _lm("path")
    with pytest.raises(TypeError, match="check_values"):
        lm.check_values = value
    lm.check_values = False
    assert lm.blocks[0].attn.check_values is False


def test_decode_mask_that_contradicts_the_cache_is_refused():
    torch.manual_seed(0)
    layer = PaTHAttention(D, H).eval()
    _, _, cache = layer(torch.randn(2, 3, D), use_cache=True)          # every prompt token real
    mask = torch.ones(2, 4, dtype=torch.long)
    mask[0, 1] = 0                                                      # a cached token as padding
    with pytest.raises(ValueError, match="attention_mask contradicts the cache in rows \\[0\\]"):
        layer(torch.randn(2, 1, D), attention_mask=mask, past_key_values=cache)
    y, _, _ = layer(torch.randn(2, 1, D), attention_mask=torch.ones(2, 4, dtype=torch.long), past_key_values=cache)
    assert y.shape == (2, 1, D)


def test_generate_with_a_tiny_temperature_is_greedy():
    lm = _lm("path").eval()
    prompt = torch.randint(0, V, (2, 4))
    assert torch.equal(lm.generate(prompt, 3, temperature=1e-300), lm.generate(prompt, 3))
