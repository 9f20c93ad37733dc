"""The teaching kernel (kernels/path_lib/kernels/teaching.py) on the CPU under Triton's interpreter: outputs against the
float64 ground truth ``path_attention(impl="explicit")`` on fresh random inputs, ragged last blocks
included, and the input checks.

As in ``tests/test_kernels_interpret.py``, TRITON_INTERPRET=1 must be set before the process first
imports triton, and setting it in this process would turn the GPU tests of the same session into
interpreted ones. So without the variable this module runs itself in a subprocess that has it
(``test_under_triton_interpreter``), and the cases below run only there (or in a session started with
TRITON_INTERPRET=1). The input checks need no kernel launch and run in both.
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from helpers import INTERPRETED, interpreter_markers, run_module_under_interpreter  # noqa: E402

needs_interpreter, outside_interpreter = interpreter_markers()


@outside_interpreter
def test_under_triton_interpreter():
    run_module_under_interpreter(__file__, "teaching-kernel")


def _inputs(B, T, H, D, seed=None, beta=None):
    seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, D, generator=g) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g), dim=-1)
    b = 2 * torch.rand(B, T, H, generator=g) if beta is None else torch.full((B, T, H), float(beta))
    return q, k, v, w, b


def _reference(q, k, v, w, beta, scale=None):
    from path_lib.impl import path_attention
    return path_attention(*(x.double() for x in (q, k, v, w, beta)), scale=scale, impl="explicit")


@needs_interpreter
@pytest.mark.parametrize("T,D", [(16, 16), (37, 32), (64, 16), (1, 16)])
def test_matches_float64_ground_truth(T, D):
    from path_lib.kernels.teaching import teaching_path_attention
    q, k, v, w, beta = _inputs(1, T, 2, D)
    o = teaching_path_attention(q, k, v, w, beta)
    assert o.shape == q.shape and o.dtype == torch.float32 and o.is_contiguous()
    err = (o.double() - _reference(q, k, v, w, beta)).abs().max().item()
    assert err < 1e-4, err


@needs_interpreter
def test_batch_block_size_scale_and_reflections():
    from path_lib.kernels.teaching import teaching_path_attention
    q, k, v, w, beta = _inputs(2, 45, 1, 16, beta=2.0)       # true reflections, a ragged last block
    o = teaching_path_attention(q, k, v, w, beta, scale=0.3, block_size=32)
    err = (o.double() - _reference(q, k, v, w, beta, scale=0.3)).abs().max().item()
    assert err < 1e-4, err


@needs_interpreter
def test_precomputed_factors():
    from path_lib.kernels.teaching import block_factors
    from path_lib.reference.householder import householder_product
    q, k, v, w, beta = (x.double() for x in _inputs(1, 20, 1, 16, seed=0))
    Tm, TW, K_end, Q_start = block_factors(q, k, w, beta, 16)
    assert Tm.shape == (1, 2, 16, 16) and TW.shape == K_end.shape == Q_start.shape == (1, 20, 16)
    W, b, K, Q = w[0, :, 0].double(), beta[0, :, 0].double(), k[0, :, 0].double(), q[0, :, 0].double()
    for r in (3, 17):                       # a row of the first block and one of the short last block
        s, e = (0, 16) if r < 16 else (16, 20)
        end = householder_product(W[r + 1:e], b[r + 1:e]) @ K[r]
        start = Q[r] @ householder_product(W[s:r + 1], b[s:r + 1])
        assert torch.allclose(K_end[0, r].double(), end, atol=1e-5)
        assert torch.allclose(Q_start[0, r].double(), start, atol=1e-5)


# ------------------------------------------------------------------------------------------
# input checks (no kernel launch: run in both processes)
# ------------------------------------------------------------------------------------------

def _bad(**change):
    q, k, v, w, beta = _inputs(1, 20, 2, 16, seed=1)
    args = dict(q=q, k=k, v=v, w=w, beta=beta)
    args.update(change)
    kw = {key: args.pop(key) for key in ("scale", "block_size") if key in args}
    return (args["q"], args["k"], args["v"], args["w"], args["beta"]), kw


@pytest.mark.parametrize("change,error,match", [
    (dict(q=[1.0]), TypeError, "q must be a torch.Tensor"),
    (dict(q=torch.randn(1, 20, 2)), ValueError, "q must have 4 dimensions"),
    (dict(k=torch.randn(1, 20, 2, 16, dtype=torch.float64)), TypeError, "k must have dtype"),
    (dict(v=torch.randn(1, 20, 2, 32)), ValueError, "v must have shape"),
    (dict(k=torch.randn(1, 20, 1, 16), v=torch.randn(1, 20, 1, 16)), ValueError, "as many q heads as k heads"),
    (dict(q=torch.randn(1, 20, 2, 24), k=torch.randn(1, 20, 2, 24), v=torch.randn(1, 20, 2, 24),
          w=torch.nn.functional.normalize(torch.randn(1, 20, 2, 24), dim=-1)), ValueError, "power of two"),
    (dict(q=torch.randn(1, 0, 2, 16), k=torch.randn(1, 0, 2, 16), v=torch.randn(1, 0, 2, 16),
          w=torch.randn(1, 0, 2, 16), beta=torch.rand(1, 0, 2)), ValueError, "positive time length"),
    (dict(w=torch.randn(1, 20, 2, 16).double()), TypeError, "w must have dtype"),
    (dict(w=torch.randn(1, 20, 2, 16)), ValueError, "w must be L2-normalised"),
    (dict(beta=torch.rand(1, 20, 3)), ValueError, "beta must have shape"),
    (dict(beta=torch.full((1, 20, 2), 2.5)), ValueError, r"beta must lie in \[0, 2\]"),
    (dict(block_size=24), ValueError, "block_size must be a power of two >= 16"),
    (dict(block_size=8), ValueError, "block_size must be a power of two >= 16"),
    (dict(block_size=16.0), TypeError, "block_size must be an int"),
    (dict(scale=-1.0), ValueError, "scale must be a positive"),
])
def test_bad_inputs(change, error, match):
    from path_lib.kernels.teaching import teaching_path_attention
    args, kw = _bad(**change)
    with pytest.raises(error, match=match):
        teaching_path_attention(*args, **kw)


def test_forward_only():
    from path_lib.kernels.teaching import teaching_path_attention
    (q, k, v, w, beta), _ = _bad()
    with pytest.raises(ValueError, match="forward only"):
        teaching_path_attention(q.requires_grad_(), k, v, w, beta)


@pytest.mark.skipif(INTERPRETED or torch.cuda.is_available(), reason="needs a CPU session without the interpreter")
def test_cpu_needs_the_interpreter():
    from path_lib.kernels.teaching import teaching_path_attention
    (q, k, v, w, beta), _ = _bad()
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        teaching_path_attention(q, k, v, w, beta)


@needs_interpreter
def test_interpreter_is_float32_only():
    from path_lib.kernels.teaching import teaching_path_attention
    (q, k, v, w, beta), _ = _bad()
    with pytest.raises(TypeError, match="float32 only"):
        teaching_path_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), w, beta)
