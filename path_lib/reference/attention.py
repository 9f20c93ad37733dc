"""PaTH attention and its relatives (NoPE, RoPE, ALiBi, FoX), in the public layout.

Layout: q ``[B, T, Hq, D]``; k, v, w ``[B, T, Hk, D]``; beta ``[B, T, Hk]``; g ``[B, T, Hq]``;
outputs ``[B, T, Hq, Dv]``. Causal everywhere. With ``H_t = I - beta_t w_t w_t^T`` and
``G = cumsum(g)``, PaTH's logit is

    logit(i, j) = scale * q_i^T H_i H_{i-1} ... H_{j+1} k_j + G_i - G_j,     j <= i.

:func:`path_attention` here has the two reference implementations, selected by ``impl``:

* ``"explicit"``: a ``D x D`` matrix product per query-key pair. Slow; the ground truth.
* ``"parallel"`` (default): the UT all-pairs form over the whole sequence (``O(T^3)`` for the UT solve).

They compute in float64 when q is float64 and in float32 otherwise; the output has q's dtype. This module
only computes: the faster implementations (the blockwise mirror, chapter 6's scan, the Triton kernels)
and the choice among all of them are :func:`path_lib.impl.path_attention` (``path_lib.path_attention``).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..validation import (check_bool, check_choice, check_finite, check_int, check_log_gate,
                          check_number, check_path_params, check_qkv, check_same_device, check_scale,
                          check_tensor, PARAM_DTYPES)
from .householder import _householder, _ut_transform

__all__ = [
    "path_attention", "path_logits", "softmax_attention", "rope_attention", "apply_rope",
    "alibi_attention", "alibi_slopes", "fox_attention", "IMPLEMENTATIONS",
]

#: the two forms this module computes (``impl``); :data:`path_lib.impl.IMPLEMENTATIONS` names every
#: implementation and takes these two from here
IMPLEMENTATIONS = ("explicit", "parallel")


# ----------------------------------------------------------------------------------------------
# helpers: layout, dtype, grouped-query heads, masked softmax
# ----------------------------------------------------------------------------------------------

def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _heads_first(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, T, H, ...]`` -> ``[B, H, T, ...]`` in ``dtype``."""
    return x.to(dtype).transpose(1, 2)


