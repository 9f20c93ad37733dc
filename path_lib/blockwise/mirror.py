"""The Triton kernels' forward pass, phase by phase, in plain PyTorch: a mirror to read beside the kernels.

:func:`blockwise_path_attention` computes causal PaTH attention (PaTH-FoX with a gate) with the same
decomposition as ``path_lib.kernels.path_attention``: the same blocks of ``BT`` tokens, the same segments of
``SB`` blocks, the same phases in the same launch order, the same intermediate tensors under the
kernels' names, the same online-softmax order (base-2 exponentials, the gate reference ``gref``), and
optionally the same split of the earlier segments onto ``FR``-row tiles. It computes in float64 for
float64 ``q`` and in float32 otherwise, and it is differentiable by autograd in every input.
``path_attention(impl="blockwise")`` runs it.

Notation (row-vector convention, as in ``kernels/path_lib/kernels/_triton_kernels.py``). Block ``b`` holds ``BT``
tokens with directions ``W_b`` (rows) and strengths ``beta_b``; its transforms multiply to
``P_b = I - W_b^T T_b W_b`` with the UT matrix ``T_b = N diag(beta)``, ``N = (I + A)^-1``,
``A = strictLower(diag(beta) W W^T)``.

* ``K->_b`` (``KA``): the keys of block ``b`` moved to the block's end; ``M_b = T_b strictLower(W_b K_b^T)``.
* A segment is ``SB`` consecutive blocks (the last one may be shorter); ``NS`` segments in all.
  ``R_j`` (``RS``) is the product of the blocks after block ``j`` inside its segment, ``Kseg_j``
  (``KS``) = ``K->_j R_j^T`` the keys moved to their segment's end, ``Seg_k`` (``SEG``) segment ``k``'s
  whole product.
* ``Om(kc, k) = Seg_{kc-1} ... Seg_{k+1}`` (``OM``, stored triangularly at ``kc (kc - 1) / 2 + k``):
  a query state at the start of segment ``kc`` times ``Om(kc, k)`` is that state at the end of
  segment ``k``.
* ``Q0`` (``Q0``): each query moved to the start of its own segment (diagonal block, then the thin
  scan ``Q <- Q - (Q W^T)(T W)`` over the earlier blocks of its segment).

The forward, in launch order (:func:`forward`):

1. per block and key head: ``T``, ``N`` (:func:`ut`); ``T W``, ``M``, ``K->`` (:func:`prep`);
2. per segment and key head: ``R_j``, ``Kseg``, ``Seg`` (:func:`seg_fwd`); ``Om`` (:func:`pair`).
   Skipped with one segment (``NS == 1``), as the kernels do;
3. per query block and query head (:func:`fwd`): the diagonal block by the UT all-pairs form,
   the own segment by the thin scan against ``K->`` (right to left), ``Q0``; then the earlier
   segments (:func:`earlier_segments`: right to left, each one ``Q0 Om`` and plain attention
   against ``Kseg``, its blocks left to right), unless the forward is split (``FR > BT``), where
   :func:`fwd_inter` continues the online softmax over the earlier segments on ``FR``-row tiles.

Mapping, mirror function -> kernel (``kernels/path_lib/kernels/``: the launches in ``_precompute.py``,
``_forward.py`` and ``_backward.py``; every kernel by name in ``_triton_kernels.py``):

=============================  ===========================================  =====================================
mirror (this module)           kernel                                       computes
=============================  ===========================================  =====================================
``blockwise_path_attention``   ``_path.path_attention``                     checks, padding to whole blocks,
                                                                            ``cu_seqlens`` packing, block and
                                                                            segment lengths
``gate_cumsum``                ``_path._gate_cumsum``                       ``G = cumsum(g)``, ``[B, H, T]``
``forward``                    ``_path._forward_impl``                      the phases below, in launch order
``precompute``                 ``_path._precompute``                        phases 1 and 2
``ut``                         ``_triton_kernels._ut_a_kernel``             ``A``, then ``N``, ``T``, per
                               then ``_triton_kernels._ut_kernel``          block
``prep``                       ``_triton_kernels._prep_kernel``             ``T W``, ``M``, ``K->`` per block
``seg_fwd``                    ``_triton_kernels._seg_fwd_kernel``          ``R_j``, ``Kseg``, ``Seg`` per segment
``pair``                       ``_triton_kernels._pair_kernel``             ``Om(kc, k)``
``fwd``                        ``_triton_kernels._fwd_kernel``              diagonal block, own segment, ``Q0``
``earlier_segments``           ``_triton_kernels._earlier_segments``        earlier segments (online softmax)
``fwd_inter``                  ``_triton_kernels._fwd_inter_kernel``        earlier segments on ``FR`` rows
``online_softmax_step``        the update written in both loops above       ``m``, ``l``, ``acc``
=============================  ===========================================  =====================================

How a kernel grid becomes tensors here: a grid axis over blocks, tiles or segments is a tensor axis
(``NB``, ``NQ``, ``NS``); the batch-and-head axis is the leading ``[B, H]``. A loop whose trip count
differs between programs (the own-segment scan: ``c - a`` blocks for query block ``c`` in a segment
starting at block ``a``; the earlier segments: ``c // SB`` of them) runs to the largest count here,
and a program whose loop has ended keeps its state (``torch.where`` on an ``active`` mask over that
axis; the masked-out branch always reads real, finite data). Loop bounds are Python integers and the
masks are built on the device, so no phase synchronises with it (only ``cu_seqlens`` is read on the
host, as the kernels do). Inside: heads first, blocked, ``[B, H, NB, BT, D]`` for token tensors,
``[B, H, NB, BT, BT]`` per block, ``[B, H, NS, D, D]`` per segment; the kernels address the same
numbers in ``[B, T, H, D]`` storage.

Not mirrored: the kernels' precision by role (fp16 / tf32 transports, tf32x3), the UT solve's
16 x 16 block inversion (an exact triangular solve here), the head-dim-32 padding on Hopper, the
out-of-shared-memory fallbacks, the forward-only longer segments for half-precision inputs
(``_FWD_ONLY_SEG_BLOCKS``), and the backward kernels: gradients here come from autograd through
this forward. The value head dim may differ from ``D`` here (the kernels need ``Dv == D``).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..validation import (check_block_size, check_bool, check_cu_seqlens, check_int, check_path_params, check_qkv,
                          check_scale)
from ..theory.costs import default_seg_blocks

__all__ = ["blockwise_path_attention", "forward", "precompute", "ut", "prep", "seg_fwd", "pair", "fwd",
           "earlier_segments", "fwd_inter", "online_softmax_step", "gate_cumsum", "LOG2E"]

#: ``log2(e)``: the kernels' logits are in base-2 units (``exp2``), ``s2 = scale log2(e) S``.
LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------------------------
# layout helpers (the kernels' padding and addressing)
# ----------------------------------------------------------------------------------------------

def _blocks(x: torch.Tensor, BT: int) -> torch.Tensor:
    """``[B, T, H, ...]`` (T a multiple of BT) -> heads first, blocked: ``[B, H, NB, BT, ...]``."""
    B, T, H = x.shape[:3]
    return x.reshape(B, T // BT, BT, H, *x.shape[3:]).movedim(3, 1)


def _unblocks(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, NB, BT, ...]`` -> ``[B, NB * BT, H, ...]``."""
    B, H, NB, BT = x.shape[:4]
    return x.movedim(1, 3).reshape(B, NB * BT, H, *x.shape[4:])


