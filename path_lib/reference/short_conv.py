"""PaTH's per-token direction ``w`` from the layer's low-rank projection ``u``, in plain PyTorch.

    w_t = L2norm_per_head(SiLU(CausalDepthwiseConv_K(u)_t))

The one PyTorch form of the map: :class:`path_lib.nn.layers.PaTHAttention` runs it on every backend but
the Triton one (and in float64), and it is the check of the fused Triton pass
(``path_lib.kernels.short_conv.short_conv_normalize``), whose argument checks (:func:`check_short_conv`)
it shares.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from path_lib.validation import check_choice, check_int, check_number, check_tensor

__all__ = ["short_conv_normalize_torch", "check_short_conv", "NORMALIZATIONS"]

#: ``"unit"``: ``s / max(||s||, eps)`` (``F.normalize``); ``"fla"``: ``s / sqrt(||s||^2 + eps)`` (fla's l2norm).
NORMALIZATIONS = ("unit", "fla")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_short_conv(u, weight, n_heads, normalization, eps, left_context, dtypes=DTYPES):
    """Named ``TypeError`` / ``ValueError`` for the map's arguments (shapes and dtypes; no values, no
    device sync). Returns ``(weight [C, K], eps, shift)``: nn.Conv1d's ``[C, 1, K]`` weight squeezed,
    ``shift = K - 1`` with ``left_context``, else 0."""
    check_tensor(u, "u", ndim=3, dtypes=dtypes, finite=False)
    check_int(n_heads, "n_heads", minimum=1)
    check_choice(normalization, "normalization", NORMALIZATIONS)
    eps = check_number(eps, "eps")
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if not isinstance(left_context, bool):
        raise TypeError(f"left_context must be a bool, got {type(left_context).__name__}")
    check_tensor(weight, "weight", dtypes=dtypes, finite=False)
    C = u.shape[-1]
    if weight.dim() == 3 and weight.shape[1] == 1:           # nn.Conv1d's depthwise weight [C, 1, K]
        weight = weight[:, 0]
    if weight.dim() != 2 or weight.shape[0] != C or weight.shape[1] < 1:
        raise ValueError(f"weight must be [C, K] or [C, 1, K] with C = u.shape[-1] = {C}, got {tuple(weight.shape)}")
    if weight.device != u.device:
        raise ValueError(f"weight is on {weight.device}, u on {u.device}")
    if C % n_heads:
        raise ValueError(f"u's last dim ({C}) must be a multiple of n_heads ({n_heads})")
    shift = weight.shape[1] - 1 if left_context else 0
    if u.shape[1] < shift:
        raise ValueError(f"with left_context=True u needs at least K - 1 = {shift} rows, got {u.shape[1]}")
    return weight, eps, shift


def short_conv_normalize_torch(u: torch.Tensor, weight: torch.Tensor, n_heads: int, *, normalization: str = "unit",
                               eps: float = 1e-6, left_context: bool = False) -> torch.Tensor:
    """``L2norm_per_head(SiLU(causal depthwise conv(u)))`` with ``F.conv1d``; differentiable.

    Args:
        u: ``[B, T, C]`` float16 / bfloat16 / float32 / float64, ``C = H * Dh``.
        weight: ``[C, K]`` or nn.Conv1d's depthwise ``[C, 1, K]`` (tap ``K - 1`` multiplies the current step).
        n_heads: ``H``; the norm is over each head's ``Dh = C // H`` channels.
        normalization: ``"unit"`` or ``"fla"`` (:data:`NORMALIZATIONS`); eps its epsilon.
        left_context: u's first ``K - 1`` rows are the inputs before the first output (decoding);
            otherwise the steps before the first count as zeros.
    Returns:
        ``[B, T_out, H, Dh]``, float64 for float64 u and float32 otherwise (the convolution runs in u's
        dtype, the SiLU's result is cast before the norm); ``T_out = T - (K - 1)`` with ``left_context``.
    """
    weight, eps, shift = check_short_conv(u, weight, n_heads, normalization, eps, left_context)
    K = weight.shape[1]
    B, _, C = u.shape
    out_dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
    x = u if shift else F.pad(u, (0, 0, K - 1, 0))
    if x.shape[1] < K:                                       # no output step
        return u.new_zeros(B, 0, n_heads, C // n_heads, dtype=out_dtype)
    y = F.conv1d(x.transpose(1, 2), weight.to(u.dtype)[:, None], groups=C).transpose(1, 2)
    s = F.silu(y).to(out_dtype).reshape(B, y.shape[1], n_heads, C // n_heads)     # B = 0 too (no -1)
    if normalization == "fla":
        return s * torch.rsqrt(s.square().sum(-1, keepdim=True) + eps)
    return F.normalize(s, dim=-1, eps=eps)
