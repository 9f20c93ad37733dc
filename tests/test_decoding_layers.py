"""Decoding equals the parallel form; every layer's step() equals its forward; TinyLM; bad input."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers import numpy_path_attention, random_path_inputs
from path_lib.impl import path_attention
from path_lib.decoding import PaTHCache, decode_path_attention, keys_to_end, prefill
from path_lib.reference.householder import householder_product
from path_lib.nn.layers import ATTENTION_LAYERS, PaTHAttention, make_attention
from path_lib.nn.model import TinyLM


@given(T=st.integers(1, 20), rep=st.sampled_from([1, 2]), gate=st.booleans(), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=20, deadline=None)
def test_decoding_equals_parallel(T, rep, gate, seed):
    q, k, v, w, beta, g = random_path_inputs(B=2, T=T, Hq=2 * rep, Hk=2, D=5, gate=gate, seed=seed, beta_mode="mixed")
    torch.testing.assert_close(decode_path_attention(q, k, v, w, beta, g), numpy_path_attention(q, k, v, w, beta, g),
                               atol=1e-10, rtol=0)


@pytest.mark.parametrize("block", [1, 3, 8, 64])
def test_keys_to_end(block):
    q, k, v, w, beta, _ = random_path_inputs(B=1, T=10, Hq=1, D=4, seed=block)
    out = keys_to_end(k, w, beta, block_size=block)
    for j in range(10):
        P = householder_product(w[0, j + 1:, 0], beta[0, j + 1:, 0])
        torch.testing.assert_close(out[0, j, 0], P @ k[0, j, 0])


@pytest.mark.parametrize("gate", [False, True])
def test_prefill_then_step(gate):
    q, k, v, w, beta, g = random_path_inputs(B=2, T=23, Hq=4, Hk=2, D=6, gate=gate, seed=11)
    full = path_attention(q, k, v, w, beta, g, impl="parallel")
    o, cache = prefill(q[:, :15], k[:, :15], v[:, :15], w[:, :15], beta[:, :15],
                       None if g is None else g[:, :15], block_size=4)
    torch.testing.assert_close(o, full[:, :15])
    assert len(cache) == 15
    for t in range(15, 23):
        o_t = cache.step(q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], None if g is None else g[:, t])
        torch.testing.assert_close(o_t, full[:, t])


def test_cache_bad_input():
    cache = PaTHCache(1, 2, 1, 4)
    x = torch.zeros(1, 1, 4)
    with pytest.raises(ValueError, match="q_t must have shape"):
        cache.step(torch.zeros(1, 1, 4), x, x, x, torch.ones(1, 1))
    with pytest.raises(ValueError, match="beta_t"):
        cache.step(torch.zeros(1, 2, 4), x, x, x, torch.full((1, 1), 3.0))
    with pytest.raises(ValueError, match="multiple"):
        PaTHCache(1, 3, 2, 4)


LAYER_KWARGS = {
    "path": dict(n_kv_heads=2, block_size=3),
    "path_fox": dict(n_kv_heads=1, block_size=4, beta_max=1.9),
}


@pytest.mark.parametrize("kind", sorted(ATTENTION_LAYERS))
def test_layer_step_equals_forward(kind):
    torch.manual_seed(0)
    layer = make_attention(kind, 16, 4, **LAYER_KWARGS.get(kind, {})).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    y = layer(x)
    assert y.shape == x.shape
    state, ys = None, []
    for t in range(9):
        y_t, state = layer.step(x[:, t], state)
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, atol=1e-10, rtol=0)


def test_path_layer_backends_agree_and_parameters():
    torch.manual_seed(1)
    layer = PaTHAttention(12, 2, head_dim=5, use_forget_gate=True, beta_max=1.5, block_size=2).double()
    x = torch.randn(1, 7, 12, dtype=torch.float64)
    w, beta, g = (t.detach() for t in layer.path_params(x))
    assert w.shape == (1, 7, 2, 5) and beta.shape == (1, 7, 2) and g.shape == (1, 7, 2)
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(1, 7, 2, dtype=torch.float64))
    assert float(beta.max()) <= 1.5 and float(beta.min()) >= 0 and float(g.max()) <= 0
    outs = []
    for backend in ("reference", "blockwise", "auto"):
        layer.backend = backend
        outs.append(layer(x))
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0])
    # the short convolution is causal: changing a later token leaves earlier w untouched
    x2 = x.clone()
    x2[:, 5] += 1
    w2, _, _ = layer.path_params(x2)
    torch.testing.assert_close(w2[:, :5], w[:, :5])


def test_layer_gradcheck():
    torch.manual_seed(2)
    layer = PaTHAttention(6, 2, n_kv_heads=1, use_forget_gate=True, w_rank=3, block_size=2).double()
    x = torch.randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))


@pytest.mark.parametrize("attention", ["path", "path_fox", "rope"])
def test_tinylm_step_and_generate(attention):
    torch.manual_seed(3)
    model = TinyLM(13, d_model=16, n_layers=2, n_heads=2, attention=attention).double()
    tokens = torch.randint(0, 13, (2, 8))
    logits = model(tokens)
    assert logits.shape == (2, 8, 13)
    state, rows = None, []
    for t in range(8):
        l, state = model.step(tokens[:, t], state)
        rows.append(l)
    torch.testing.assert_close(torch.stack(rows, 1), logits, atol=1e-10, rtol=0)
    out = model.generate(tokens[:, :3], 4)
    assert out.shape == (2, 7)
    # greedy generation agrees with the parallel forward's argmax
    torch.testing.assert_close(model(out[:, :-1])[:, 2:].argmax(-1), out[:, 3:])
    model.float()(tokens).sum().backward()
    assert model.embed.weight.grad is not None


def test_layer_and_model_bad_input():
    with pytest.raises(ValueError, match="n_kv_heads"):
        PaTHAttention(8, 3, n_kv_heads=2)
    with pytest.raises(ValueError, match="beta_max"):
        PaTHAttention(8, 2, beta_max=2.5)
    with pytest.raises(ValueError, match="backend"):
        PaTHAttention(8, 2, backend="cuda")
    with pytest.raises(ValueError, match="attention"):
        TinyLM(5, attention="xpos")
    layer = PaTHAttention(8, 2)
    with pytest.raises(ValueError, match="d_model"):
        layer(torch.zeros(1, 3, 7))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        layer(torch.zeros(3, 8))
    model = TinyLM(5, d_model=8, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match="tokens must lie"):
        model(torch.tensor([[0, 5]]))
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 2))
