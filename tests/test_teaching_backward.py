"""The kernel chapter's teaching backward pass (path_lib/book/teaching_backward.py) against autograd
through the library's reference implementations, on fresh random inputs."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

from path_lib import path_attention
from path_lib.book.teaching_backward import (crossing_backward, path_attention_backward,
                                             scores_backward, softmax_backward, ut_factors)
from path_lib.reference.householder import householder_product, normalize, ut_transform

F64 = torch.float64
NAMES = ("q", "k", "v", "w", "beta", "g")


def head_inputs(T, D, seed, gate):
    """One head's q, k, v, w (unit rows), beta in (0, 2), g (log gates) or None, and dO."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(T, D, generator=gen, dtype=F64) for _ in range(4))
    w = normalize(torch.randn(T, D, generator=gen, dtype=F64))
    beta = 2 * torch.rand(T, generator=gen, dtype=F64)
    g = torch.nn.functional.logsigmoid(torch.randn(T, generator=gen, dtype=F64) + 2) if gate else None
    return q, k, v, w, beta, g, do


def autograd_reference(q, k, v, w, beta, g, do, impl, scale=None):
    """Output and gradients of sum(do * o) through path_lib.path_attention (one batch, one head)."""
    leaves = [x.clone().requires_grad_() for x in (q, k, v, w, beta, g) if x is not None]
    as_public = [x[None, :, None] for x in leaves]
    if g is None:
        as_public.append(None)
    o = path_attention(*as_public, impl=impl, scale=scale)[0, :, 0]
    grads = torch.autograd.grad(o, leaves, do, allow_unused=True, materialize_grads=True)
    return o.detach(), dict(zip(NAMES, grads))


@pytest.mark.parametrize("impl", ["explicit", "parallel"])
@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("T, D, seed", [(1, 4, 0), (7, 3, 1), (13, 8, 2), (24, 5, 3)])
def test_gradients_match_autograd(impl, gate, T, D, seed):
    q, k, v, w, beta, g, do = head_inputs(T, D, seed, gate)
    o_ref, ref = autograd_reference(q, k, v, w, beta, g, do, impl)
    ours = path_attention_backward(q, k, v, w, beta, do, g=g)
    assert_close(ours["o"], o_ref, rtol=1e-10, atol=1e-12)
    assert set(ours) - {"o"} == set(ref)
    for name, grad in ref.items():
        assert_close(ours[name], grad, rtol=1e-9, atol=1e-11, msg=f"d{name}")


def test_scale_and_extreme_strengths():
    """A scale other than D^-0.5, and beta at 0 (identity), 1 (projection) and 2 (reflection)."""
    q, k, v, w, beta, g, do = head_inputs(9, 4, 5, gate=True)
    beta = torch.tensor([0.0, 1.0, 2.0] * 3, dtype=F64)
    _, ref = autograd_reference(q, k, v, w, beta, g, do, "explicit", scale=0.3)
    ours = path_attention_backward(q, k, v, w, beta, do, g=g, scale=0.3)
    for name, grad in ref.items():
        assert_close(ours[name], grad, rtol=1e-9, atol=1e-11, msg=f"d{name}")


def test_steps_match_autograd():
    """Each step of the chain on its own: the softmax step and the scores' step."""
    q, k, v, w, beta, _, do = head_inputs(10, 4, 7, gate=False)
    z = torch.randn(10, 10, dtype=F64).requires_grad_()
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    p = torch.softmax(z.masked_fill(~causal, float("-inf")), -1)
    dz_ref, = torch.autograd.grad(p @ v, z, do)
    dz, dv = softmax_backward(p.detach(), v, do)
    assert_close(dz, dz_ref)
    assert_close(dv, p.detach().T @ do)

    ds = torch.randn(10, 10, dtype=F64)
    leaves = [x.clone().requires_grad_() for x in (q, k, w, beta)]
    lq, lk, lw, lb = leaves
    S = torch.tril(lq @ lk.T) - torch.tril(lq @ lw.T) @ ut_transform(lw, lb) @ torch.tril(lw @ lk.T, -1)
    ref = torch.autograd.grad(S, leaves, torch.tril(ds))
    for ours, grad in zip(scores_backward(ds, q, k, w, beta), ref):
        assert_close(ours, grad)


def test_ut_factors_are_the_librarys():
    _, _, _, w, beta, _, _ = head_inputs(11, 5, 8, gate=False)
    N, ut = ut_factors(w, beta)
    assert_close(ut, ut_transform(w, beta))
    assert_close(N @ (torch.eye(11, dtype=F64) + torch.tril(beta[:, None] * (w @ w.T), -1)),
                 torch.eye(11, dtype=F64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_crossing_matches_autograd(seed):
    """Queries moved across one block, Q' = Q P with P = H_last ... H_first (the explicit product)."""
    gen = torch.Generator().manual_seed(seed)
    q, dq_out = (torch.randn(6, 5, generator=gen, dtype=F64) for _ in range(2))
    w = normalize(torch.randn(4, 5, generator=gen, dtype=F64))
    beta = 2 * torch.rand(4, generator=gen, dtype=F64)
    leaves = [x.clone().requires_grad_() for x in (q, w, beta)]
    moved = leaves[0] @ householder_product(leaves[1], leaves[2])
    ref = torch.autograd.grad(moved, leaves, dq_out)
    for name, ours, grad in zip(("q", "w", "beta"), crossing_backward(dq_out, q, w, beta), ref):
        assert_close(ours, grad, msg=f"d{name}")


def test_the_chain_through_the_ut_transform_matters(monkeypatch):
    """Stopping the chain at T (no gradient through N = (I + A)^-1 and A) leaves dw and dbeta
    visibly wrong: the comparison above would notice such a slip."""
    from path_lib.book import teaching_backward

    q, k, v, w, beta, g, do = head_inputs(8, 4, 9, gate=False)
    _, ref = autograd_reference(q, k, v, w, beta, g, do, "explicit")

    def without_inverse(d_ut, w, beta, N):
        return torch.zeros_like(w), (N * torch.tril(d_ut)).sum(0)

    monkeypatch.setattr(teaching_backward, "ut_backward", without_inverse)
    cut = teaching_backward.path_attention_backward(q, k, v, w, beta, do)
    assert not torch.allclose(cut["w"], ref["w"], rtol=1e-3, atol=1e-3)
    assert not torch.allclose(cut["beta"], ref["beta"], rtol=1e-3, atol=1e-3)
    assert_close(cut["q"], ref["q"])         # dq does not go through the UT transform's inputs


def test_bad_inputs_name_the_argument():
    q, k, v, w, beta, _, do = head_inputs(5, 3, 0, gate=False)
    with pytest.raises(TypeError, match="beta"):
        path_attention_backward(q, k, v, w, [1.0] * 5, do)
    with pytest.raises(ValueError, match="w must have 5 rows"):
        path_attention_backward(q, k, v, w[:4], beta, do)
    with pytest.raises(ValueError, match="g must be a 1-D"):
        path_attention_backward(q, k, v, w, beta, do, g=q)
    with pytest.raises(ValueError, match="q must be a 2-D"):
        path_attention_backward(q[None], k, v, w, beta, do)


def test_the_library_does_not_import_it():
    code = ("import sys, path_lib, path_lib.impl, path_lib.nn.layers; "
            "assert 'path_lib.book.teaching_backward' not in sys.modules; "
            "assert 'path_lib.book' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
