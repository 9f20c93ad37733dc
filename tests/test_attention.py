"""PaTH attention: three implementations, an independent NumPy ground truth, the baselines, autograd."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from helpers import numpy_path_attention, random_path_inputs
from path_lib.impl import path_attention
from path_lib.reference.attention import (alibi_attention, alibi_slopes, apply_rope, fox_attention,
                                          path_logits, rope_attention, softmax_attention)

IMPLS = ("explicit", "parallel", "blockwise")


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("beta_mode", ["uniform", "zero", "one", "two", "mixed", "near2"])
def test_implementations_agree_float64(gate, beta_mode):
    q, k, v, w, beta, g = random_path_inputs(B=2, T=11, Hq=4, Hk=2, D=5, Dv=3, gate=gate, beta_mode=beta_mode)
    truth = numpy_path_attention(q, k, v, w, beta, g)
    for impl in IMPLS:
        o = path_attention(q, k, v, w, beta, g, impl=impl, block_size=4)
        assert o.shape == (2, 11, 4, 3) and o.dtype == torch.float64
        torch.testing.assert_close(o, truth, atol=1e-10, rtol=0)


@given(T=st.integers(1, 24), D=st.integers(1, 20), block=st.integers(1, 9), rep=st.sampled_from([1, 2, 3]),
       gate=st.booleans(), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=30, deadline=None)
def test_blockwise_and_parallel_match_ground_truth(T, D, block, rep, gate, seed):
    """Any T (ragged last block, T = 1), head dims that are not multiples of 16, grouped heads."""
    q, k, v, w, beta, g = random_path_inputs(B=1, T=T, Hq=rep, Hk=1, D=D, gate=gate, seed=seed, beta_mode="mixed")
    truth = numpy_path_attention(q, k, v, w, beta, g)
    torch.testing.assert_close(path_attention(q, k, v, w, beta, g, impl="parallel"), truth, atol=1e-10, rtol=0)
    torch.testing.assert_close(path_attention(q, k, v, w, beta, g, impl="blockwise", block_size=block), truth,
                               atol=1e-10, rtol=0)


@pytest.mark.parametrize("gate", [False, True])
def test_float32_within_tolerance(gate):
    q, k, v, w, beta, g = random_path_inputs(B=2, T=70, Hq=2, D=16, gate=gate, dtype=torch.float32, seed=5)
    q64, k64, v64, w64, b64 = (x.double() for x in (q, k, v, w, beta))
    g64 = None if g is None else g.double()
    truth = path_attention(q64, k64, v64, w64, b64, g64, impl="parallel")
    for impl in ("parallel", "blockwise"):
        o = path_attention(q, k, v, w, beta, g, impl=impl, block_size=16)
        assert o.dtype == torch.float32
        torch.testing.assert_close(o.double(), truth, atol=1e-4, rtol=1e-4)


def test_half_inputs_return_their_dtype():
    q, k, v, w, beta, g = random_path_inputs(T=8, D=8, dtype=torch.bfloat16, param_dtype=torch.float32, seed=1)
    o = path_attention(q, k, v, w, beta)
    assert o.dtype == torch.bfloat16


def test_path_logits_and_scale():
    q, k, v, w, beta, _ = random_path_inputs(B=1, T=6, Hq=1, D=4, seed=2)
    S1 = path_logits(q, k, w, beta, impl="explicit", scale=1.0)
    S2 = path_logits(q, k, w, beta, impl="parallel", scale=1.0)
    torch.testing.assert_close(S1, S2)
    assert torch.isinf(S1[0, 0].triu(1)[0, 1]) and S1[0, 0, 0, 0] == (q[0, 0, 0] @ k[0, 0, 0])
    o1 = path_attention(q, k, v, w, beta, scale=0.3)
    o2 = path_attention(q * 0.3 / 0.5, k, v, w, beta)   # default scale D^-1/2 = 0.5
    torch.testing.assert_close(o1, o2)


def test_beta_zero_is_nope_and_gate_is_fox():
    q, k, v, w, beta, g = random_path_inputs(B=2, T=9, Hq=2, D=6, gate=True, beta_mode="zero", seed=3)
    for impl in IMPLS:
        torch.testing.assert_close(path_attention(q, k, v, w, beta, impl=impl), softmax_attention(q, k, v))
        torch.testing.assert_close(path_attention(q, k, v, w, beta, g, impl=impl), fox_attention(q, k, v, g))


def test_rope_logit_depends_only_on_offset():
    gen = torch.Generator().manual_seed(0)
    qv, kv = torch.randn(8, generator=gen, dtype=torch.float64), torch.randn(8, generator=gen, dtype=torch.float64)
    T = 12
    x = torch.zeros(1, T, 1, 8, dtype=torch.float64)
    qs, ks = apply_rope(x + qv), apply_rope(x + kv)
    logit = lambda i, j: float(qs[0, i, 0] @ ks[0, j, 0])
    for d in range(4):
        vals = [logit(i, i - d) for i in range(d, T)]
        assert max(vals) - min(vals) < 1e-12
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.zeros(1, 2, 1, 3))


def test_rope_and_alibi_match_their_definitions():
    q, k, v, *_ = random_path_inputs(B=1, T=7, Hq=2, D=4, seed=4)
    T, D = 7, 4
    # RoPE: rotate each pair (x_{2m}, x_{2m+1}) by t * 10000^{-2m/D}
    def rot(x, t):
        out = x.clone()
        for m in range(D // 2):
            a = t * 10000 ** (-2 * m / D)
            c, s = math.cos(a), math.sin(a)
            out[..., 2 * m], out[..., 2 * m + 1] = c * x[..., 2 * m] - s * x[..., 2 * m + 1], s * x[..., 2 * m] + c * x[..., 2 * m + 1]
        return out
    qr = torch.stack([rot(q[:, t], t) for t in range(T)], 1)
    kr = torch.stack([rot(k[:, t], t) for t in range(T)], 1)
    torch.testing.assert_close(rope_attention(q, k, v), softmax_attention(qr, kr, v))
    slopes = alibi_slopes(2)
    torch.testing.assert_close(slopes, torch.tensor([2 ** -4, 2 ** -8], dtype=torch.float64))
    logits = torch.einsum("bihd,bjhd->bhij", q, k) / 2 - slopes[None, :, None, None] * (
        torch.arange(T)[:, None] - torch.arange(T)[None, :])
    logits = logits.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    expected = torch.einsum("bhij,bjhd->bihd", torch.softmax(logits, -1), v)
    torch.testing.assert_close(alibi_attention(q, k, v), expected)
    assert alibi_slopes(6).shape == (6,)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("gate", [False, True])
def test_gradcheck(impl, gate):
    q, k, v, w, beta, g = random_path_inputs(B=1, T=5, Hq=2, Hk=1, D=3, gate=gate, seed=6, requires_grad=True)
    # keep beta away from the clamp of the value check during finite differences
    with torch.no_grad():
        beta.clamp_(0.05, 1.95)
    inputs = (q, k, v, w, beta) + ((g,) if gate else ())

    def f(q, k, v, w, beta, g=None):
        return path_attention(q, k, v, w, beta, g, impl=impl, block_size=2, check_values=False)

    assert torch.autograd.gradcheck(f, inputs)


def test_gradcheck_baselines():
    q, k, v, w, beta, g = random_path_inputs(B=1, T=4, Hq=2, D=4, gate=True, seed=7, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: rope_attention(q, k, v), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: alibi_attention(q, k, v), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v, g: fox_attention(q, k, v, g), (q, k, v, g))


# ------------------------------------------------------------------------------- bad input
def _base():
    return random_path_inputs(B=1, T=4, Hq=2, D=4, gate=True, param_dtype=torch.float32,
                              dtype=torch.float32, seed=8)


@pytest.mark.parametrize("mutate,exc,name", [
    (lambda a: a.__setitem__(0, a[0][..., :3]), ValueError, "head dim"),
    (lambda a: a.__setitem__(1, a[1][:, :3]), ValueError, "batch and time"),
    (lambda a: a.__setitem__(0, a[0].double()), TypeError, "dtype"),
    (lambda a: a.__setitem__(3, a[3].half()), TypeError, "w"),
    (lambda a: a.__setitem__(4, a[4].to(torch.bfloat16)), TypeError, "beta"),
    (lambda a: a.__setitem__(5, a[5].half()), TypeError, "g"),
    (lambda a: a.__setitem__(4, a[4] + 2.5), ValueError, r"beta must lie in \[0, 2\]"),
    (lambda a: a.__setitem__(4, a[4] - 3), ValueError, r"beta must lie in \[0, 2\]"),
    (lambda a: a.__setitem__(4, a[4][..., :1]), ValueError, "beta must have shape"),
    (lambda a: a.__setitem__(3, a[3] * 2), ValueError, "L2-normalised"),
    (lambda a: a.__setitem__(3, a[3][:, :, :, :3]), ValueError, "w must have shape"),
    (lambda a: a.__setitem__(5, -a[5]), ValueError, "g is a log forget gate"),
    (lambda a: a.__setitem__(5, a[5][..., :1]), ValueError, "g must have shape"),
    (lambda a: a.__setitem__(0, a[0].masked_fill(torch.ones_like(a[0], dtype=torch.bool), float("nan"))), ValueError, "q contains NaN"),
    (lambda a: a.__setitem__(2, a[2] * float("inf")), ValueError, "v contains NaN"),
    (lambda a: a.__setitem__(0, torch.cat([a[0], a[0][:, :, :1]], 2)), ValueError, "multiple"),
    (lambda a: a.__setitem__(0, a[0][0]), ValueError, "q must have 4 dimensions"),
    (lambda a: a.__setitem__(0, a[0].tolist()), TypeError, "q must be a torch.Tensor"),
])
def test_bad_input_raises(mutate, exc, name):
    args = list(_base())
    mutate(args)
    for impl in IMPLS:
        with pytest.raises(exc, match=name):
            path_attention(*args, impl=impl)


def test_bad_options():
    q, k, v, w, beta, g = _base()
    with pytest.raises(ValueError, match="impl"):
        path_attention(q, k, v, w, beta, impl="fast")
    with pytest.raises(ValueError, match="block_size"):
        path_attention(q, k, v, w, beta, block_size=0)
    with pytest.raises(ValueError, match="scale"):
        path_attention(q, k, v, w, beta, scale=-1.0)
    with pytest.raises(ValueError, match="scale"):
        path_attention(q, k, v, w, beta, scale=float("nan"))
    with pytest.raises(ValueError, match="slopes"):
        alibi_attention(q, k, v, slopes=torch.ones(5))
