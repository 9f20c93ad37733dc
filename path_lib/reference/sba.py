"""Stick-breaking attention (SBA, Tan et al. 2024), a baseline of paper A's flip-flop table.

Instead of a softmax, each query breaks a stick of length 1 from the most recent key backwards:
with ``z_ij = scale * q_i^T k_j`` and ``beta_ij = sigmoid(z_ij)``,

    A_ij = beta_ij * prod_{j < k < i} (1 - beta_ik)            for j < i   (attend_current=False)
    A_ij = beta_ij * prod_{j < k <= i} (1 - beta_ik)           for j <= i  (attend_current=True)
    o_i  = sum_j A_ij v_j

The nearer keys claim their share first, so recency is built in and no position encoding is used.
The weights of a query sum to at most 1; the remainder ``1 - sum_j A_ij`` is simply not attended
(query 0 with ``attend_current=False`` has no key and outputs 0). Computed in log space,

    log A_ij = logsigmoid(z_ij) + sum_{j < k (<=) i} logsigmoid(-z_ik),

with an exclusive suffix sum (no subtraction, so no cancellation). Public layout as everywhere:
q ``[B, T, Hq, D]``; k, v ``[B, T, Hk, D]`` (grouped-query heads, ``Hq % Hk == 0``); float64 in, float64
out (exact checks), otherwise computed in float32. Memory is O(T^2) per head: a reference, and the
layer of the small synthetic experiments, not a kernel.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..validation import check_bool, check_qkv, check_scale, check_tensor

__all__ = ["stick_breaking_weights", "sba_weights", "sba_attention"]


def _dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def stick_breaking_weights(z: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Stick-breaking weights along the last dim of ``z`` (keys in increasing position; the stick is
    broken from the LAST valid entry backwards).

    Args:
        z: logits ``[..., S]``.
        valid: bool ``[..., S]`` (broadcastable) marking the keys that take part; default all.
    Returns:
        ``A [..., S]`` with ``A_j = sigmoid(z_j) prod_{k > j, valid} (1 - sigmoid(z_k))`` on valid
        entries and 0 elsewhere.
    """
    check_tensor(z, "z", finite=False)
    if z.dim() == 0:
        raise ValueError("z must have a last dimension (the keys), got a 0-d tensor")
    if valid is not None:
        check_tensor(valid, "valid", dtypes=(torch.bool,), finite=False)
        try:
            fits = torch.broadcast_shapes(valid.shape, z.shape) == z.shape
        except RuntimeError:
            fits = False
        if not fits or valid.device != z.device:
            raise ValueError(f"valid must broadcast to z's shape {tuple(z.shape)} on its device, got "
                             f"{tuple(valid.shape)} on {valid.device}")
    log_b = F.logsigmoid(z)
    log_keep = F.logsigmoid(-z)
    if valid is not None:
        log_keep = log_keep.masked_fill(~valid, 0.0)
    incl = log_keep.flip(-1).cumsum(-1).flip(-1)                 # sum over k >= j
    excl = torch.cat([incl[..., 1:], torch.zeros_like(incl[..., :1])], dim=-1)   # sum over k > j
    log_a = log_b + excl
    if valid is not None:
        log_a = log_a.masked_fill(~valid, float("-inf"))
    return log_a.exp()


def _heads(q, k, v, finite: bool = True):
    B, T, Hq, Hk, D = check_qkv(q, k, v, finite=finite)
    dt = _dtype(q)
    rep = Hq // Hk
    qh = q.to(dt).transpose(1, 2)
    kh = k.to(dt).transpose(1, 2).repeat_interleave(rep, 1)
    vh = v.to(dt).transpose(1, 2).repeat_interleave(rep, 1)
    return qh, kh, vh, D


def sba_weights(q, k, *, scale=None, attend_current: bool = False, check_values: bool = True) -> torch.Tensor:
    """The stick-breaking attention matrix ``A [B, Hq, T, T]`` (zero where a query does not attend).

    q ``[B, T, Hq, D]``, k ``[B, T, Hk, D]``. Row ``i`` sums to at most 1. ``check_values=False`` skips
    the finiteness check (a device sync).
    """
    check_bool(check_values, "check_values")
    check_bool(attend_current, "attend_current")
    qh, kh, _, D = _heads(q, k, k, finite=check_values)
    scale = check_scale(scale, D)
    T = qh.shape[2]
    z = scale * qh @ kh.transpose(-1, -2)
    valid = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(0 if attend_current else -1)
    return stick_breaking_weights(z, valid)


def sba_attention(q, k, v, *, scale=None, attend_current: bool = False,
                  return_remainder: bool = False, check_values: bool = True):
    """Causal stick-breaking attention.

    Args:
        q: ``[B, T, Hq, D]``; k, v: ``[B, T, Hk, D]``.
        scale: logit scale (default ``D ** -0.5``).
        attend_current: let query ``i`` attend to key ``i`` too (the stick then starts there).
        return_remainder: also return ``1 - sum_j A_ij`` ``[B, T, Hq]``.
        check_values: also check that q, k, v are finite (a device sync); shapes and dtypes always.
    Returns:
        ``o [B, T, Hq, D]`` in q's dtype (and the remainder).
    """
    check_tensor(q, "q", ndim=4, finite=False)
    check_bool(return_remainder, "return_remainder")
    A = sba_weights(q, k, scale=scale, attend_current=attend_current, check_values=check_values)
    _, _, vh, _ = _heads(q, k, v, finite=check_values)
    o = (A @ vh).transpose(1, 2).to(q.dtype)
    if return_remainder:
        return o, (1 - A.sum(-1)).transpose(1, 2).to(q.dtype)
    return o