def _pad_time(x: torch.Tensor, Tp: int) -> torch.Tensor:
    """Zero-pad ``[B, T, ...]`` to ``Tp`` rows at the end (``_path._pad_time``): zero q, k, v and zero
    w, beta, i.e. identity transforms, which causality keeps out of every real row."""
    T = x.shape[1]
    if Tp == T:
        return x
    return torch.nn.functional.pad(x, [0, 0] * (x.dim() - 2) + [0, Tp - T])


def _query_heads(x: torch.Tensor, grp: int) -> torch.Tensor:
    """Key-head tensor ``[B, Hk, ...]`` -> ``[B, Hk * grp, ...]``: query head ``h`` reads key head
    ``h // grp`` (``_triton_kernels._query_head``)."""
    return x if grp == 1 else x.repeat_interleave(grp, dim=1)


def _keep(active: torch.Tensor, new, old):
    """Per program (tensor axis 2), the new state where its loop is still running, else the old one.

    ``active``: bool ``[N]`` over axis 2 of every ``[B, H, N, ...]`` tensor in ``new`` / ``old``."""
    out = []
    for a, b in zip(new, old):
        mask = active.view(-1, *([1] * (a.dim() - 3)))
        out.append(torch.where(mask, a, b))
    return tuple(out)


def gate_cumsum(g: torch.Tensor) -> torch.Tensor:
    """``G = cumsum(g)`` over time (``_path._gate_cumsum``). g: ``[B, T, H]`` -> G ``[B, H, T]``."""
    return torch.cumsum(g.transpose(1, 2), dim=-1)


