"""Householder-like matrices, their products, and the UT transform (compact WY form).

Notation (PATH_NOTES sections 2-4): a block of ``L`` tokens stacks its unit directions as the rows of
``W`` (``[..., L, D]``) and its strengths in ``beta`` (``[..., L]``). Each token's transform is

    H_t = I - beta_t w_t w_t^T,

and the block's accumulated product, later tokens on the left, is

    H_{L-1} ... H_1 H_0 = I - W^T T W,     T = (I + strictLower(diag(beta) W W^T))^{-1} diag(beta).

Everything here works on any leading batch dimensions and is differentiable.
"""
from __future__ import annotations

import torch

from ._checks import check_tensor

__all__ = [
    "normalize", "householder", "householder_product", "ut_transform", "ut_transform_loop",
    "block_product", "boundary_adjusted_queries", "boundary_adjusted_keys",
]


def normalize(w: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """L2-normalise ``w`` along its last dimension (shape kept)."""
    return w / w.norm(dim=-1, keepdim=True).clamp_min(eps)


def _check_w_beta(w: torch.Tensor, beta: torch.Tensor):
    check_tensor(w, "w")
    check_tensor(beta, "beta")
    if w.dim() < 1:
        raise ValueError("w must have at least one dimension (the vector dimension D)")
    if tuple(beta.shape) != tuple(w.shape[:-1]):
        raise ValueError(f"beta must have shape {tuple(w.shape[:-1])} (w's shape without D), "
                         f"got {tuple(beta.shape)}")


def householder(w: torch.Tensor, beta) -> torch.Tensor:
    """The ``D x D`` matrix ``I - beta w w^T``.

    Args:
        w: ``[..., D]`` direction (not normalised here: pass a unit vector for the textbook case).
        beta: ``[...]`` strength (a float or a tensor broadcastable to ``w.shape[:-1]``).
    Returns:
        ``[..., D, D]``.
    """
    check_tensor(w, "w")
    beta = torch.as_tensor(beta, dtype=w.dtype, device=w.device)
    D = w.shape[-1]
    eye = torch.eye(D, dtype=w.dtype, device=w.device)
    return eye - beta[..., None, None] * (w[..., :, None] * w[..., None, :])   # exactly symmetric


def householder_product(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The explicit product ``H_{L-1} ... H_1 H_0`` (later rows of ``W`` on the left).

    Args:
        W: ``[..., L, D]`` one direction per row.
        beta: ``[..., L]``.
    Returns:
        ``[..., D, D]``; the identity when ``L == 0``.
    """
    _check_w_beta(W, beta)
    D = W.shape[-1]
    P = torch.eye(D, dtype=W.dtype, device=W.device).expand(*W.shape[:-2], D, D)
    for t in range(W.shape[-2]):
        P = householder(W[..., t, :], beta[..., t]) @ P
    return P


def ut_transform(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The UT-transform matrix ``T`` with ``I - W^T T W = H_{L-1} ... H_0``.

    ``T = (I + A)^{-1} diag(beta)`` with ``A = strictLower(diag(beta) W W^T)``; ``T`` is lower
    triangular. Solved by a triangular solve (forward substitution).

    Args:
        W: ``[..., L, D]``.
        beta: ``[..., L]``.
    Returns:
        ``[..., L, L]``.
    """
    _check_w_beta(W, beta)
    L = W.shape[-2]
    eye = torch.eye(L, dtype=W.dtype, device=W.device)
    A = torch.tril(beta[..., :, None] * (W @ W.transpose(-1, -2)), diagonal=-1)
    return torch.linalg.solve_triangular(eye + A, torch.diag_embed(beta), upper=False)


def ut_transform_loop(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Row-by-row forward substitution for ``T`` (what a kernel does); same result as :func:`ut_transform`.

    Row ``r`` of ``(I + A) T = diag(beta)`` reads ``T_r = beta_r e_r - sum_{s<r} A_rs T_s``.
    """
    _check_w_beta(W, beta)
    L = W.shape[-2]
    A = torch.tril(beta[..., :, None] * (W @ W.transpose(-1, -2)), diagonal=-1)
    eye = torch.eye(L, dtype=W.dtype, device=W.device)
    rows = []
    for r in range(L):
        row = beta[..., r, None] * eye[r]
        for s in range(r):
            row = row - A[..., r, s, None] * rows[s]
        rows.append(row)
    if not rows:
        return torch.zeros(*W.shape[:-2], 0, 0, dtype=W.dtype, device=W.device)
    return torch.stack(rows, dim=-2)


def block_product(W: torch.Tensor, beta: torch.Tensor, T: torch.Tensor | None = None) -> torch.Tensor:
    """The block's whole product ``P = I - W^T T W`` as a ``[..., D, D]`` matrix (for teaching and prefill)."""
    if T is None:
        T = ut_transform(W, beta)
    D = W.shape[-1]
    eye = torch.eye(D, dtype=W.dtype, device=W.device)
    return eye - W.transpose(-1, -2) @ T @ W


def boundary_adjusted_queries(Q: torch.Tensor, W: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Queries moved to the block's start: row ``r`` becomes ``q_r^T H_r ... H_0``.

    ``Q<- = Q - tril(Q W^T) T W``.  Shapes: Q ``[..., L, D]``, W ``[..., L, D]``, T ``[..., L, L]``.
    """
    return Q - torch.tril(Q @ W.transpose(-1, -2)) @ T @ W


def boundary_adjusted_keys(K: torch.Tensor, W: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Keys moved to the block's end: row ``r`` becomes ``(H_{L-1} ... H_{r+1} k_r)^T``.

    ``K-> = K - (T strictLower(W K^T))^T W``.  Shapes: K ``[..., L, D]``, W ``[..., L, D]``, T ``[..., L, L]``.
    """
    return K - (T @ torch.tril(W @ K.transpose(-1, -2), diagonal=-1)).transpose(-1, -2) @ W
