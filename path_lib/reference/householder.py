"""Householder-like matrices, their products, and the UT transform (compact WY form).

Notation (paper A's): a block of ``L`` tokens stacks its unit directions as the rows of
``W`` (``[..., L, D]``) and its strengths in ``beta`` (``[..., L]``). Each token's transform is

    H_t = I - beta_t w_t w_t^T,

and the block's accumulated product, later tokens on the left, is

    H_{L-1} ... H_1 H_0 = I - W^T T W,     T = (I + strictLower(diag(beta) W W^T))^{-1} diag(beta).

Everything here works on any leading batch dimensions and is differentiable.
"""
from __future__ import annotations

import torch

from ..validation import check_same_device, check_tensor, check_number

__all__ = [
    "normalize", "householder", "householder_product", "ut_transform", "ut_transform_loop",
    "block_product", "boundary_adjusted_queries", "boundary_adjusted_keys",
]

# These are the general, "Householder-like" identities: w need not be a unit vector and beta may be any
# finite number (the book uses beta = 3 as the inverse of beta = 1.5, and rounded, non-unit directions).
# Inputs are checked for type, device, shape and finiteness; the attention entry points add the PaTH
# conditions (unit w, beta in [0, 2]). Blocks of several rows (W ``[..., L, D]``) compute in W's dtype,
# except that float16/bfloat16 blocks run the triangular solve in float32 (returned in W's dtype).


def normalize(w: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """L2-normalise ``w`` along its last dimension (shape kept)."""
    check_tensor(w, "w", finite=False)
    if w.dim() < 1:
        raise ValueError("w must have at least one dimension (the vector dimension D)")
    eps = check_number(eps, "eps", positive=True)
    if w.dtype in (torch.float16, torch.bfloat16):   # eps = 1e-12 is 0 in float16: a zero row gave NaN
        return (w.float() / w.float().norm(dim=-1, keepdim=True).clamp_min(eps)).to(w.dtype)
    return w / w.norm(dim=-1, keepdim=True).clamp_min(eps)


def _check_block(W, beta, name: str = "W"):
    """W ``[..., L, D]`` (a float tensor, at least 2-D) and beta ``[..., L]`` (float, same device).

    Returns beta in W's dtype."""
    check_tensor(W, name)
    if W.dim() < 2:
        raise ValueError(f"{name} must have shape [..., L, D] (one direction per row, at least 2 dimensions), "
                         f"got shape {tuple(W.shape)}")
    check_tensor(beta, "beta", finite=False)
    check_same_device(beta, "beta", W, name)
    if tuple(beta.shape) != tuple(W.shape[:-1]):
        raise ValueError(f"beta must have shape {tuple(W.shape[:-1])} ({name}'s shape without D), "
                         f"got {tuple(beta.shape)}")
    check_tensor(beta, "beta")
    return beta.to(W.dtype)


def _check_matrix(x, name: str, shape, like: torch.Tensor, like_name: str = "W"):
    check_tensor(x, name, finite=False)
    check_same_device(x, name, like, like_name)
    if x.dtype != like.dtype:
        raise TypeError(f"{name} must have {like_name}'s dtype {like.dtype}, got {x.dtype}")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} to match {like_name} {tuple(like.shape)}, "
                         f"got {tuple(x.shape)}")
    check_tensor(x, name)
    return x


def householder(w: torch.Tensor, beta) -> torch.Tensor:
    """The ``D x D`` matrix ``I - beta w w^T``.

    Args:
        w: ``[..., D]`` direction (not normalised here: pass a unit vector for the textbook case).
        beta: ``[...]`` strength (a float or a float tensor broadcastable to ``w.shape[:-1]``).
    Returns:
        ``[..., D, D]`` in w's dtype.
    """
    check_tensor(w, "w")
    if w.dim() < 1:
        raise ValueError("w must have at least one dimension (the vector dimension D)")
    if isinstance(beta, torch.Tensor):
        check_tensor(beta, "beta", finite=False)
        if beta.dim() == 0 and beta.device.type == "cpu":
            beta = beta.to(w.device)                   # a scalar goes where w is (as torch's ops allow)
        check_same_device(beta, "beta", w, "w")
        try:
            shape = torch.broadcast_shapes(tuple(beta.shape), tuple(w.shape[:-1]))
        except RuntimeError:
            shape = None
        if shape != tuple(w.shape[:-1]):
            raise ValueError(f"beta must broadcast to w's shape without D, {tuple(w.shape[:-1])}, "
                             f"got {tuple(beta.shape)}")
        check_tensor(beta, "beta")
        beta = beta.to(w.dtype)
    else:
        beta = torch.tensor(check_number(beta, "beta"), dtype=w.dtype, device=w.device)
    return _householder(w, beta)


def _householder(w, beta):
    D = w.shape[-1]
    eye = torch.eye(D, dtype=w.dtype, device=w.device)
    return eye - beta[..., None, None] * (w[..., :, None] * w[..., None, :])   # exactly symmetric


