"""The Triton kernels as one chunk of a longer sequence: a forward that also returns each query's
log-sum-exp, and a backward that starts from statistics merged with attention computed elsewhere.

Context parallelism (:mod:`path_lib.distributed`) splits a sequence into chunks. A chunk's queries attend
to its own keys (PaTH attention of the chunk alone: these kernels) and to the earlier chunks' keys
(computed apart). The two partial softmaxes combine through their log-sum-exps, ``lse = log(e^{lse_1} +
e^{lse_2})``, ``o = e^{lse_1 - lse} o_1 + e^{lse_2 - lse} o_2``. Their backward needs no gradient of the
log-sum-exp: with the *merged* output ``o``, log-sum-exp ``lse`` and ``delta = rowsum(do * o)``, the
gradient of every logit of either part is ``p (do . v - delta)`` with ``p = exp(s - lse)``, as in
FlashAttention's backward; the kernels' backward already computes exactly that from the ``o`` and ``lse``
it is given. So :func:`chunk_backward` runs the unchanged backward kernels with the merged statistics.

The kernels keep the log-sum-exp in base 2 (``exp2`` in the loops, the gate's reference folded back in
before it is stored); here it is converted to the natural log at the boundary. Nothing in the hashed
sources (``path_lib.kernels._SOURCES``) changes: the kernels that ran are the GPU-verified ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, cast

import torch

from path_lib.validation import check_tensor

from ._api import _pad_head_dim, _validate
from ._autograd import _retry_smaller
from ._backward import _backward_impl
from ._config import KernelConfig, kernel_config
from ._forward import Saved, _forward_impl
from ._precompute import _pad_time

__all__ = ["ChunkState", "chunk_forward", "chunk_backward", "chunk_unfit"]

_LN2 = math.log(2.0)


@dataclass
class ChunkState:
    """What :func:`chunk_backward` needs from :func:`chunk_forward`: the kernels' saved tensors (padded
    to whole blocks, head dim 32 padded to 64 on Hopper), the configuration that ran, the scale, the
    chunk's true length ``T`` and head dim ``D``, and whether a gate was given."""
    saved: Saved
    cfg: KernelConfig
    scale: float
    T: int
    D: int
    has_g: bool


def _pad_dim(x: torch.Tensor, D: int) -> torch.Tensor:
    return x if x.shape[-1] == D else torch.nn.functional.pad(x, (0, D - x.shape[-1]))


def chunk_forward(q, k, v, w, beta, G: Optional[torch.Tensor], scale: float):
    """PaTH attention of one chunk on its own, with its log-sum-exp.

    Args (the kernels' layout): q ``[B, T, Hq, D]``, k, v ``[B, T, Hk, D]`` (one dtype, ``D`` in 32/64/128,
    v's head dim equal to D); w ``[B, T, Hk, D]`` and beta ``[B, T, Hk]`` float32; G ``[B, T, Hq]`` float32,
    the chunk's own cumulative log gates, or None; scale a positive float. Shapes, dtypes and devices are
    checked (a named ``ValueError`` / ``TypeError``), values are not (no device sync).
    Returns ``(o [B, T, Hq, D] in q's dtype, lse [B, Hq, T] float32 natural log, ChunkState)``.
    """
    if G is not None:                                # (the kernels' own check would call it g)
        check_tensor(G, "G", ndim=3, dtypes=(torch.float32,), finite=False)
        check_tensor(q, "q", ndim=4, finite=False)
        if G.shape != q.shape[:3]:
            raise ValueError(f"G must have shape {tuple(q.shape[:3])} (like q's [B, T, Hq]), got {tuple(G.shape)}")
    scale = _validate(q, k, v, w, beta, G, scale, False)[-1]
    B, T, Hq, D = q.shape
    Dk = 64 if _pad_head_dim(q) else D               # head dim 32 runs as 64 on Hopper (see _pad_head_dim)
    q, k, v, w = (_pad_dim(x, Dk) for x in (q, k, v, w))
    cfg = kernel_config(q.device, q.dtype, Dk, T, False)
    Tp = cfg.n_blocks * cfg.block
    qp, kp, vp, wp, bp = (_pad_time(x, Tp) for x in (q, k, v, w.float(), beta.float()))
    Gp = None
    if G is not None:
        Gp = _pad_time(G.float(), Tp)
        if Tp > T:                                   # the padded tail keeps the last gate total (finite)
            Gp = Gp.clone()
            Gp[:, T:] = G[:, T - 1:T]
    (o, saved), cfg = _retry_smaller(qp, cfg, lambda c: _forward_impl(qp, kp, vp, wp, bp, Gp, scale, c))
    lse = saved.lse[:, :, :T] * _LN2
    return o[:, :T, :, :D], lse, ChunkState(saved, cfg, scale, T, D, G is not None)


