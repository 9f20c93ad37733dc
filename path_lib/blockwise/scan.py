"""Chapter 6's blockwise scan, in plain PyTorch, without the kernels' segments.

``path_attention(..., impl="blockwise_scan")`` (:mod:`path_lib.impl`) runs it: per key
block ``j`` of ``L = block_size`` tokens its UT matrix ``T_j``
(:func:`path_lib.reference.householder.ut_transform`) and its keys moved to the block's end; per query
block the diagonal block by the intra-block all-pairs form, then a right-to-left scan over *every*
earlier key block with an online softmax, the queries moved one block further left at each step
(``Q <- Q (I - W_j^T T_j W_j)``). It never forms the ``T x T`` logits that the references build.
``path_lib.theory.costs.path_blockwise_cost`` counts its operations exactly (tested with a flop counter).

The kernels add segments to this scan (:mod:`path_lib.blockwise.mirror` mirrors them). Entry point for
users: :func:`path_lib.impl.path_attention` with ``impl="blockwise_scan"``, which checks
the arguments and calls :func:`blockwise_scan` here.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..reference.householder import _boundary_adjusted_keys, _boundary_adjusted_queries, _ut_transform

__all__ = ["blockwise_scan"]


def _causal_mask(T: int, device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def blockwise_scan(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, wh: torch.Tensor, bh: torch.Tensor,
                   G: Optional[torch.Tensor], scale: float, block_size: int) -> torch.Tensor:
    """Chapter 6's scan in PyTorch, on heads-first inputs that the caller has already checked.

    Args:
        qh, kh, wh: ``[B, H, T, D]`` (key heads already repeated to the query heads); vh ``[B, H, T, Dv]``.
        bh: ``[B, H, T]`` strengths; G: ``[B, H, T]`` cumulative log gates (``cumsum(g)``) or None.
        scale: logit scale; block_size: block length ``L``.
    Returns:
        ``[B, H, T, Dv]`` in the inputs' dtype.

    Steps:

    1. per key block j: its UT matrix T_j and keys moved to the block's end, K->_j;
    2. per query block i: the diagonal block by the intra-block all-pairs form, then queries moved to
       the block's start, Q~ = Q<-_i, and a right-to-left scan over key blocks j = i-1, ..., 0:
       logits Q~ K->_j^T, an online-softmax update, and Q~ <- Q~ (I - W_j^T T_j W_j).
    """
    B, H, T, D = qh.shape
    if T == 0:
        return vh.clone()                                   # [B, H, 0, Dv]
    starts = list(range(0, T, block_size))
    spans = [(s, min(s + block_size, T)) for s in starts]
    Ts = [_ut_transform(wh[:, :, s:e], bh[:, :, s:e]) for s, e in spans]
    K_end = [_boundary_adjusted_keys(kh[:, :, s:e], wh[:, :, s:e], Tj) for (s, e), Tj in zip(spans, Ts)]
    TW = [Tj @ wh[:, :, s:e] for (s, e), Tj in zip(spans, Ts)]  # T_j W_j, [B, H, L, D]

    outs = []
    for i, (s, e) in enumerate(spans):
        Qi, Ki, Wi = qh[:, :, s:e], kh[:, :, s:e], wh[:, :, s:e]
        # diagonal block: all pairs inside the block
        S = torch.tril(Qi @ Ki.transpose(-1, -2)) - torch.tril(Qi @ Wi.transpose(-1, -2)) @ Ts[i] @ \
            torch.tril(Wi @ Ki.transpose(-1, -2), diagonal=-1)
        logits = scale * S
        if G is not None:
            logits = logits + G[:, :, s:e, None] - G[:, :, None, s:e]
        logits = logits.masked_fill(~_causal_mask(e - s, qh.device), float("-inf"))
        m = logits.amax(dim=-1)
        p = torch.exp(logits - m[..., None])
        l = p.sum(dim=-1)
        acc = p @ vh[:, :, s:e]
        # off-diagonal blocks, right to left
        Q_tilde = _boundary_adjusted_queries(Qi, Wi, Ts[i])
        for j in range(i - 1, -1, -1):
            sj, ej = spans[j]
            logits = scale * (Q_tilde @ K_end[j].transpose(-1, -2))
            if G is not None:
                logits = logits + G[:, :, s:e, None] - G[:, :, None, sj:ej]
            m_new = torch.maximum(m, logits.amax(dim=-1))
            alpha = torch.exp(m - m_new)
            p = torch.exp(logits - m_new[..., None])
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ vh[:, :, sj:ej]
            m = m_new
            Q_tilde = Q_tilde - (Q_tilde @ wh[:, :, sj:ej].transpose(-1, -2)) @ TW[j]
        outs.append(acc / l[..., None])
    return torch.cat(outs, dim=2)
