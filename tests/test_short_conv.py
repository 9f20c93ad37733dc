"""The fused short convolution (kernels/path_lib/kernels/short_conv.py): w = L2norm(SiLU(causal depthwise conv(u))).

Forward and both gradients against the float64 PyTorch map (``path_lib.reference.short_conv.short_conv_normalize_torch``) on fresh
random inputs: ragged last blocks, both normalisations and their epsilon branch, ``left_context``, one
and four taps; PaTH's layer with the Triton backend against the same layer on the blockwise backend
(which keeps the PyTorch convolution); the argument checks. On the CPU the kernels run under Triton's
interpreter in a subprocess (as in ``tests/test_teaching_kernel.py``); on a GPU the cases run in this
process, bfloat16 included.
"""
from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from helpers import INTERPRETED, run_module_under_interpreter  # noqa: E402

ON_GPU = torch.cuda.is_available() and not INTERPRETED
runs_kernels = pytest.mark.skipif(not (INTERPRETED or ON_GPU), reason="runs in the TRITON_INTERPRET=1 subprocess")
DEVICE = "cuda" if ON_GPU else "cpu"


@pytest.mark.skipif(INTERPRETED or ON_GPU, reason="the cases run in this process")
def test_under_triton_interpreter():
    run_module_under_interpreter(__file__, "short-convolution")


def _inputs(B, T, C, K, dtype=torch.float32, tiny_rows=0):
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    u = torch.randn(B, T, C, generator=g)
    u[:, :tiny_rows] *= 1e-9                   # rows whose SiLU output is shorter than eps
    weight = torch.randn(C, 1, K, generator=g) / K
    return u.to(DEVICE, dtype), weight.to(DEVICE)


