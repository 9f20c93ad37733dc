"""PaTH's per-token direction in one fused Triton pass: causal short convolution, SiLU, per-head L2 norm.

    from path_lib.kernels.short_conv import short_conv_normalize
    w = short_conv_normalize(u, weight, n_heads)     # u [B, T, C], weight [C, K] -> w [B, T, H, C // H]

PaTH's layer computes ``w_t = L2norm_per_head(SiLU(CausalDepthwiseConv_K(u)_t))`` from the low-rank
projection ``u`` of the hidden states. In PyTorch that is a depthwise ``conv1d`` on a transposed copy,
a transpose back, the SiLU, a cast to float32 and a normalisation, each a pass over ``[B, T, C]``, and
twice as many in the backward (with cuDNN's depthwise weight gradient the slowest of them). Here the
forward is one kernel that reads ``u`` once and writes ``w`` once, and the backward is one kernel that
recomputes the forward's values from ``u`` (nothing but ``u`` and the weight is saved) and writes
``du`` and per-program partial sums of the weight's gradient (summed afterwards, so the result is
deterministic).

One program per ``(block of BT time steps, batch row * head)``; every value is float32 in registers.
Runs on a CUDA GPU, or on the CPU under ``TRITON_INTERPRET=1`` (set before triton is first imported) in
float32. ``path_lib.reference.short_conv.short_conv_normalize_torch`` is the same map in plain PyTorch
(the layer's other backends, and the check of this one).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from path_lib.reference.short_conv import NORMALIZATIONS, check_short_conv

__all__ = ["short_conv_normalize", "NORMALIZATIONS"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_BLOCK_T = 32


@triton.jit
def _conv_silu(U, WGT, b_off, rows, cols, cmask, T_u, shift, C, K: tl.constexpr, BT: tl.constexpr,
               BD: tl.constexpr):
    """``y``, ``sigmoid(y)`` and ``silu(y)``, ``[BT, BD]``, of output rows ``rows`` (tap j reads input row
    ``row + shift - (K - 1) + j``)."""
    y = tl.zeros((BT, BD), dtype=tl.float32)
    for j in tl.static_range(K):
        src = rows + shift - (K - 1) + j
        m = ((src >= 0) & (src < T_u))[:, None] & cmask[None, :]
        x = tl.load(U + b_off + src[:, None] * C + cols[None, :], mask=m, other=0.0).to(tl.float32)
        wj = tl.load(WGT + cols * K + j, mask=cmask, other=0.0).to(tl.float32)
        y += x * wj[None, :]
    sig = tl.sigmoid(y)
    return y, sig, y * sig


@triton.jit
def _short_conv_fwd_kernel(U, WGT, OUT, T, T_u, shift, C, H, Dh, eps,
                           K: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, FLA_NORM: tl.constexpr):
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    rows = pid_t * BT + tl.arange(0, BT)
    d = tl.arange(0, BD)
    cmask = d < Dh
    cols = h * Dh + d
    _, _, s = _conv_silu(U, WGT, b.to(tl.int64) * T_u * C, rows, cols, cmask, T_u, shift, C, K, BT, BD)
    ss = tl.sum(s * s, 1)
    if FLA_NORM:
        r = 1.0 / tl.sqrt(ss + eps)
    else:
        r = 1.0 / tl.maximum(tl.sqrt(ss), eps)
    m = (rows < T)[:, None] & cmask[None, :]
    tl.store(OUT + b.to(tl.int64) * T * C + rows[:, None] * C + cols[None, :], s * r[:, None], mask=m)


@triton.jit
def _dconv_input(U, WGT, DOUT, b_off, b_off_out, rows, cols, cmask, T, T_u, shift, C, eps,
                 K: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, FLA_NORM: tl.constexpr):
    """The gradient at ``y`` (the convolution's output) of output rows ``rows``; zero past ``T``."""
    y, sig, s = _conv_silu(U, WGT, b_off, rows, cols, cmask, T_u, shift, C, K, BT, BD)
    m = ((rows >= 0) & (rows < T))[:, None] & cmask[None, :]
    dout = tl.load(DOUT + b_off_out + rows[:, None] * C + cols[None, :], mask=m, other=0.0)
    ss = tl.sum(s * s, 1)
    sd = tl.sum(s * dout, 1)
    if FLA_NORM:
        r = 1.0 / tl.sqrt(ss + eps)
        ds = r[:, None] * dout - s * (r * r * r * sd)[:, None]
    else:
        nrm = tl.sqrt(ss)
        den = tl.maximum(nrm, eps)
        live = tl.where(nrm > eps, 1.0, 0.0)
        ds = (dout - s * (live * sd / (den * den))[:, None]) / den[:, None]
    return ds * sig * (1.0 + y * (1.0 - sig))


@triton.jit
def _short_conv_bwd_kernel(U, WGT, DOUT, DU, DWGT_PART, B, T, T_u, shift, C, H, Dh, eps,
                           K: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, FLA_NORM: tl.constexpr):
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // H, pid_bh % H
    d = tl.arange(0, BD)
    cmask = d < Dh
    cols = h * Dh + d
    b_off, b_off_out = b.to(tl.int64) * T_u * C, b.to(tl.int64) * T * C
    # input rows of this program: u's rows i, which output rows i - shift + (K - 1) - j read with tap j
    urows = pid_t * BT + tl.arange(0, BT)
    m = (urows < T_u)[:, None] & cmask[None, :]
    x = tl.load(U + b_off + urows[:, None] * C + cols[None, :], mask=m, other=0.0).to(tl.float32)
    du = tl.zeros((BT, BD), dtype=tl.float32)
    part = (pid_t * B + b).to(tl.int64) * C * K              # this program's row of partial sums
    for j in tl.static_range(K):
        orows = urows - shift + (K - 1) - j                  # the output rows that read u's rows with tap j
        dy = _dconv_input(U, WGT, DOUT, b_off, b_off_out, orows, cols, cmask, T, T_u, shift, C, eps,
                          K, BT, BD, FLA_NORM)
        wj = tl.load(WGT + cols * K + j, mask=cmask, other=0.0).to(tl.float32)
        du += dy * wj[None, :]
        tl.store(DWGT_PART + part + cols * K + j, tl.sum(dy * x, 0), mask=cmask)
    tl.store(DU + b_off + urows[:, None] * C + cols[None, :], du.to(DU.dtype.element_ty), mask=m)


def _launch_shape(C: int, n_heads: int):
    Dh = C // n_heads
    return Dh, triton.next_power_of_2(Dh)


class _ShortConvNormalizeFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, weight, n_heads, fla_norm, eps, shift):
        B, T_u, C = u.shape
        K = weight.shape[1]
        T = T_u - shift
        Dh, BD = _launch_shape(C, n_heads)
        u, weight = u.contiguous(), weight.contiguous()
        out = torch.empty(B, T, C, dtype=torch.float32, device=u.device)
        if T > 0:
            grid = (triton.cdiv(T, _BLOCK_T), B * n_heads)
            _short_conv_fwd_kernel[grid](u, weight, out, T, T_u, shift, C, n_heads, Dh, eps,
                                         K=K, BT=_BLOCK_T, BD=BD, FLA_NORM=fla_norm)
        ctx.save_for_backward(u, weight)
        ctx.n_heads, ctx.fla_norm, ctx.eps, ctx.shift = n_heads, fla_norm, eps, shift
        return out.view(B, T, n_heads, Dh)

    @staticmethod
    def backward(ctx, dout):
        u, weight = ctx.saved_tensors
        B, T_u, C = u.shape
        K = weight.shape[1]
        T = T_u - ctx.shift
        Dh, BD = _launch_shape(C, ctx.n_heads)
        du = torch.empty_like(u)
        NT = triton.cdiv(T_u, _BLOCK_T)
        part = torch.empty(NT * B, C, K, dtype=torch.float32, device=u.device)
        if T_u > 0:
            _short_conv_bwd_kernel[(NT, B * ctx.n_heads)](
                u, weight, dout.float().reshape(B, T, C).contiguous(), du, part, B, T, T_u, ctx.shift, C,
                ctx.n_heads, Dh, ctx.eps, K=K, BT=_BLOCK_T, BD=BD, FLA_NORM=ctx.fla_norm)
        dweight = part.sum(0).to(weight.dtype) if NT * B else torch.zeros_like(weight)
        return du, dweight, None, None, None, None