def _repeat_heads(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Grouped-query heads: ``[B, Hk, ...]`` -> ``[B, Hk * n_rep, ...]`` (query head h uses h // n_rep)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _causal_mask(T: int, device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def _gate_bias(g: Optional[torch.Tensor], dtype) -> Optional[torch.Tensor]:
    """``[B, T, H]`` log gates -> ``[B, H, T, T]`` bias ``G_i - G_j`` (G = cumsum over time)."""
    if g is None:
        return None
    G = torch.cumsum(g.to(dtype), dim=1).transpose(1, 2)  # [B, H, T]
    return G[..., :, None] - G[..., None, :]


def _attend(logits: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax of ``[B, H, T, T]`` logits applied to ``[B, H, T, Dv]`` values."""
    T = logits.shape[-1]
    logits = logits.masked_fill(~_causal_mask(T, logits.device), float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


def _finish(o: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, Dv]`` -> ``[B, T, H, Dv]`` in ``like``'s dtype."""
    return o.transpose(1, 2).to(like.dtype)


# ----------------------------------------------------------------------------------------------
# PaTH logits: explicit and parallel (UT) forms
# ----------------------------------------------------------------------------------------------

def _explicit_scores(q, k, w, beta):
    """``[B, H, T, T]`` raw scores ``q_i^T H_i ... H_{j+1} k_j`` (zero above the diagonal).

    For each query i a running ``D x D`` matrix ``M = H_i ... H_{j+1}`` is multiplied out explicitly.
    Inputs heads-first: q, k, w ``[B, H, T, D]``, beta ``[B, H, T]``.
    """
    B, H, T, D = q.shape
    if T == 0:
        return q @ k.transpose(-1, -2)                      # [B, H, 0, 0]
    eye = torch.eye(D, dtype=q.dtype, device=q.device).expand(B, H, D, D)
    zero = q.new_zeros(B, H)
    rows = []
    for i in range(T):
        M = eye
        row = [zero] * T
        for j in range(i, -1, -1):
            row[j] = torch.einsum("bhd,bhde,bhe->bh", q[:, :, i], M, k[:, :, j])
            M = M @ _householder(w[:, :, j], beta[:, :, j])
        rows.append(torch.stack(row, dim=-1))
    return torch.stack(rows, dim=-2)


def _parallel_scores(q, k, w, beta):
    """``[B, H, T, T]`` raw scores by the UT all-pairs form (zero above the diagonal).

    ``S = tril(Q K^T) - tril(Q W^T) T strictLower(W K^T)`` with ``T`` the sequence's UT matrix.
    """
    Tm = _ut_transform(w, beta)
    return (torch.tril(q @ k.transpose(-1, -2))
            - torch.tril(q @ w.transpose(-1, -2)) @ Tm @ torch.tril(w @ k.transpose(-1, -2), diagonal=-1))


def _prepare(q, k, v, w, beta, g, scale, check_values):
    check_bool(check_values, "check_values")
    qh, kh, vh, scale, dt = _baseline_prepare(q, k, v, scale, finite=check_values)
    check_path_params(q, k, w, beta, g, check_values=check_values)
    n_rep = q.shape[2] // k.shape[2]
    wh = _repeat_heads(_heads_first(w, dt), n_rep)
    bh = _repeat_heads(beta.to(dt).transpose(1, 2), n_rep)
    return qh, kh, vh, wh, bh, scale, dt


def path_logits(q, k, w, beta, g=None, *, scale=None, impl: str = "parallel",
                check_values: bool = True) -> torch.Tensor:
    """PaTH attention logits ``[B, Hq, T, T]``, with ``-inf`` above the diagonal.

    Args:
        q: ``[B, T, Hq, D]``; k, w: ``[B, T, Hk, D]``; beta: ``[B, T, Hk]``; g: ``[B, T, Hq]`` or None.
        impl: ``"explicit"`` or ``"parallel"``.
    """
    check_choice(impl, "impl", IMPLEMENTATIONS)
    qh, kh, _, wh, bh, scale, dt = _prepare(q, k, k, w, beta, g, scale, check_values)
    S = (_explicit_scores if impl == "explicit" else _parallel_scores)(qh, kh, wh, bh) * scale
    if g is not None:
        S = S + _gate_bias(g, dt)
    T = S.shape[-1]
    return S.masked_fill(~_causal_mask(T, S.device), float("-inf"))


# ----------------------------------------------------------------------------------------------
# public entry points
# ----------------------------------------------------------------------------------------------

def path_attention(q, k, v, w, beta, g=None, *, scale=None, impl: str = "parallel",
                   check_values: bool = True) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX when ``g`` is given), computed by a reference implementation.

    Args:
        q: ``[B, T, Hq, D]`` queries.
        k: ``[B, T, Hk, D]`` keys; ``Hq`` must be a multiple of ``Hk`` (grouped-query heads).
        v: ``[B, T, Hk, Dv]`` values.
        w: ``[B, T, Hk, D]`` unit Householder directions, float32 (or float64).
        beta: ``[B, T, Hk]`` strengths in [0, 2], float32 (or float64).
        g: optional ``[B, T, Hq]`` log forget gates (<= 0), added unscaled: ``+ G_i - G_j``.
        scale: logit scale, default ``D ** -0.5``.
        impl: ``"explicit"`` (ground truth) or ``"parallel"`` (UT all-pairs); the other implementations
            are :func:`path_lib.impl.path_attention`'s.
        check_values: also check values (finite, beta range, unit w); shapes and dtypes always are.
    Returns:
        ``[B, T, Hq, Dv]`` in q's dtype.
    """
    if isinstance(impl, str) and impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl={impl!r} is not a reference implementation {IMPLEMENTATIONS}: use "
                         "path_lib.path_attention (path_lib.impl.path_attention), which runs every implementation")
    check_choice(impl, "impl", IMPLEMENTATIONS)
    qh, kh, vh, wh, bh, scale, dt = _prepare(q, k, v, w, beta, g, scale, check_values)
    S = (_explicit_scores if impl == "explicit" else _parallel_scores)(qh, kh, wh, bh) * scale
    if g is not None:
        S = S + _gate_bias(g, dt)
    return _finish(_attend(S, vh), q)


def _baseline_prepare(q, k, v, scale, finite: bool = True):
    B, T, Hq, Hk, D = check_qkv(q, k, v, finite=finite)
    scale = check_scale(scale, D)
    dt = _compute_dtype(q)
    n_rep = Hq // Hk
    qh = _heads_first(q, dt)
    kh = _repeat_heads(_heads_first(k, dt), n_rep)
    vh = _repeat_heads(_heads_first(v, dt), n_rep)
    return qh, kh, vh, scale, dt


def softmax_attention(q, k, v, *, scale=None, check_values: bool = True) -> torch.Tensor:
    """Causal softmax attention with no position encoding (NoPE). Shapes as :func:`path_attention`.

    ``check_values=False`` skips the finiteness check of q, k, v (a device sync); shapes and dtypes always."""
    check_bool(check_values, "check_values")
    qh, kh, vh, scale, _ = _baseline_prepare(q, k, v, scale, finite=check_values)
    return _finish(_attend(scale * qh @ kh.transpose(-1, -2), vh), q)


def apply_rope(x: torch.Tensor, *, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    """Rotate ``x`` ``[B, T, H, D]`` by RoPE: pair ``(x_{2m}, x_{2m+1})`` at position t turns by
    ``t * base^{-2m/D}``. ``offset`` shifts the positions (for decoding)."""
    check_tensor(x, "x", ndim=4, finite=False)
    base = check_number(base, "base", positive=True)
    offset = check_int(offset, "offset")
    D = x.shape[-1]
    if D % 2:
        raise ValueError(f"x must have an even head dim (last dimension) for RoPE, got {D}")
    dt = _compute_dtype(x)
    T = x.shape[1]
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=dt, device=x.device) / D)
    pos = torch.arange(offset, offset + T, dtype=dt, device=x.device)
    ang = pos[:, None] * inv_freq[None, :]  # [T, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x2 = x.to(dt).unflatten(-1, (D // 2, 2))
    a, b = x2[..., 0], x2[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)


def rope_attention(q, k, v, *, scale=None, base: float = 10000.0, check_values: bool = True) -> torch.Tensor:
    """Causal attention with rotary position embeddings on q and k (logit depends on i - j only)."""
    D = check_qkv(q, k, v, finite=False)[-1]
    if D % 2:
        raise ValueError(f"q and k must have an even head dim for RoPE, got {D}")
    return softmax_attention(apply_rope(q, base=base), apply_rope(k, base=base), v, scale=scale,
                             check_values=check_values)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes ``m_h`` (Press et al.): a geometric sequence, ``2^{-8/n}`` for n a power of 2."""
    if not isinstance(n_heads, int) or isinstance(n_heads, bool):
        raise TypeError(f"n_heads must be a positive int, got {type(n_heads).__name__}")
    if n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")

    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra, dtype=torch.float64)


def alibi_attention(q, k, v, *, scale=None, slopes: Optional[torch.Tensor] = None,
                    check_values: bool = True) -> torch.Tensor:
    """Causal attention with ALiBi's linear distance bias ``-m_h (i - j)``. slopes: ``[Hq]``."""
    check_bool(check_values, "check_values")
    qh, kh, vh, scale, dt = _baseline_prepare(q, k, v, scale, finite=check_values)
    H, T = qh.shape[1], qh.shape[2]
    if slopes is None:
        slopes = alibi_slopes(H)
    check_tensor(slopes, "slopes", ndim=1, finite=False)
    if slopes.shape[0] != H:
        raise ValueError(f"slopes must have one entry per query head (q has {H}), got {slopes.shape[0]}")
    if check_values:
        check_finite(slopes, "slopes")
    pos = torch.arange(T, device=q.device, dtype=dt)
    dist = pos[:, None] - pos[None, :]
    bias = -slopes.to(device=q.device, dtype=dt)[:, None, None] * dist
    return _finish(_attend(scale * qh @ kh.transpose(-1, -2) + bias, vh), q)


def fox_attention(q, k, v, g, *, scale=None, check_values: bool = True) -> torch.Tensor:
    """Forgetting attention (FoX): causal softmax attention plus ``G_i - G_j``, G = cumsum of the
    log forget gates ``g`` ``[B, T, Hq]`` (<= 0)."""
    check_bool(check_values, "check_values")
    qh, kh, vh, scale, dt = _baseline_prepare(q, k, v, scale, finite=check_values)
    check_tensor(g, "g", ndim=3, dtypes=PARAM_DTYPES, finite=False)
    check_same_device(g, "g", q)
    if tuple(g.shape) != (q.shape[0], q.shape[1], q.shape[2]):
        raise ValueError(f"g must have shape {tuple(q.shape[:3])} (like q's [B, T, Hq]), got {tuple(g.shape)}")
    if check_values:
        check_finite(g, "g")
        check_log_gate(g)
    return _finish(_attend(scale * qh @ kh.transpose(-1, -2) + _gate_bias(g, dt), vh), q)