def online_softmax_step(m, l, acc, s2, vb):
    """One key tile into the running softmax of a query tile, base 2 (the update that
    ``_fwd_kernel``'s own-segment loop and ``_earlier_segments`` both write out).

    Args:
        m, l: ``[..., R]`` running maximum and sum (base-2 logits); acc: ``[..., R, Dv]`` unnormalised output.
        s2: ``[..., R, BT]`` the tile's logits in base-2 units; vb: ``[..., BT, Dv]`` its values.
    Returns:
        ``(m, l, acc)`` after the tile.
    """
    m_new = torch.maximum(m, s2.amax(-1))
    alpha = torch.exp2(m - m_new)
    p = torch.exp2(s2 - m_new[..., None])
    return m_new, l * alpha + p.sum(-1), acc * alpha[..., None] + p @ vb


# ----------------------------------------------------------------------------------------------
# phase 1: per block (per key head)
# ----------------------------------------------------------------------------------------------

def ut(W: torch.Tensor, beta: torch.Tensor):
    """The UT transform of every block (``_ut_a_kernel``, then ``_ut_kernel``).

    ``A = strictLower(diag(beta) W W^T)`` (the first kernel), ``N = (I + A)^-1``, ``T = N diag(beta)``
    (the second), so that the block's product is ``P = I - W^T T W``. The second kernel inverts the
    16 x 16 diagonal blocks of ``I + A`` by substitution and merges them; here one exact unit-triangular
    solve.

    Args:
        W: ``[B, Hk, NB, BT, D]`` directions; beta: ``[B, Hk, NB, BT]``.
    Returns:
        ``(TM, NM)``: ``T`` and ``N``, ``[B, Hk, NB, BT, BT]`` each (lower triangular).
    """
    BT = W.shape[-2]
    eye = torch.eye(BT, dtype=W.dtype, device=W.device)
    A = torch.tril(beta[..., :, None] * (W @ W.transpose(-1, -2)), diagonal=-1)
    NM = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    return NM * beta[..., None, :], NM


def prep(K: torch.Tensor, W: torch.Tensor, TM: torch.Tensor):
    """Per block, after :func:`ut` (``_prep_kernel``): ``T W``, ``M = T strictLower(W K^T)`` and the keys
    moved to the block's end, ``K-> = K - M^T W`` (row ``r``: ``(H_end ... H_{r+1} k_r)^T``).

    Args:
        K, W: ``[B, Hk, NB, BT, D]``; TM: ``[B, Hk, NB, BT, BT]``.
    Returns:
        ``(TW, MM, KA)``: ``T W`` ``[B, Hk, NB, BT, D]``, ``M`` ``[B, Hk, NB, BT, BT]``, ``K->`` ``[B, Hk, NB, BT, D]``.
    """
    TW = TM @ W
    MM = TM @ torch.tril(W @ K.transpose(-1, -2), diagonal=-1)
    KA = K - MM.transpose(-1, -2) @ W
    return TW, MM, KA


# ----------------------------------------------------------------------------------------------
# phase 2: per segment (per key head)
# ----------------------------------------------------------------------------------------------

