"""Decoding equals the parallel form; every layer's step() equals its forward; TinyLM; bad input."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers import decode_by_steps, numpy_path_attention, random_path_inputs
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
    torch.testing.assert_close(decode_by_steps(layer, x)[0], y, atol=1e-10, rtol=0)


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


# -- the edges of issue "Bad input at the edges": caches, sampling, sdpa_attention ----------------------

def test_caches_refuse_rows_they_do_not_hold():
    from path_lib.nn.cache import StateCache, select_state
    layer = PaTHAttention(8, 2).eval()
    _, state = layer.prefill(torch.randn(2, 3, 8))
    holder = StateCache()
    holder.set_layer_state(0, state)
    keys = state["cache"].keys.clone()
    for select in (state["cache"].select, lambda i: select_state(state, i), holder.select):
        for index in (torch.tensor([5]), torch.tensor([-1])):
            with pytest.raises(ValueError, match="index must lie in \\[0, 2\\)"):
                select(index)
    torch.testing.assert_close(state["cache"].keys, keys, rtol=0, atol=0)   # nothing changed
    holder.select(torch.tensor([1, 1, 0]))
    torch.testing.assert_close(state["cache"].keys, keys[[1, 1, 0]], rtol=0, atol=0)
    assert holder.get_seq_length() == 3


def test_is_cache_is_the_decoding_cache_protocol():
    from path_lib.decoding import DecodingCache, is_cache

    class PaTHCacheLookalike:                        # a name is not enough
        pass
    cache = PaTHCache(1, 2, 2, 4)
    assert isinstance(cache, DecodingCache) and is_cache(cache)
    assert not is_cache(PaTHCacheLookalike()) and not is_cache(PaTHCache) and not is_cache({"cache": cache})


def test_sampling_edges():
    from path_lib.nn.sampling import filter_logits, sample_next
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, float("-inf"), 1.0]])
    gen = torch.Generator().manual_seed(0)
    assert sample_next(logits, temperature=1e-300, generator=gen).tolist() == [1, 0]
    for bad in (torch.tensor([[float("nan"), 0.0]]), torch.tensor([[float("inf"), 0.0]]), torch.zeros(2, 0),
                torch.full((1, 3), float("-inf"))):
        with pytest.raises(ValueError, match="logits"):
            sample_next(bad, temperature=1.0)
    with pytest.raises(ValueError, match="logits"):
        sample_next(torch.tensor([[float("nan"), 0.0]]))                    # greedy too
    with pytest.raises(ValueError, match="top_k"):
        filter_logits(logits, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(logits, top_p=0.0)
    with pytest.raises(TypeError, match="check_values"):
        sample_next(logits, check_values=1)
    kept = filter_logits(logits, top_k=1) > float("-inf")
    assert kept.tolist() == [[False, True, False], [True, False, False]]


def test_sdpa_attention_checks_k_v_and_bias():
    from path_lib.nn.layers import sdpa_attention
    q, k, v = torch.randn(1, 3, 2, 4), torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4)
    ref = path_attention(q.double(), k.double(), v.double(), torch.nn.functional.normalize(torch.ones(1, 3, 1, 4),
                         dim=-1).double(), torch.zeros(1, 3, 1, dtype=torch.float64))   # beta 0: plain softmax
    torch.testing.assert_close(sdpa_attention(q, k, v).double(), ref, rtol=1e-5, atol=1e-5)
    for args, name in (((q, k[:, :2], v), "k"), ((q, k, v[:, :, :, :3].expand(1, 3, 2, 3)), "v"),
                       ((q, k.double(), v), "dtype"), ((q, k, v, torch.zeros(1, 2, 4, 3)), "bias"),
                       ((q, k, v, torch.zeros(1, 2, 3, 3, dtype=torch.long)), "bias"), ((q, [1], v), "k")):
        with pytest.raises((ValueError, TypeError), match=name):
            sdpa_attention(*args)