def chunk_backward(state: ChunkState, o: torch.Tensor, lse: torch.Tensor, do: torch.Tensor):
    """Gradients of the chunk's own attention given the merged statistics.

    Args: ``o [B, T, Hq, D]`` the merged output (q's dtype), ``lse [B, Hq, T]`` the merged natural-log
    log-sum-exp (float32), ``do [B, T, Hq, D]`` the output's gradient. Returns ``(dq, dk, dv, dw, dbeta,
    dG)`` in the shapes of :func:`chunk_forward`'s inputs (dG None without a gate)."""
    if not isinstance(state, ChunkState):
        raise TypeError(f"state must be the ChunkState chunk_forward returned, got {type(state).__name__}")
    B, Hq = state.saved.q.shape[0], state.saved.q.shape[2]
    for name, x, shape in (("o", o, (B, state.T, Hq, state.D)), ("lse", lse, (B, Hq, state.T)),
                           ("do", do, (B, state.T, Hq, state.D))):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} (the chunk of chunk_forward), got {tuple(x.shape)}")
    saved = state.saved
    q, Tp, T, D = saved.q, saved.q.shape[1], state.T, state.D
    Dk = q.shape[-1]
    pad = lambda x: _pad_time(_pad_dim(x, Dk), Tp)   # noqa: E731
    lse2 = saved.lse.clone()
    lse2[:, :, :T] = lse.float() / _LN2              # the kernels' base-2 log-sum-exp; padded rows keep theirs
    merged = dict(o=pad(o.to(q.dtype)), lse=lse2)    # the merged statistics replace the chunk's own
    dop = pad(do.to(q.dtype))

    def attempt(c):
        cur = saved._replace(**merged)
        if (c.block, c.seg_blocks) != (state.cfg.block, state.cfg.seg_blocks):   # a smaller retry: new factors
            G = cast(torch.Tensor, saved.gate_cumsum).transpose(1, 2) if state.has_g else None   # saved with a gate
            fresh = _forward_impl(q, saved.k, saved.v, saved.w, saved.beta, G, state.scale, c)[1]
            cur = fresh._replace(**merged)
        return _backward_impl(cur, dop, state.scale, c, state.has_g)

    (dq, dk, dv, dw, db, dG), _ = _retry_smaller(q, state.cfg, attempt)
    cut = lambda x: None if x is None else x[:, :T, ..., :D] if x.dim() == 4 else x[:, :T]   # noqa: E731
    return cut(dq), cut(dk), cut(dv), cut(dw), db[:, :T], (dG[:, :T] if dG is not None else None)


def chunk_unfit(q: torch.Tensor, v: torch.Tensor) -> Optional[str]:
    """Why the kernels cannot run one chunk of ``q [B, T, Hq, D]``, ``v [B, T, Hk, Dv]`` (None if they can):
    the head dims, the dtype and the device they need, in words."""
    check_tensor(q, "q", ndim=4, finite=False)
    check_tensor(v, "v", ndim=4, finite=False)
    from . import HEAD_DIMS
    from ._api import _check_device
    from ._config import _QDTYPES
    D = q.shape[-1]
    if D not in HEAD_DIMS:
        return f"the kernels take head dims {HEAD_DIMS}, got D={D}"
    if v.shape[-1] != D:
        return f"the kernels need v's head dim equal to q's ({D}), got {v.shape[-1]}"
    if q.dtype not in _QDTYPES:
        return f"the kernels take float16, bfloat16 or float32 q, got {str(q.dtype).replace('torch.', '')}"
    try:
        _check_device(q)                             # the kernels' own rule for the device and its dtypes
    except (TypeError, ValueError) as e:
        return str(e)
    return None
