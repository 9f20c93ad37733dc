"""A minimal Triton forward kernel for PaTH attention, written to be read (chapter 7 of the book).

    from path_lib.kernels.teaching import teaching_path_attention
    o = teaching_path_attention(q, k, v, w, beta)          # q, k, v, w [B, T, H, D], beta [B, T, H]

It is the blockwise algorithm of chapter 6 with nothing added: no segments, no gate, no grouped-query
heads, no backward. Two phases:

1. :func:`block_factors`, **plain PyTorch** in float32 (the production kernels do this in Triton too):
   per block j of ``BT`` tokens its UT matrix ``T_j``, the product ``T_j W_j``, the keys moved to the
   block's end ``K->_j`` and the queries moved to the block's start ``Q<-_j``
   (``path_lib.reference.householder``'s helpers).
2. ``_teaching_fwd_kernel``, **Triton**: one program per (query block, batch * head). The diagonal
   tile by the intra-block UT form, then a right-to-left loop over the earlier key blocks with an
   online softmax and the query update ``Q~ <- Q~ - (Q~ W_j^T)(T W)_j``. Every tile is converted to
   float32 when loaded and every accumulator is float32.

Forward only: calling it on inputs that require a gradient (with grad mode on) raises a
``ValueError``; use ``path_lib.kernels.path_attention`` for training. Runs on a CUDA GPU, or on the CPU under
``TRITON_INTERPRET=1`` (set before triton is first imported) in float32.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from path_lib.validation import check_path_params, check_qkv, check_scale, check_tensor
from path_lib.reference.householder import boundary_adjusted_keys, boundary_adjusted_queries, ut_transform

__all__ = ["teaching_path_attention", "block_factors"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ----------------------------------------------------------------------------------------------
# phase 1, per block, in PyTorch
# ----------------------------------------------------------------------------------------------

def block_factors(q, k, w, beta, block_size: int):
    """Per-block factors of the blockwise algorithm, heads first, float32 (plain PyTorch).

    Args:
        q, k, w: ``[B, T, H, D]``; beta: ``[B, T, H]``; block_size: ``BT``.
    Returns:
        ``(Tm, TW, K_end, Q_start)``: ``Tm`` ``[B*H, NB, BT, BT]`` the UT matrix of each block;
        ``TW`` = ``T_j W_j``, ``K_end`` = keys moved to their block's end (``K->``) and ``Q_start`` =
        queries moved to their block's start (``Q<-``), each ``[B*H, T, D]``. ``NB = ceil(T / BT)``;
        the last block is padded with identity transforms (``w = 0``, ``beta = 0``) for the solve.
    """
    B, T, H, D = q.shape
    BT = block_size
    NB = -(-T // BT)

    def blocks(x):  # [B, T, H, ...] -> [B*H, NB, BT, ...] float32, zero-padded at the end
        x = x.float().transpose(1, 2).reshape(B * H, T, *x.shape[3:])
        pad = torch.zeros(B * H, NB * BT - T, *x.shape[2:], dtype=x.dtype, device=x.device)
        return torch.cat([x, pad], dim=1).reshape(B * H, NB, BT, *x.shape[2:])

    Qb, Kb, Wb, bb = blocks(q), blocks(k), blocks(w), blocks(beta)
    Tm = ut_transform(Wb, bb)                                  # [B*H, NB, BT, BT]
    unblock = lambda x: x.reshape(B * H, NB * BT, D)[:, :T].contiguous()  # noqa: E731
    TW = unblock(Tm @ Wb)
    K_end = unblock(boundary_adjusted_keys(Kb, Wb, Tm))
    Q_start = unblock(boundary_adjusted_queries(Qb, Wb, Tm))
    return Tm.contiguous(), TW, K_end, Q_start


# ----------------------------------------------------------------------------------------------
# phase 2, per query block, in Triton
# ----------------------------------------------------------------------------------------------

@triton.jit
def _rows(ptr, bh, t0, T, D: tl.constexpr, BT: tl.constexpr):
    """Load rows ``t0 : t0 + BT`` of sequence ``bh`` of a ``[B*H, T, D]`` tensor as float32 (rows past T: 0)."""
    r = t0 + tl.arange(0, BT)
    ptrs = ptr + bh.to(tl.int64) * T * D + r[:, None] * D + tl.arange(0, D)[None, :]
    return tl.load(ptrs, mask=(r < T)[:, None], other=0.0).to(tl.float32)


@triton.jit
def _teaching_fwd_kernel(Q, K, V, W, TM, TW, KE, QS, O, scale, T, NB,
                         D: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    """Outputs of query block ``i`` of sequence ``bh`` (one batch entry and head). Q, K, V, W, the
    factors TW (``T W``), KE (``K->``), QS (``Q<-``) and the output O: ``[B*H, T, D]``; TM: ``[B*H, NB,
    BT, BT]`` float32. ``PREC``: the precision of every ``tl.dot`` (``"ieee"``: exact float32)."""
    i = tl.program_id(0)                     # query block
    bh = tl.program_id(1)                    # batch * head
    r = tl.arange(0, BT)
    causal = r[:, None] >= r[None, :]
    # 1. diagonal tile, intra-block UT form: S = tril(Q K^T) - tril(Q W^T) T strictLower(W K^T)
    q, k = _rows(Q, bh, i * BT, T, D, BT), _rows(K, bh, i * BT, T, D, BT)
    w, v = _rows(W, bh, i * BT, T, D, BT), _rows(V, bh, i * BT, T, D, BT)
    tm = tl.load(TM + (bh.to(tl.int64) * NB + i) * BT * BT + r[:, None] * BT + r[None, :])
    qw = tl.where(causal, tl.dot(q, tl.trans(w), input_precision=PREC), 0.0)
    wk = tl.where(r[:, None] > r[None, :], tl.dot(w, tl.trans(k), input_precision=PREC), 0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) \
        - tl.dot(tl.dot(qw, tm, input_precision=PREC), wk, input_precision=PREC)
    s = tl.where(causal, s * scale, float("-inf"))
    m = tl.max(s, 1)                                          # running max
    p = tl.exp(s - m[:, None])
    l = tl.sum(p, 1)                                          # running sum
    acc = tl.dot(p, v, input_precision=PREC)                  # running output, not yet divided by l
    # 2. earlier key blocks j = i-1, ..., 0, right to left, with queries moved to the block's start
    qs = _rows(QS, bh, i * BT, T, D, BT)
    for n in range(0, i):
        j = i - 1 - n
        ke, vj = _rows(KE, bh, j * BT, T, D, BT), _rows(V, bh, j * BT, T, D, BT)
        s = tl.dot(qs, tl.trans(ke), input_precision=PREC) * scale          # logits against K->_j
        m_new = tl.maximum(m, tl.max(s, 1))                                  # online softmax
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, vj, input_precision=PREC)
        m = m_new
        wj, twj = _rows(W, bh, j * BT, T, D, BT), _rows(TW, bh, j * BT, T, D, BT)
        qs = qs - tl.dot(tl.dot(qs, tl.trans(wj), input_precision=PREC), twj, input_precision=PREC)
    # 3. normalise and store the rows of this block that exist
    rows = i * BT + r
    ptrs = O + bh.to(tl.int64) * T * D + rows[:, None] * D + tl.arange(0, D)[None, :]
    tl.store(ptrs, (acc / l[:, None]).to(O.dtype.element_ty), mask=(rows < T)[:, None])


# ----------------------------------------------------------------------------------------------
# the public function
# ----------------------------------------------------------------------------------------------

def _power_of_two_at_least_16(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 16 and (x & (x - 1)) == 0


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _validate(q, k, v, w, beta, scale, block_size):
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(x, name, ndim=4, dtypes=_DTYPES)
    B, T, Hq, Hk, D = check_qkv(q, k, v)
    if Hq != Hk:
        raise ValueError(f"the teaching kernel needs as many q heads as k heads, got {Hq} and {Hk} "
                         "(path_lib.kernels.path_attention supports grouped-query heads)")
    if tuple(v.shape) != tuple(q.shape):
        raise ValueError(f"v must have shape {tuple(q.shape)} like q (Dv == D), got {tuple(v.shape)}")
    if T < 1:
        raise ValueError(f"q must have a positive time length T, got {T}")
    if not _power_of_two_at_least_16(D):
        raise ValueError(f"the head dim D must be a power of two >= 16, got {D}")
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if not _power_of_two_at_least_16(block_size):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size}")
    check_path_params(q, k, w, beta, param_dtypes=(torch.float32,))  # shapes, dtypes, beta in [0, 2], unit w
    scale = check_scale(scale, D)
    needs_grad = [n for n, x in zip(("q", "k", "v", "w", "beta"), (q, k, v, w, beta)) if x.requires_grad]
    if torch.is_grad_enabled() and needs_grad:
        raise ValueError(f"{', '.join(needs_grad)} require(s) grad, but teaching_path_attention is forward "
                         "only (it has no backward): call it under torch.no_grad(), or use "
                         "path_lib.kernels.path_attention, which has one")
    if q.device.type == "cuda":
        return B, T, Hq, D, scale
    if q.device.type == "cpu" and _interpret():
        if q.dtype != torch.float32:
            raise TypeError("on the CPU (TRITON_INTERPRET=1) the teaching kernel runs in float32 only, "
                            f"got q in {str(q.dtype).replace('torch.', '')}")
        return B, T, Hq, D, scale
    raise ValueError(f"the teaching kernel needs CUDA tensors (or TRITON_INTERPRET=1 on the CPU), got q on {q.device}")


def teaching_path_attention(q, k, v, w, beta, *, scale=None, block_size: int = 16) -> torch.Tensor:
    """Causal PaTH attention, forward only, with the teaching kernel (no gate, no grouped-query heads).

    Args:
        q, k, v: ``[B, T, H, D]``, one dtype (float16, bfloat16 or float32; float32 on the CPU);
            ``D`` a power of two >= 16, ``T`` any positive length.
        w: ``[B, T, H, D]`` float32 unit rows.  beta: ``[B, T, H]`` float32 in [0, 2].
        scale: logit scale, default ``D ** -0.5``.
        block_size: ``BT``, a power of two >= 16.
    Returns:
        ``[B, T, H, D]`` in q's dtype. No gradient: inputs that require one raise ``ValueError``
        (unless grad mode is off).
    """
    B, T, H, D, scale = _validate(q, k, v, w, beta, scale, block_size)
    BT = block_size
    NB = -(-T // BT)
    heads_first = lambda x: x.transpose(1, 2).reshape(B * H, T, D).contiguous()  # noqa: E731
    Tm, TW, K_end, Q_start = block_factors(q, k, w, beta, BT)
    qh, kh, vh, wh = heads_first(q), heads_first(k), heads_first(v), heads_first(w)
    o = torch.empty_like(qh)
    # float32 inputs: exact float32 products; 16-bit inputs: tf32 tensor-core products of the float32 tiles
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    _teaching_fwd_kernel[(NB, B * H)](qh, kh, vh, wh, Tm, TW, K_end, Q_start, o, scale, T, NB,
                                      D=D, BT=BT, PREC=prec)
    return o.view(B, H, T, D).transpose(1, 2).contiguous()