def _check(u, weight, n_heads, normalization, eps, left_context, check_values):
    """:func:`path_lib.reference.short_conv.check_short_conv` (float16 / bfloat16 / float32 here), then what
    this kernel needs besides: a head dim of at most 256, a CUDA device (or the interpreter), and with
    ``check_values`` finite u and weight (a device sync)."""
    weight, eps, shift = check_short_conv(u, weight, n_heads, normalization, eps, left_context, _DTYPES)
    if u.shape[-1] // n_heads > 256:
        raise ValueError(f"head dim C // n_heads must be at most 256, got {u.shape[-1] // n_heads}")
    if u.device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise ValueError(f"u is on {u.device}: the fused pass runs on a CUDA GPU, or on the CPU with "
                         "TRITON_INTERPRET=1 set before triton is imported; short_conv_normalize_torch "
                         "(path_lib.reference.short_conv) is the same map in PyTorch")
    if not isinstance(check_values, bool):
        raise TypeError(f"check_values must be a bool, got {type(check_values).__name__}")
    if check_values:
        for name, x in (("u", u), ("weight", weight)):
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"{name} has NaN or infinite entries")
    return weight, eps, shift


def short_conv_normalize(u: torch.Tensor, weight: torch.Tensor, n_heads: int, *, normalization: str = "unit",
                         eps: float = 1e-6, left_context: bool = False, check_values: bool = True) -> torch.Tensor:
    """``L2norm_per_head(SiLU(causal depthwise conv(u)))`` in one fused pass; differentiable in u and weight.

    Args:
        u: ``[B, T, C]`` float16 / bfloat16 / float32 (the layer's low-rank projection, ``C = H * Dh``).
        weight: ``[C, K]``, or nn.Conv1d's depthwise ``[C, 1, K]``: tap ``K - 1`` multiplies the current
            step, tap ``K - 1 - i`` the step ``i`` back (cross-correlation on a left-padded input, as
            ``F.conv1d`` computes it).
        n_heads: ``H``; the norm is taken over each head's ``Dh = C // H`` channels (``Dh <= 256``).
        normalization: ``"unit"`` or ``"fla"`` (see :data:`NORMALIZATIONS`).
        eps: the normalisation's epsilon.
        left_context: u's first ``K - 1`` rows are the inputs of the steps before the first output
            (decoding); otherwise those steps count as zeros.
        check_values: check that u and weight are finite (a device sync; the layer passes False).
    Returns:
        ``[B, T_out, H, Dh]`` float32, ``T_out = T - (K - 1)`` with ``left_context``, else ``T``.
    """
    weight, eps, shift = _check(u, weight, n_heads, normalization, eps, left_context, check_values)
    return _ShortConvNormalizeFn.apply(u, weight, n_heads, normalization == "fla", eps, shift)
