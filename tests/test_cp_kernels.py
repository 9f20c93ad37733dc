"""Context-parallel PaTH attention with the Triton kernels doing each chunk's own keys
(``impl="triton"``: :mod:`path_lib.kernels.context` returns the chunk's log-sum-exp and runs the backward
from statistics merged with the earlier chunks' part), on the CPU under Triton's interpreter: the
single-process chunked form and a 2-rank gloo group against float64 explicit PaTH on the whole
sequence, outputs and every gradient, on fresh random inputs.

As in ``tests/test_teaching_kernel.py``, this module runs itself in a subprocess with TRITON_INTERPRET=1
(it must be set before triton is imported), and the cases run only there.
"""
from __future__ import annotations


import pytest
import torch

pytest.importorskip("triton")

import dist_workers  # noqa: E402
from helpers import interpreter_markers, random_path_inputs, run_module_under_interpreter  # noqa: E402

needs_interpreter, outside_interpreter = interpreter_markers()


@outside_interpreter
def test_under_triton_interpreter():
    run_module_under_interpreter(__file__, "context-parallel kernel")


def _rel(a, b):
    return float((a.detach().double() - b.detach()).abs().max() / b.detach().abs().max().clamp_min(1e-30))


@needs_interpreter
@pytest.mark.parametrize("B,T,Hq,Hk,gate,n_chunks,block", [(1, 40, 2, 2, False, 2, 64), (2, 42, 4, 2, True, 3, 6),
                                                           (1, 30, 2, 1, True, 1, 64), (1, 48, 2, 2, True, 2, 8)])
def test_chunked_kernel_path_matches_explicit(B, T, Hq, Hk, gate, n_chunks, block):
    """``block`` is the summary's block length (chunks of 14 in blocks of 6: a ragged last block; 24 in
    blocks of 8: three whole blocks), not the kernels' own."""
    from path_lib.distributed import chunked_path_attention
    from path_lib.impl import path_attention
    full = random_path_inputs(B=B, T=T, Hq=Hq, Hk=Hk, D=32, gate=gate, requires_grad=True)
    cot = torch.randn(B, T, Hq, 32, dtype=torch.float64)
    ref = path_attention(*full, impl="explicit")
    g_ref = torch.autograd.grad((ref * cot).sum(), [x for x in full if x is not None])
    local = [None if x is None else x.detach().float().requires_grad_() for x in full]
    out = chunked_path_attention(*local, n_chunks=n_chunks, impl="triton", block_size=block)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    g_out = torch.autograd.grad((out * cot.float()).sum(), [x for x in local if x is not None])
    assert _rel(out, ref) < 1e-5
    for name, a, b in zip("q k v w beta g".split(), g_out, g_ref):
        assert _rel(a, b) < 2e-5, (name, _rel(a, b))


@needs_interpreter
def test_two_ranks_with_the_kernels_match_explicit():
    from path_lib.book.gloo_group import run_gloo_group
    for rank, r in enumerate(run_gloo_group(dist_workers.run_cp_kernels, 2, timeout=300.0)):
        assert r["dtype"] == "torch.float32"
        assert r["out_err"] < 1e-5 * r["out_scale"], (rank, r)
        for n in ("q", "k", "v", "w", "beta", "g"):
            assert r[f"d{n}_err"] < 2e-5 * r[f"d{n}_scale"], (rank, n, r)


@needs_interpreter
def test_chunk_calls_name_their_bad_arguments():
    from path_lib.kernels.context import chunk_backward, chunk_forward
    q, k, v, w, beta, _ = random_path_inputs(B=1, T=20, Hq=2, D=32, dtype=torch.float32)
    o, lse, state = chunk_forward(q, k, v, w, beta, None, 32 ** -0.5)
    assert o.shape == q.shape and lse.shape == (1, 2, 20)
    with pytest.raises(ValueError, match="beta"):
        chunk_forward(q, k, v, w, beta[:, :3], None, 1.0)
    with pytest.raises(TypeError, match="q"):
        chunk_forward(q.double(), k, v, w, beta, None, 1.0)
    with pytest.raises(ValueError, match="lse must have shape"):
        chunk_backward(state, o, lse[:, :1], torch.ones_like(o))
    with pytest.raises(TypeError, match="ChunkState"):
        chunk_backward((state,), o, lse, torch.ones_like(o))


@needs_interpreter
def test_float64_parameters_run_on_the_kernel_path():
    """float64 w, beta, g with float32 q, k, v (allowed by the public checks) are cast to the kernels' float32
    and their gradients come back in float64."""
    from path_lib.distributed import chunked_path_attention
    from path_lib.impl import path_attention
    full = random_path_inputs(B=1, T=24, Hq=2, D=32, gate=True)
    q, k, v = (x.float() for x in full[:3])
    w, beta, g = (x.clone().requires_grad_() for x in full[3:])
    out = chunked_path_attention(q, k, v, w, beta, g, n_chunks=2, impl="triton")
    out.sum().backward()
    assert w.grad.dtype == beta.grad.dtype == g.grad.dtype == torch.float64
    assert _rel(out, path_attention(*full, impl="explicit")) < 1e-5