def seg_fwd(W: torch.Tensor, TW: torch.Tensor, KA: torch.Tensor, SB: int):
    """Per segment (``_seg_fwd_kernel``): from the segment's last block to its first, ``R = I``; for
    block ``j``: store ``R_j = R``, ``Kseg_j = K->_j R_j^T``, then ``R <- R - (R W_j^T)(T W)_j``; at the
    end ``Seg = R = R_0 P_0``, the segment's whole product.

    The segments are a tensor axis here: the blocks are viewed as ``[NS, SB]``, a short last segment
    padded with identity blocks at its end (zero ``W`` and ``T W``), which leave ``R`` unchanged, as the
    kernel's loop starting at the segment's last real block does.

    Args:
        W, TW, KA: ``[B, Hk, NB, BT, D]``; SB: blocks per segment.
    Returns:
        ``(RS, KS, SEG)``: ``R_j`` ``[B, Hk, NB, D, D]``, ``Kseg`` ``[B, Hk, NB, BT, D]``, ``Seg`` ``[B, Hk, NS, D, D]``.
    """
    B, H, NB, BT, D = W.shape
    NS = -(-NB // SB)

    def segs(x):  # [B, H, NB, ...] -> [B, H, NS, SB, ...], identity blocks appended
        pad = NS * SB - NB
        if pad:
            x = torch.cat([x, x.new_zeros(B, H, pad, *x.shape[3:])], dim=2)
        return x.reshape(B, H, NS, SB, *x.shape[3:])

    Ws, TWs, KAs = segs(W), segs(TW), segs(KA)
    r = torch.eye(D, dtype=W.dtype, device=W.device).expand(B, H, NS, D, D)
    rs_back: list[torch.Tensor] = []                   # R_j, Kseg_j for j = SB-1, ..., 0
    ks_back: list[torch.Tensor] = []
    for jj in range(SB):
        j = SB - 1 - jj
        rs_back.append(r)
        ks_back.append(KAs[:, :, :, j] @ r.transpose(-1, -2))
        r = r - (r @ Ws[:, :, :, j].transpose(-1, -2)) @ TWs[:, :, :, j]
    RS = torch.stack(rs_back[::-1], dim=3).reshape(B, H, NS * SB, D, D)[:, :, :NB]
    KS = torch.stack(ks_back[::-1], dim=3).reshape(B, H, NS * SB, BT, D)[:, :, :NB]
    return RS, KS, r


def pair(SEG: torch.Tensor) -> torch.Tensor:
    """Segment-pair products (``_pair_kernel``, one program per later segment ``kc``):
    ``m = I``; for ``k = kc-1 ... 0``: store ``Om(kc, k) = m``, then ``m <- m Seg_k``; so
    ``Om(kc, k) = Seg_{kc-1} ... Seg_{k+1}``.

    Args:
        SEG: ``[B, Hk, NS, D, D]`` with ``NS >= 2``.
    Returns:
        OM ``[B, Hk, NS (NS - 1) / 2, D, D]``, ``Om(kc, k)`` at index ``kc (kc - 1) / 2 + k``.
    """
    B, H, NS, D, _ = SEG.shape
    out: list[torch.Tensor] = []                        # Om(kc, 0), ..., Om(kc, kc-1) for kc = 1, 2, ...
    for kc in range(1, NS):
        m = torch.eye(D, dtype=SEG.dtype, device=SEG.device).expand(B, H, D, D)
        row = []                                         # Om(kc, k) for k = kc-1, ..., 0
        for j in range(kc):
            k = kc - 1 - j
            row.append(m)
            if k > 0:
                m = m @ SEG[:, :, k]
        out.extend(row[::-1])
    return torch.stack(out, dim=2)


def precompute(K: torch.Tensor, W: torch.Tensor, beta: torch.Tensor, SB: int) -> dict:
    """Phases 1 and 2, per key head (``_path._precompute``): :func:`ut`, :func:`prep`, then, with more
    than one segment, :func:`seg_fwd` and :func:`pair`. With one segment (``SB >= NB``) the segment
    products are skipped and ``KS = KA``, ``RS = SEG = OM = I`` (the kernels' placeholders).

    Args:
        K, W: ``[B, Hk, NB, BT, D]``; beta: ``[B, Hk, NB, BT]``; SB: blocks per segment.
    Returns:
        dict with ``TM, NM, MM`` ``[B, Hk, NB, BT, BT]``; ``TW, KA, KS`` ``[B, Hk, NB, BT, D]``;
        ``RS`` ``[B, Hk, NB, D, D]``; ``SEG`` ``[B, Hk, NS, D, D]``; ``OM`` ``[B, Hk, NS (NS-1)/2, D, D]``
        (one segment: ``[B, Hk, 1, D, D]`` identities for ``RS``, ``SEG`` and ``OM``).
    """
    B, H, NB, BT, D = W.shape
    NS = -(-NB // SB)
    TM, NM = ut(W, beta)
    TW, MM, KA = prep(K, W, TM)
    if NS == 1:
        eye = torch.eye(D, dtype=W.dtype, device=W.device).expand(B, H, 1, D, D)
        return dict(TW=TW, KA=KA, KS=KA, TM=TM, MM=MM, NM=NM, RS=eye, SEG=eye, OM=eye)
    RS, KS, SEG = seg_fwd(W, TW, KA, SB)
    return dict(TW=TW, KA=KA, KS=KS, TM=TM, MM=MM, NM=NM, RS=RS, SEG=SEG, OM=pair(SEG))


# ----------------------------------------------------------------------------------------------
# phase 3: attention (per query head)
# ----------------------------------------------------------------------------------------------

def earlier_segments(m, l, acc, Q0, KS, V, OM, G, ks, NS: int, SB: int, sl2: float, gref):
    """The earlier segments of each query tile (``_earlier_segments``), continuing its online softmax.

    For ``kseg = ks-1, ..., 0`` (right to left): the query state at segment ``kseg``'s end,
    ``qc = Q0 Om(ks, kseg)`` (one ``D x D`` product, by random access, nothing carried from segment to
    segment), then plain attention against that segment's keys moved to its end, ``Kseg``, block by
    block from the segment's first block to its last.

    Args:
        m, l: ``[B, H, NQ, QR]``; acc: ``[B, H, NQ, QR, Dv]``: the running softmax of ``NQ`` tiles of
            ``QR`` query rows (the rows of one tile lie in one segment).
        Q0: ``[B, H, NQ, QR, D]`` the queries at their segment's start.
        KS: ``[B, H, NB, BT, D]`` keys at their segment's end; V: ``[B, H, NB, BT, Dv]``.
        OM: ``[B, H, P, D, D]`` the pair products (:func:`pair`); G: ``[B, H, NB, BT]`` key gates or None.
        ks: long ``[NQ]``, each tile's segment; NS, SB: segments, blocks per segment.
        sl2: ``scale * log2(e)``; gref: ``[B, H, NQ]`` each tile's gate reference (or None).
    Returns:
        ``(m, l, acc)`` after every earlier segment.
    """
    for jk in range(NS - 1):
        active = ks > jk                                   # tiles with an earlier segment left
        kseg = (ks - 1 - jk).clamp(min=0)
        om = OM[:, :, (ks * (ks - 1)) // 2 + kseg]        # Om(ks, kseg): [B, H, NQ, D, D]
        qc = Q0 @ om
        for jb in range(SB):
            blk = kseg * SB + jb
            s2 = (qc @ KS[:, :, blk].transpose(-1, -2)) * sl2
            if G is not None:
                s2 = s2 - ((G[:, :, blk] - gref[..., None]) * LOG2E)[..., None, :]
            m, l, acc = _keep(active, online_softmax_step(m, l, acc, s2, V[:, :, blk]), (m, l, acc))
    return m, l, acc


def fwd(Q, K, V, W, TW, KA, KS, MM, OM, G, scale: float, SB: int, split: bool = False):
    """One program per query block and query head (``_fwd_kernel``), all blocks at once.

    1. Diagonal block: ``bm = tril(Q W^T)``; queries moved to the block's start ``qs = Q - bm (T W)``;
       logits ``S = tril(Q K^T) - bm M`` (the UT all-pairs form inside the block), causal; they start
       the online softmax. With a gate the keys enter as ``-(G_k - gref) log2(e)``, ``gref`` the
       block's largest ``G`` (one reference per program); the query's own ``G`` is a constant of its
       row and only enters the log-sum-exp.
    2. Own segment: for the blocks ``c-1, ..., a`` of the segment (right to left): logits
       ``qs K->^T``, the online-softmax step, then ``qs <- qs - (qs W^T)(T W)``. ``Q0 = qs`` after it.
    3. Unless ``split``: the earlier segments (:func:`earlier_segments`, on tiles of ``BT`` rows).

    Args:
        Q: ``[B, Hq, NB, BT, D]``; K, V, W, TW, KA, KS: ``[B, Hq, NB, BT, D or Dv]`` (each query head's
            key head); MM: ``[B, Hq, NB, BT, BT]``; OM: ``[B, Hq, P, D, D]``; G: ``[B, Hq, NB, BT]`` or None.
        scale: logit scale; SB: blocks per segment; split: leave the earlier segments to :func:`fwd_inter`.
    Returns:
        ``(O, LSE, Q0)``: ``O`` ``[B, Hq, NB, BT, Dv]`` (with ``split``, blocks outside the first segment
        hold their partial result, normalised: the kernel's ``OP``); ``LSE`` ``[B, Hq, NB, BT]``, the
        rows' log-sum-exp in base 2, the query's gate included; ``Q0`` ``[B, Hq, NB, BT, D]``.
    """
    B, H, NB, BT, D = Q.shape
    NS = -(-NB // SB)
    sl2 = scale * LOG2E
    causal = torch.ones(BT, BT, dtype=torch.bool, device=Q.device).tril()
    bm = (Q @ W.transpose(-1, -2)).masked_fill(~causal, 0.0)
    qs = Q - bm @ TW
    s2 = (Q @ K.transpose(-1, -2) - bm @ MM) * sl2
    gref = None
    if G is not None:
        gref = G.amax(-1)                                            # [B, H, NB]
        s2 = s2 - ((G - gref[..., None]) * LOG2E)[..., None, :]
    s2 = s2.masked_fill(~causal, float("-inf"))
    m = s2.amax(-1)
    p = torch.exp2(s2 - m[..., None])
    l, acc = p.sum(-1), p @ V

    c = torch.arange(NB, device=Q.device)                            # query block of each program
    for j in range(min(SB, NB) - 1):                                 # kernel: range(0, c - a)
        active = (c % SB) > j
        src = (c - 1 - j).clamp(min=0)                               # key block c - 1 - j
        s2 = (qs @ KA[:, :, src].transpose(-1, -2)) * sl2
        if gref is not None:                                         # (set exactly when G is)
            s2 = s2 - ((G[:, :, src] - gref[..., None]) * LOG2E)[..., None, :]
        m_, l_, acc_ = online_softmax_step(m, l, acc, s2, V[:, :, src])
        u = qs @ W[:, :, src].transpose(-1, -2)
        qs_ = qs - u @ TW[:, :, src]
        m, l, acc, qs = _keep(active, (m_, l_, acc_, qs_), (m, l, acc, qs))
    Q0 = qs

    if NS > 1 and not split:
        m, l, acc = earlier_segments(m, l, acc, Q0, KS, V, OM, G, c // SB, NS, SB, sl2, gref)
    O = acc / l[..., None]
    LSE = m + torch.log2(l)
    if gref is not None:
        LSE = LSE + (G - gref[..., None]) * LOG2E
    return O, LSE, Q0


def fwd_inter(Q0, KS, V, OM, G, O, LSE, scale: float, SB: int, FR: int):
    """The earlier segments on tiles of ``FR`` query rows (``_fwd_inter_kernel``), after
    :func:`fwd` with ``split``: a tile is ``FR / BT`` consecutive blocks of one segment (they share
    their ``Om``). Tiles of the first segment are finished. The others restart the online softmax from
    the partial result, ``m = LSE - (G_q - gref) log2(e)``, ``l = 1``, ``acc = O`` (``gref`` now the
    tile's largest ``G``), run :func:`earlier_segments` and normalise.

    Args:
        Q0, KS: ``[B, Hq, NB, BT, D]``; V, O: ``[B, Hq, NB, BT, Dv]``; OM: ``[B, Hq, P, D, D]``;
        G, LSE: ``[B, Hq, NB, BT]`` (G or None); FR: rows per tile, a multiple of ``BT`` whose blocks
            divide ``SB`` and ``NB``.
    Returns:
        ``(O, LSE)`` as :func:`fwd` returns them without ``split``.
    """
    B, H, NB, BT, D = Q0.shape
    NS = -(-NB // SB)
    NQ = NB * BT // FR

    def tiles(x):  # [B, H, NB, BT, ...] -> [B, H, NQ, FR, ...]
        return x.reshape(B, H, NQ, FR, *x.shape[4:])

    ks = (torch.arange(NQ, device=Q0.device) * FR // BT) // SB       # each tile's segment
    m, acc = tiles(LSE), tiles(O)
    l = torch.ones_like(m)
    gref = None
    if G is not None:
        gq = tiles(G)
        gref = gq.amax(-1)
        m = m - (gq - gref[..., None]) * LOG2E
    m, l, acc = earlier_segments(m, l, acc, tiles(Q0), KS, V, OM, G, ks, NS, SB, scale * LOG2E, gref)
    o = acc / l[..., None]
    lse = m + torch.log2(l)
    if gref is not None:                                             # (set exactly when G is)
        lse = lse + (gq - gref[..., None]) * LOG2E
    o, lse = _keep(ks > 0, (o, lse), (tiles(O), tiles(LSE)))
    return o.reshape(O.shape), lse.reshape(LSE.shape)


def forward(q, k, v, w, beta, G, scale: float, BT: int, SB: int, FR: Optional[int] = None):
    """The forward in launch order (``_path._forward_impl``) on padded inputs.

    Args:
        q: ``[B, T, Hq, D]``; k, w: ``[B, T, Hk, D]``; v: ``[B, T, Hk, Dv]``; beta: ``[B, T, Hk]``, with
            ``T`` a multiple of ``BT``, all in one float dtype; G: ``[B, Hq, T]`` cumulative log gates or None.
        scale: logit scale; BT: block length; SB: blocks per segment; FR: rows per tile of the split
            forward (None or ``BT``: no split).
    Returns:
        ``(o, saved)``: o ``[B, T, Hq, Dv]``; saved: the intermediates the kernels keep (blocked, heads
        first): ``LSE`` ``[B, Hq, NB, BT]`` (base 2), ``Q0`` ``[B, Hq, NB, BT, D]`` and
        :func:`precompute`'s tensors (per key head).
    """
    B, T, Hq, D = q.shape
    grp = Hq // k.shape[2]
    NB = T // BT
    NS = -(-NB // SB)
    pre = precompute(_blocks(k, BT), _blocks(w, BT), _blocks(beta, BT), SB)
    tile_rows = FR if FR is not None and FR > BT and NS > 1 else None   # None: no split
    kv = {name: _query_heads(pre[name], grp) for name in ("TW", "KA", "KS", "MM", "OM")}
    Wq, Vq, Kq = (_query_heads(_blocks(x, BT), grp) for x in (w, v, k))
    Gb = None if G is None else G.reshape(B, Hq, NB, BT)
    O, LSE, Q0 = fwd(_blocks(q, BT), Kq, Vq, Wq, kv["TW"], kv["KA"], kv["KS"], kv["MM"], kv["OM"], Gb,
                     scale, SB, tile_rows is not None)
    if tile_rows is not None:
        O, LSE = fwd_inter(Q0, kv["KS"], Vq, kv["OM"], Gb, O, LSE, scale, SB, tile_rows)
    return _unblocks(O), dict(pre, LSE=LSE, Q0=Q0)


# ----------------------------------------------------------------------------------------------
# public entry point
# ----------------------------------------------------------------------------------------------


def _check_fwd_rows(fwd_rows, BT: int, SB: int, NB: int) -> Optional[int]:
    if fwd_rows is None:
        return None
    check_int(fwd_rows, "fwd_rows", minimum=1)
    nblk = fwd_rows // BT
    if fwd_rows % BT or (NB > SB and (SB % nblk or NB % nblk)):
        raise ValueError(f"fwd_rows must be a multiple of block_size ({BT}) whose blocks divide the blocks "
                         f"per segment ({SB}) and the padded sequence's blocks ({NB}), got {fwd_rows}")
    return fwd_rows


def blockwise_path_attention(q, k, v, w, beta, g=None, *, scale=None, block_size: int = 64,
                             seg_blocks: Optional[int] = None, cu_seqlens=None,
                             fwd_rows: Optional[int] = None, check_values: bool = True) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX with ``g``) by the kernels' decomposition, in PyTorch.

    Args:
        q: ``[B, T, Hq, D]``; k: ``[B, T, Hk, D]``, ``Hq`` a multiple of ``Hk`` (query head ``h`` uses key
            head ``h // (Hq // Hk)``); v: ``[B, T, Hk, Dv]``.
        w: ``[B, T, Hk, D]`` unit rows, float32 (or float64); beta: ``[B, T, Hk]`` in [0, 2], float32 (or float64).
        g: optional ``[B, T, Hq]`` log forget gates (<= 0), added unscaled: ``+ G_i - G_j``, ``G = cumsum(g)``.
        scale: logit scale, default ``D ** -0.5``.
        block_size: ``BT``, tokens per block (any positive int; the kernels take 16, 32 or 64).
        seg_blocks: ``SB``, blocks per segment; default the kernels' choice for a call that records
            gradients (``path_lib.theory.costs.default_seg_blocks``: about ``sqrt(2 T / D)`` segments, at least
            2 blocks each). ``SB >= NB`` is one segment: the thin scan over the whole sequence.
        cu_seqlens: optional int32/int64 ``[N + 1]`` offsets of sequences packed along T (B == 1); each
            is padded to whole blocks of the longest and run as one batch, as the kernels do.
        fwd_rows: ``FR``, query rows per tile of the split forward (the kernels use 128 for 16-bit inputs at
            ``BT = 64``, ``D`` 64 or 128); None: no split.
        check_values: also check values (finite, beta range, unit w, g <= 0); shapes and dtypes always.
    Returns:
        ``[B, T, Hq, Dv]`` in q's dtype; computed in float64 for float64 q, else float32.
    """
    check_bool(check_values, "check_values")
    B, T, Hq, Hk, D = check_qkv(q, k, v, finite=check_values)
    check_path_params(q, k, w, beta, g, check_values=check_values)
    scale = check_scale(scale, D)
    BT = check_block_size(block_size)
    if seg_blocks is not None:
        check_int(seg_blocks, "seg_blocks", minimum=1)
    Dv = v.shape[3]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    if cu_seqlens is not None:
        cs = check_cu_seqlens(cu_seqlens, B, T)
    if T == 0:
        if fwd_rows is not None:
            check_int(fwd_rows, "fwd_rows", minimum=1)
        return q.new_zeros(B, 0, Hq, Dv)
    x = [t.to(dt) for t in (q, k, v, w, beta)] + [None if g is None else g.to(dt)]

    if cu_seqlens is None:
        SB = seg_blocks if seg_blocks is not None else default_seg_blocks(T, D, BT)
        Tp = -(-T // BT) * BT
        FR = _check_fwd_rows(fwd_rows, BT, SB, Tp // BT)
        qp, kp, vp, wp, bp, gp = (None if t is None else _pad_time(t, Tp) for t in x)
        G = None if gp is None else gate_cumsum(gp)      # the padded tail keeps G_{T-1} (zero gates)
        o, _ = forward(qp, kp, vp, wp, bp, G, scale, BT, SB, FR)
        return o[:, :T].to(q.dtype)

    lens = [b - a for a, b in zip(cs, cs[1:])]
    Tmax = max(max(lens), 1)
    SB = seg_blocks if seg_blocks is not None else default_seg_blocks(Tmax, D, BT)
    Tp = -(-Tmax // BT) * BT
    FR = _check_fwd_rows(fwd_rows, BT, SB, Tp // BT)
    # gather index into [N, Tp]: the packed row, or T (an appended zero row) for padding
    idx = torch.full((len(lens), Tp), T, dtype=torch.long)
    for i, (s0, L) in enumerate(zip(cs[:-1], lens)):
        idx[i, :L] = torch.arange(s0, s0 + L)
    idx = idx.to(q.device)

    def pack(t):  # [1, T, ...] -> [N, Tp, ...]
        return torch.cat([t[0], t.new_zeros(1, *t.shape[2:])], 0)[idx]

    qp, kp, vp, wp, bp, gp = (None if t is None else pack(t) for t in x)
    G = None if gp is None else gate_cumsum(gp)
    o, _ = forward(qp, kp, vp, wp, bp, G, scale, BT, SB, FR)
    valid = (idx < T).reshape(-1)
    return o.reshape(-1, Hq, Dv)[valid].unsqueeze(0).to(q.dtype)
