"""Stick-breaking attention: the log-space reference against an explicit stick-breaking loop (float64),
its layer (step == forward), TinyLM(attention="sba"), gradients, extreme logits, bad input."""
import math

import pytest
import torch

from helpers import decode_by_steps
from path_lib.nn.layers import SBAAttention, make_attention
from path_lib.nn.model import TinyLM
from path_lib.reference.sba import sba_attention, sba_weights, stick_breaking_weights

torch.set_num_threads(1)


def _loop(q, k, v, attend_current, scale=None):
    """The definition, written out: break the stick from the most recent key backwards."""
    B, T, Hq, D = q.shape
    rep = Hq // k.shape[2]
    scale = D ** -0.5 if scale is None else scale
    out = torch.zeros(B, T, Hq, v.shape[-1], dtype=torch.float64)
    rem = torch.zeros(B, T, Hq, dtype=torch.float64)
    for b in range(B):
        for h in range(Hq):
            for i in range(T):
                left = 1.0
                for j in range(i if attend_current else i - 1, -1, -1):
                    beta = 1.0 / (1.0 + math.exp(-float(scale * q[b, i, h] @ k[b, j, h // rep])))
                    out[b, i, h] += left * beta * v[b, j, h // rep]
                    left *= 1.0 - beta
                rem[b, i, h] = left
    return out, rem


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (3, 1)])
def test_matches_explicit_loop(attend_current, heads):
    g = torch.Generator().manual_seed(0)
    B, T, D = 2, 9, 5
    Hq, Hk = heads
    q = 2 * torch.randn(B, T, Hq, D, generator=g, dtype=torch.float64)
    k = 2 * torch.randn(B, T, Hk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, Hk, 3, generator=g, dtype=torch.float64)
    o, rem = sba_attention(q, k, v, attend_current=attend_current, return_remainder=True)
    o_ref, rem_ref = _loop(q, k, v, attend_current)
    torch.testing.assert_close(o, o_ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(rem, rem_ref, atol=1e-12, rtol=1e-12)
    A = sba_weights(q, k, attend_current=attend_current)
    assert bool((A >= 0).all()) and bool((A.sum(-1) <= 1 + 1e-12).all())
    assert bool((A.triu(0 if not attend_current else 1) == 0).all())        # causal (strictly, by default)
    if not attend_current:
        assert bool((o[:, 0] == 0).all())                                      # query 0 has no key


def test_extreme_logits_stay_finite_and_exact():
    """Logits of +-60: betas of 1 - 1e-26 and 1e-26; log space keeps every weight to full relative
    precision (the reference computes 1 - beta as sigmoid(-z), which 1 - sigmoid(z) would round to 0)."""
    z = torch.tensor([[60.0, -60.0, 60.0, -60.0, 3.0]], dtype=torch.float64)
    A = stick_breaking_weights(z)
    left, ref = 1.0, [0.0] * 5
    for j in range(4, -1, -1):
        ref[j] = left / (1.0 + math.exp(-float(z[0, j])))
        left *= 1.0 / (1.0 + math.exp(float(z[0, j])))
    torch.testing.assert_close(A[0], torch.tensor(ref, dtype=torch.float64), atol=1e-300, rtol=1e-12)
    q = 30 * torch.randn(1, 64, 2, 4, dtype=torch.float32)
    assert bool(torch.isfinite(sba_attention(q, q, q)).all())


def test_float32_close_to_float64_and_gradcheck():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 12, 2, 4, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(sba_attention(q.float(), k.float(), v.float()).double(), sba_attention(q, k, v),
                               atol=1e-5, rtol=1e-5)
    qs, ks, vs = (x[:, :5].clone().requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: sba_attention(a, b, c, attend_current=True), (qs, ks, vs))


@pytest.mark.parametrize("attend_current", [False, True])
def test_layer_step_equals_forward(attend_current):
    torch.manual_seed(0)
    layer = SBAAttention(16, 4, n_kv_heads=2, attend_current=attend_current).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(decode_by_steps(layer, x)[0], layer(x), atol=1e-12, rtol=0)


def test_tinylm_sba_trains_and_generates():
    torch.manual_seed(0)
    m = TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention="sba")
    assert isinstance(m.blocks[0].attn, SBAAttention) and isinstance(make_attention("sba", 8, 2), SBAAttention)
    tok = torch.randint(0, 5, (2, 10))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):     # memorise one batch: the loss must fall
        loss = torch.nn.functional.cross_entropy(m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.3
    assert m.generate(tok[:, :3], 4).shape == (2, 7)


def test_bad_input():
    q = torch.randn(1, 4, 3, 8)
    with pytest.raises(ValueError, match="multiple"):
        sba_attention(q, torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8))
    with pytest.raises(ValueError, match="scale"):
        sba_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="4 dimensions"):
        sba_attention(q[0], q[0], q[0])