def householder_product(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The explicit product ``H_{L-1} ⋯ H_1 H_0`` (later rows of ``W`` on the left).

    Args:
        W: ``[..., L, D]`` one direction per row.
        beta: ``[..., L]``.
    Returns:
        ``[..., D, D]``; the identity when ``L == 0``.
    """
    beta = _check_block(W, beta)
    D = W.shape[-1]
    P = torch.eye(D, dtype=W.dtype, device=W.device).expand(*W.shape[:-2], D, D)
    for t in range(W.shape[-2]):
        P = _householder(W[..., t, :], beta[..., t]) @ P
    return P


def ut_transform(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """The UT-transform matrix ``T`` with ``I - W^T T W = H_{L-1} ⋯ H_0``.

    ``T = (I + A)^{-1} diag(beta)`` with ``A = strictLower(diag(beta) W W^T)``; ``T`` is lower
    triangular. Solved by a triangular solve (forward substitution).

    Args:
        W: ``[..., L, D]``.
        beta: ``[..., L]``.
    Returns:
        ``[..., L, L]`` in W's dtype.
    """
    beta = _check_block(W, beta)
    return _ut_transform(W, beta)


def _ut_transform(W, beta):
    """:func:`ut_transform` without the checks (for callers that have checked their inputs)."""
    out_dtype = W.dtype
    if W.dtype in (torch.float16, torch.bfloat16):   # no half triangular solve: solve in float32
        W, beta = W.float(), beta.float()
    L = W.shape[-2]
    eye = torch.eye(L, dtype=W.dtype, device=W.device)
    A = torch.tril(beta[..., :, None] * (W @ W.transpose(-1, -2)), diagonal=-1)
    return torch.linalg.solve_triangular(eye + A, torch.diag_embed(beta), upper=False).to(out_dtype)


def ut_transform_loop(W: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """Row-by-row forward substitution for ``T`` (what a kernel does); same result as :func:`ut_transform`.

    Row ``r`` of ``(I + A) T = diag(beta)`` reads ``T_r = beta_r e_r - sum_{s<r} A_rs T_s``.
    """
    beta = _check_block(W, beta)
    L = W.shape[-2]
    A = torch.tril(beta[..., :, None] * (W @ W.transpose(-1, -2)), diagonal=-1)
    eye = torch.eye(L, dtype=W.dtype, device=W.device)
    rows: list[torch.Tensor] = []
    for r in range(L):
        row = beta[..., r, None] * eye[r]
        for s in range(r):
            row = row - A[..., r, s, None] * rows[s]
        rows.append(row)
    if not rows:
        return torch.zeros(*W.shape[:-2], 0, 0, dtype=W.dtype, device=W.device)
    return torch.stack(rows, dim=-2)


def block_product(W: torch.Tensor, beta: torch.Tensor, T: torch.Tensor | None = None) -> torch.Tensor:
    """The block's whole product ``P = I - W^T T W`` as a ``[..., D, D]`` matrix (for teaching and prefill).

    ``T`` (``[..., L, L]``, W's dtype) is the block's UT matrix; computed from ``W, beta`` when None.
    """
    beta = _check_block(W, beta)
    if T is not None:
        _check_matrix(T, "T", (*W.shape[:-1], W.shape[-2]), W)
    return _block_product(W, beta, T)


def _block_product(W, beta, T=None):
    if T is None:
        T = _ut_transform(W, beta)
    D = W.shape[-1]
    eye = torch.eye(D, dtype=W.dtype, device=W.device)
    return eye - W.transpose(-1, -2) @ T @ W


def _check_boundary(X, W, T, name: str):
    check_tensor(W, "W")
    if W.dim() < 2:
        raise ValueError(f"W must have shape [..., L, D] (at least 2 dimensions), got shape {tuple(W.shape)}")
    _check_matrix(X, name, W.shape, W)
    _check_matrix(T, "T", (*W.shape[:-1], W.shape[-2]), W)


def boundary_adjusted_queries(Q: torch.Tensor, W: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Queries moved to the block's start: row ``r`` becomes ``q_r^T H_r ... H_0``.

    ``Q<- = Q - tril(Q W^T) T W``.  Shapes: Q ``[..., L, D]``, W ``[..., L, D]``, T ``[..., L, L]``
    (one dtype, one device, the same leading dimensions).
    """
    _check_boundary(Q, W, T, "Q")
    return _boundary_adjusted_queries(Q, W, T)


def _boundary_adjusted_queries(Q, W, T):
    return Q - torch.tril(Q @ W.transpose(-1, -2)) @ T @ W


def boundary_adjusted_keys(K: torch.Tensor, W: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Keys moved to the block's end: row ``r`` becomes ``(H_{L-1} ... H_{r+1} k_r)^T``.

    ``K-> = K - (T strictLower(W K^T))^T W``.  Shapes: K ``[..., L, D]``, W ``[..., L, D]``, T ``[..., L, L]``
    (one dtype, one device, the same leading dimensions).
    """
    _check_boundary(K, W, T, "K")
    return _boundary_adjusted_keys(K, W, T)


def _boundary_adjusted_keys(K, W, T):
    return K - (T @ torch.tril(W @ K.transpose(-1, -2), diagonal=-1)).transpose(-1, -2) @ W