def _check_against_float64(u, weight, H, normalization, left_context, tol):
    from path_lib.kernels.short_conv import short_conv_normalize
    from path_lib.reference.short_conv import short_conv_normalize_torch
    u, weight = u.requires_grad_(), weight.requires_grad_()
    w = short_conv_normalize(u, weight, H, normalization=normalization, left_context=left_context)
    u64, wt64 = (x.detach().double().requires_grad_() for x in (u, weight))
    ref = short_conv_normalize_torch(u64, wt64, H, normalization=normalization, left_context=left_context)
    assert w.dtype == torch.float32 and w.shape == ref.shape
    assert (w.double() - ref).abs().max().item() < tol
    dw = torch.randn_like(ref)
    (w * dw.float()).sum().backward()
    (ref * dw).sum().backward()
    for got, want, x in ((u.grad, u64.grad, u), (weight.grad, wt64.grad, weight)):
        assert got.dtype == x.dtype and got.shape == want.shape
        err = (got.double() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
        assert err < tol, err


@runs_kernels
@pytest.mark.parametrize("B,T,H,Dh,K,normalization,left_context", [
    (2, 37, 3, 16, 3, "unit", False), (1, 70, 2, 32, 4, "fla", False), (2, 9, 2, 12, 3, "unit", True),
    (1, 5, 1, 8, 1, "fla", True), (1, 33, 2, 64, 3, "unit", False)])
def test_matches_float64_reference(B, T, H, Dh, K, normalization, left_context):
    u, weight = _inputs(B, T, H * Dh, K, tiny_rows=2 if normalization == "unit" else 0)
    _check_against_float64(u, weight, H, normalization, left_context, tol=1e-5)


@pytest.mark.skipif(not ON_GPU or torch.cuda.get_device_capability()[0] < 8, reason="bfloat16 on a GPU")
@pytest.mark.parametrize("normalization", ["unit", "fla"])
def test_bfloat16_on_gpu(normalization):
    """bf16 u (the layer under autocast): the kernel computes in float32, so its error is u's rounding only."""
    u, weight = _inputs(2, 4096, 768, 3, dtype=torch.bfloat16)
    _check_against_float64(u, weight, 12, normalization, False, tol=2e-2)


@runs_kernels
def test_empty_sequences():
    from path_lib.kernels.short_conv import short_conv_normalize
    u, weight = _inputs(2, 0, 8, 3)
    assert short_conv_normalize(u, weight, 2).shape == (2, 0, 2, 4)
    u, weight = _inputs(2, 2, 8, 3)                       # only the left context: no output step
    u.requires_grad_()
    w = short_conv_normalize(u, weight, 2, left_context=True)
    assert w.shape == (2, 0, 2, 4)
    w.sum().backward()
    assert u.grad.abs().max().item() == 0


@runs_kernels
@pytest.mark.parametrize("use_forget_gate,w_normalization", [(False, "unit"), (True, "fla")])
def test_layer_triton_path_matches_pytorch_convolution(use_forget_gate, w_normalization):
    """The layer's w, beta, g and their gradients with the fused pass (Triton backend) and without it."""
    from path_lib.nn.layers import PaTHAttention
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    fused = PaTHAttention(32, 2, backend="triton", use_forget_gate=use_forget_gate,
                          w_normalization=w_normalization).to(DEVICE)
    plain = PaTHAttention(32, 2, backend="blockwise", use_forget_gate=use_forget_gate,
                          w_normalization=w_normalization).to(DEVICE)
    plain.load_state_dict(fused.state_dict())
    x = torch.randn(2, 21, 32, device=DEVICE)
    outs = [layer.path_params(x) for layer in (fused, plain)]
    for a, b in zip(*outs):
        assert a is None and b is None or (a - b).abs().max().item() < 1e-5
    for w, _, _ in outs:
        (w * torch.arange(w.shape[-1], device=DEVICE)).sum().backward()
    for name, p in fused.named_parameters():
        q = dict(plain.named_parameters())[name]
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert (p.grad - q.grad).abs().max().item() <= 1e-5 * max(q.grad.abs().max().item(), 1.0), name


def test_argument_checks():
    from path_lib.kernels.short_conv import short_conv_normalize
    u, weight = torch.randn(1, 4, 8), torch.randn(8, 1, 3)
    cases = [
        (dict(u=u.double()), TypeError, "u must have dtype"),
        (dict(u=u[0]), ValueError, "u must have 3 dimensions"),
        (dict(weight=torch.randn(6, 3)), ValueError, "weight must be"),
        (dict(weight=torch.randn(8, 2, 3)), ValueError, "weight must be"),
        (dict(n_heads=3), ValueError, "multiple of n_heads"),
        (dict(n_heads=0), ValueError, "n_heads"),
        (dict(normalization="l1"), ValueError, "normalization"),
        (dict(eps=0.0), ValueError, "eps must be positive"),
        (dict(left_context=1), TypeError, "left_context must be a bool"),
        (dict(u=torch.randn(1, 1, 8), left_context=True), ValueError, "at least K - 1"),
        (dict(u=torch.randn(1, 4, 1024), weight=torch.randn(1024, 3), n_heads=2), ValueError, "at most 256"),
    ]
    for change, error, message in cases:
        args = dict(u=u, weight=weight, n_heads=2) | change
        with pytest.raises(error, match=message):
            short_conv_normalize(args.pop("u"), args.pop("weight"), args.pop("n_heads"), **args)


@runs_kernels
def test_value_checks():
    """NaN or infinite u or weight: a named ValueError by default; check_values=False skips the sync."""
    from path_lib.kernels.short_conv import short_conv_normalize
    u, weight = _inputs(1, 6, 8, 3)
    bad_u, bad_weight = u.clone(), weight.clone()
    bad_u[0, 3, 1] = float("nan")
    bad_weight[2, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="u has NaN or infinite"):
        short_conv_normalize(bad_u, weight, 2)
    with pytest.raises(ValueError, match="weight has NaN or infinite"):
        short_conv_normalize(u, bad_weight, 2)
    with pytest.raises(TypeError, match="check_values must be a bool"):
        short_conv_normalize(u, weight, 2, check_values=1)
    assert short_conv_normalize(bad_u, weight, 2, check_values=False).shape == (1, 6, 2, 4)


@pytest.mark.skipif(INTERPRETED or torch.cuda.is_available(), reason="a CPU without the interpreter")
def test_cpu_without_interpreter_is_named():
    from path_lib.kernels.short_conv import short_conv_normalize
    with pytest.raises(ValueError, match="u is on cpu: the fused pass runs on a CUDA GPU"):
        short_conv_normalize(torch.randn(1, 4, 8), torch.randn(8, 3), 2)


def test_torch_map_matches_a_loop():
    """The PyTorch map against the definition written out step by step (float64, fresh inputs): tap
    K - 1 on the current step, zeros before the first (or u's own first K - 1 rows as left context)."""
    from path_lib.reference.short_conv import short_conv_normalize_torch
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    B, T, H, Dh, K = 2, 7, 2, 3, 3
    u, weight = torch.randn(B, T, H * Dh, generator=g, dtype=torch.float64), torch.randn(H * Dh, K, generator=g,
                                                                                          dtype=torch.float64)
    for left_context in (False, True):
        w = short_conv_normalize_torch(u, weight, H, left_context=left_context)
        x = u if left_context else torch.cat([u.new_zeros(B, K - 1, H * Dh), u], 1)
        for t in range(w.shape[1]):
            y = sum(x[:, t + j] * weight[:, j] for j in range(K))
            s = (y * torch.sigmoid(y)).view(B, H, Dh)
            assert torch.allclose(w[:, t], s / s.norm(dim=-1, keepdim=True), atol=1e-12)
    assert short_conv_normalize_torch(u[:, :2], weight, H, left_context=True).shape == (B, 0, H, Dh)
