"""PaTH attention's backward pass for one head, written out as the kernel
chapter derives it: for reading and checking, not for speed.

    from path_lib.book.teaching_backward import path_attention_backward
    grads = path_attention_backward(q, k, v, w, beta, do)  # q, k, v, w [T, D]
    grads["w"], grads["beta"]                               # beta [T]

One head, the whole sequence as one block: ``T x T`` matrices and the UT
transform of all ``T`` tokens (``O(T^3)``). Each function is one step of the
chain rule, named after the equation it implements. The library never
imports this module; the chapter and ``tests/test_teaching_backward.py``
check it against autograd through :func:`path_lib.path_attention`.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

__all__ = ["ut_factors", "softmax_backward", "scores_backward",
           "ut_backward", "crossing_backward", "path_attention_backward"]

Tensor = torch.Tensor


def _check(name: str, x, dims: int, like: Optional[Tensor] = None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, "
                        f"got {type(x).__name__}")
    if x.dim() != dims or not x.is_floating_point():
        raise ValueError(f"{name} must be a {dims}-D floating tensor, "
                         f"got shape {tuple(x.shape)}, {x.dtype}")
    if like is not None and x.shape[0] != like.shape[0]:
        raise ValueError(f"{name} must have {like.shape[0]} rows "
                         f"(one per token), got {x.shape[0]}")


def ut_factors(w: Tensor, beta: Tensor) -> Tuple[Tensor, Tensor]:
    """``N = (I + A)^-1`` and the UT matrix ``T = N diag(beta)``, with
    ``A = strictLower(diag(beta) W W^T)``."""
    A = torch.tril(beta[:, None] * (w @ w.T), diagonal=-1)
    eye = torch.eye(len(w), dtype=w.dtype, device=w.device)
    N = torch.linalg.solve_triangular(eye + A, eye, upper=False)
    return N, N * beta[None, :]


def softmax_backward(p: Tensor, v: Tensor,
                     do: Tensor) -> Tuple[Tensor, Tensor]:
    """``(dZ, dV)`` from the probabilities ``p`` [T, T], values ``v`` and
    the output gradient ``do``: the softmax step of the chain rule."""
    o = p @ v
    delta = (do * o).sum(-1)            # Delta_i = do_i . o_i
    dp = do @ v.T
    dz = p * (dp - delta[:, None])
    return dz, p.T @ do


def ut_backward(d_ut: Tensor, w: Tensor, beta: Tensor,
                N: Tensor) -> Tuple[Tensor, Tensor]:
    """``(dW, dbeta)`` from the gradient ``d_ut`` of the UT matrix
    ``T = N diag(beta)``, through ``N = (I + A)^-1`` and ``A``."""
    d_ut = torch.tril(d_ut)             # T is lower triangular
    dbeta = (N * d_ut).sum(0)           # T = N diag(beta)
    dN = d_ut * beta[None, :]
    dA = -torch.tril(N.T @ dN @ N.T, diagonal=-1)
    E = beta[:, None] * dA              # A = strictLower(diag(beta) W W^T)
    dbeta = dbeta + (dA * (w @ w.T)).sum(1)
    return E @ w + E.T @ w, dbeta


def scores_backward(ds: Tensor, q: Tensor, k: Tensor, w: Tensor,
                    beta: Tensor) -> Tuple[Tensor, ...]:
    """``(dQ, dK, dW, dbeta)`` from the gradient ``ds`` of the unscaled
    scores ``S = tril(Q K^T) - X T Y``, ``X = tril(Q W^T)``,
    ``Y = strictLower(W K^T)``."""
    ds = torch.tril(ds)                 # S has no entries above the diagonal
    N, ut = ut_factors(w, beta)
    X = torch.tril(q @ w.T)
    Y = torch.tril(w @ k.T, diagonal=-1)
    dX = -torch.tril(ds @ (ut @ Y).T)
    dY = -torch.tril((X @ ut).T @ ds, diagonal=-1)
    d_ut = -X.T @ ds @ Y.T
    dq = ds @ k + dX @ w
    dk = ds.T @ q + dY.T @ w
    dw, dbeta = ut_backward(d_ut, w, beta, N)
    return dq, dk, dw + dX.T @ q + dY @ k, dbeta


def crossing_backward(dq_out: Tensor, q: Tensor, w: Tensor,
                      beta: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(dQ, dW, dbeta)`` of a block crossing ``Q' = Q - (Q W^T)(T W)``
    (queries ``q`` moved across the block ``w, beta``), from ``dQ'``."""
    N, ut = ut_factors(w, beta)
    C = ut @ w
    dq = dq_out - (dq_out @ C.T) @ w
    dC = -w @ q.T @ dq_out
    dw, dbeta = ut_backward(dC @ w.T, w, beta, N)
    return dq, dw - C @ dq_out.T @ q + ut.T @ dC, dbeta


def path_attention_backward(q: Tensor, k: Tensor, v: Tensor, w: Tensor,
                            beta: Tensor, do: Tensor,
                            g: Optional[Tensor] = None,
                            scale: Optional[float] = None
                            ) -> Dict[str, Tensor]:
    """Gradients of ``sum(do * o)`` for one head of causal PaTH attention
    (PaTH-FoX with log gates ``g``): q, k, w [T, D], v, do [T, Dv],
    beta, g [T]. Returns ``{"q", "k", "v", "w", "beta", "g", "o"}``
    (``"g"`` only with a gate; ``"o"`` is the recomputed output)."""
    for name, x, dims in (("q", q, 2), ("k", k, 2), ("v", v, 2),
                          ("w", w, 2), ("beta", beta, 1), ("do", do, 2)):
        _check(name, x, dims, like=q)
    if g is not None:
        _check("g", g, 1, like=q)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    _, ut = ut_factors(w, beta)
    S = (torch.tril(q @ k.T) - torch.tril(q @ w.T) @ ut
         @ torch.tril(w @ k.T, diagonal=-1))
    Z = scale * S
    if g is not None:
        G = torch.cumsum(g, 0)
        Z = Z + G[:, None] - G[None, :]
    causal = torch.ones_like(Z, dtype=torch.bool).tril()
    P = torch.softmax(Z.masked_fill(~causal, float("-inf")), dim=-1)
    dz, dv = softmax_backward(P, v, do)
    dq, dk, dw, dbeta = scores_backward(scale * dz, q, k, w, beta)
    grads = dict(q=dq, k=dk, v=dv, w=dw, beta=dbeta, o=P @ v)
    if g is not None:                   # rows of dz sum to 0: dG = -colsum
        grads["g"] = (-dz.sum(0)).flip(0).cumsum(0).flip(0)
    return grads
